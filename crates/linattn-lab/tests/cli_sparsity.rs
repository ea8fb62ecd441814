//! `linattn sparsity` end to end: a small run writes a self-describing JSON file and two SVG
//! plots whose records agree with the printed table and with the SPEC §7 closed forms; bad
//! parameters exit with status 2, name the problem and write nothing.

mod cli_common;

use cli_common::{assert_ok, linattn, read_json};
use std::path::Path;
use std::process::Output;

/// `linattn sparsity` with `args`, writing its JSON to `json`.
fn sparsity(json: &Path, args: &[&str]) -> Output {
    let mut all = vec!["sparsity", "--json", json.to_str().unwrap()];
    all.extend_from_slice(args);
    linattn(&all)
}

#[test]
fn small_run_writes_json_and_plots_matching_the_closed_forms() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("sparsity.json");
    let out = sparsity(
        &json,
        &[
            "--n",
            "512,8192",
            "--gammas",
            // Softmax's delta-method bias needs n ≫ e^{4γ²}: γ ≤ 1 at n = 8192.
            "0.5,1",
            "--n-gamma",
            "8192",
            "--gamma",
            "1",
            "--repeats",
            "8",
            "--svg-dir",
            dir.path().to_str().unwrap(),
        ],
    );
    assert_ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let file = read_json(&json);
    assert_eq!(file["kind"], "sparsity");
    assert!(!file["environment"]["device_name"]
        .as_str()
        .unwrap()
        .is_empty());
    let records = file["records"].as_array().unwrap();
    // 6 cases × 2 n, then the 5 keyed cases × 2 γ.
    assert_eq!(records.len(), 6 * 2 + 5 * 2);
    for r in records {
        let case = r["case"].as_str().unwrap();
        let (measured, se) = (r["measured"].as_f64().unwrap(), r["se"].as_f64().unwrap());
        let closed = r["closed_form"]
            .as_f64()
            .expect("every case has a closed form at D = 8");
        let bias = r["bias"].as_f64().unwrap();
        if case == "decay" {
            assert!(r["gamma"].is_null() && se == 0.0);
            assert!((measured - closed).abs() < 1e-10, "{r}");
        } else {
            assert!(se > 0.0, "{r}");
            assert!(
                (measured - closed).abs() <= 4.0 * se + 2.0 * bias.abs(),
                "{r}"
            );
        }
        // The table prints every record's measured value.
        assert!(
            stdout.contains(&format!("{measured:.5}")),
            "{case}: not in the table"
        );
    }
    assert!(
        stdout.contains("| decay | n | — | — | 0.990 | 512 |"),
        "{stdout}"
    );
    for name in ["sparsity_vs_n.svg", "sparsity_vs_gamma.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(name)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("softmax") && svg.contains("1+cos"));
    }
}

#[test]
fn no_closed_form_prints_a_dash_and_null() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cos.json");
    // 1+cos has no trustworthy quadrature below D = 4.
    let out = sparsity(
        &json,
        &[
            "--cases",
            "1+cos",
            "--dim",
            "3",
            "--n",
            "256",
            "--gammas",
            "1",
            "--n-gamma",
            "256",
            "--repeats",
            "2",
        ],
    );
    assert_ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| 1+cos"))
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert!(
        rows.iter().all(|r| r.trim_end().ends_with("| — |")),
        "{stdout}"
    );
    let file = read_json(&json);
    let records = file["records"].as_array().unwrap();
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r["closed_form"].is_null()));
}

#[test]
fn bad_parameters_exit_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("never.json");
    for (args, what) in [
        (&["--gamma", "0"][..], "γ"),
        (&["--gammas", "1,-2"][..], "γ"),
        (&["--beta", "NaN"][..], "β"),
        (&["--lambda", "1.5"][..], "λ"),
        (&["--lambda", "0"][..], "λ"),
        (&["--n", "0"][..], "n"),
        (&["--cases", "softmax,gelu"][..], "gelu"),
        (&["--repeats", "1"][..], "repeats"),
    ] {
        let out = sparsity(&json, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(what), "{args:?}: {stderr}");
        assert!(
            !dir.path().join("never.json").exists(),
            "{args:?} wrote a file"
        );
    }
}
