//! `linattn mufu` end to end on the simulator, which computes the `.approx` functions
//! correctly rounded: its four tables (ex2neg, ex2 of negative x, included) are all zeros,
//! rsqrt and rcp verify with no mismatch, while the ex2 tables (exact at the 2^24 captured
//! fractions only) fail the verification for inputs with more than 24 fraction bits, of
//! either sign, on every grid: the check can fail. The written tables then load into
//! `linattn check --mufu-tables`, which says whether ex2neg.mufu is there (a directory
//! without it still loads) and refuses a directory holding a damaged one.

use std::path::Path;
use std::process::{Command, Output};

use linattn_testkit::Platform;
use serde_json::Value;

fn main() {
    let mut trials = Vec::new();
    trials.extend(linattn_testkit::stamp_executors!(
        for platform in [Platform::Sim] =>
            "mufu_on_the_simulator_verifies_rsqrt_and_rcp_and_not_fine_ex2",
            mufu_on_the_simulator_verifies_rsqrt_and_rcp_and_not_fine_ex2()
    ));
    trials.push(linattn_testkit::host(
        "bad_arguments_exit_2_naming_the_problem",
        bad_arguments_exit_2_naming_the_problem,
    ));
    linattn_testkit::run(trials)
}

fn linattn(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_linattn"))
        .args(args)
        .current_dir(dir)
        .env_remove("LINATTN_MUFU_TABLES")
        .output()
        .expect("run linattn")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn variant<'a>(form: &'a Value, name: &str) -> &'a Value {
    form["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["variant"] == name)
        .unwrap_or_else(|| panic!("no variant {name} in {form}"))
}

fn mufu_on_the_simulator_verifies_rsqrt_and_rcp_and_not_fine_ex2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = linattn(
        d,
        &[
            "mufu",
            "--platform",
            "sim",
            "--out",
            "tables",
            "--entries",
            "4096",
            "--samples",
            "4096",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("mufu: "), "{}", text(&out));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("tables/mufu.json")).unwrap())
            .unwrap();
    assert_eq!(json["kind"], "simulator");
    let tables = json["tables"].as_array().unwrap();
    let ops: Vec<&str> = tables.iter().map(|t| t["op"].as_str().unwrap()).collect();
    assert_eq!(ops, ["ex2", "rsqrt", "rcp", "ex2neg"]);
    for t in tables {
        // Correctly rounded by construction: every captured entry is 0 ulps off.
        let h = &t["deviation_histogram"];
        assert_eq!(h["0"], 4096, "{t}");
        assert_eq!(t["entries"], 4096, "{t}");
        assert!(d.join("tables").join(t["file"].as_str().unwrap()).is_file());
    }
    let ex2neg = &tables[3];
    assert_eq!(ex2neg["file"], "ex2neg.mufu");
    assert_eq!(ex2neg["capture_form"], "ex2.approx.ftz.f32");
    assert_eq!(ex2neg["stride"], 4096);
    let forms = json["verification"].as_array().unwrap();
    for form in forms {
        let name = form["form"].as_str().unwrap();
        if name.starts_with("ex2") {
            // Every grid fails somewhere on the fine inputs (2^x between two captured f),
            // of either sign: negative x come from the ex2neg table.
            for v in form["variants"].as_array().unwrap() {
                for class in ["fine", "fine negative"] {
                    let fine = &v["classes"][class];
                    assert!(
                        fine["mismatches"].as_u64().unwrap() > 0,
                        "{name} {class} {v}"
                    );
                }
            }
            // On the captured grid, inputs that are captured fractions (plus an integer)
            // are predicted exactly by the bare MUFU form, x < 0 (|x| = m + g, g captured
            // in ex2neg) as x > 0. (ex2.approx.f32 below -126 is predicted as the SASS
            // computes it, MUFU.EX2(x/2) squared, which a correctly rounded simulator is
            // not.) Both signs are sampled plentifully in both classes.
            let classes = &variant(form, "24-truncate")["classes"];
            for class in ["grid", "grid negative"] {
                let grid = &classes[class];
                assert!(
                    grid["checked"].as_u64().unwrap() > 500,
                    "{name} {class} {grid}"
                );
                if name == "ex2.approx.ftz.f32" {
                    assert_eq!(grid["mismatches"], 0, "{name} {class} {grid}");
                }
            }
            for class in ["fine", "fine negative"] {
                let c = &classes[class];
                let drawn = c["checked"].as_u64().unwrap() + c["uncovered"].as_u64().unwrap();
                assert!(drawn > 500, "{name} {class} {c}");
            }
        } else {
            let v = variant(form, "mantissa");
            for (class, c) in v["classes"].as_object().unwrap() {
                assert_eq!(c["mismatches"], 0, "{name} {class}: {c}");
            }
            let normal = &v["classes"]["normal"];
            assert!(
                normal["checked"].as_u64().unwrap() > 1000,
                "{name} {normal}"
            );
        }
    }
    // The tables load into check (as-compiled only), saying whether ex2 of negative x has
    // its own table; without ex2neg.mufu (a capture before it) they load all the same.
    let as_compiled = |dir: &str| {
        linattn(
            d,
            &[
                "check",
                "--backends",
                "cpu/noncausal/f32",
                "--numerics",
                "as-compiled",
                "--mufu-tables",
                dir,
            ],
        )
    };
    let with = as_compiled("tables");
    assert!(with.status.success(), "{}", text(&with));
    assert!(
        text(&with).contains("ex2 of x < 0 from ex2neg.mufu"),
        "{}",
        text(&with)
    );
    std::fs::create_dir_all(d.join("old")).unwrap();
    for f in ["ex2.mufu", "rsqrt.mufu", "rcp.mufu"] {
        std::fs::copy(d.join("tables").join(f), d.join("old").join(f)).unwrap();
    }
    let without = as_compiled("old");
    assert!(without.status.success(), "{}", text(&without));
    assert!(
        text(&without).contains("no ex2neg.mufu"),
        "{}",
        text(&without)
    );
    // A damaged one is refused by name.
    let wrong_mode = linattn(
        d,
        &[
            "check",
            "--backends",
            "cpu/noncausal/f32",
            "--mufu-tables",
            "tables",
        ],
    );
    assert_eq!(wrong_mode.status.code(), Some(2), "{}", text(&wrong_mode));
    assert!(
        text(&wrong_mode).contains("as-compiled"),
        "{}",
        text(&wrong_mode)
    );
    let rcp = d.join("tables/rcp.mufu");
    let bytes = std::fs::read(&rcp).unwrap();
    std::fs::write(&rcp, &bytes[..bytes.len() - 3]).unwrap();
    let damaged = as_compiled("tables");
    assert_eq!(damaged.status.code(), Some(2), "{}", text(&damaged));
    assert!(
        text(&damaged).contains("rcp.mufu") && text(&damaged).contains("truncated"),
        "{}",
        text(&damaged)
    );
}

fn bad_arguments_exit_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 2] = [
        (
            &["mufu", "--platform", "tpu", "--out", "x"],
            "expected cuda or sim",
        ),
        (
            &[
                "mufu",
                "--platform",
                "sim",
                "--out",
                "x",
                "--entries",
                "1000",
            ],
            "power of two",
        ),
    ];
    for (args, want) in cases {
        let out = linattn(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(want), "{args:?}: {}", text(&out));
    }
}
