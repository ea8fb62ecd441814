//! The H100's MUFU tables as committed (`bench-results/h100/2026-11-26/mufu/`: `linattn mufu
//! --platform cuda`), against the device results its verification kept as examples in
//! `mufu.json`: every example of a (form, input class) that the prediction now covers is
//! reproduced bit for bit (NaN as any NaN). Those of rsqrt.approx.f32's special inputs were
//! the device's finite results for subnormal inputs, which the earlier prediction (±inf)
//! missed: with the SASS's scaling (`MufuTables::predict_on`) they hold. ex2's misses (the
//! device 1 ulp under the table for negative inputs) are not covered by that capture's
//! prediction; the capture of 2026-11-27 (`bench-results/h100/2026-11-27/mufu/`) has the
//! negative table, and every device result its verification kept, of every ex2 grid it
//! scored and every class of input, x < 0 included, is reproduced from it.

use std::path::Path;

use linattn_ptxsim::exec::mufu_file;
use linattn_ptxsim::MufuForm;

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results/h100/2026-11-26/mufu")
}

/// The capture of 2026-11-27, the first with `ex2neg.mufu` (ex2 of x < 0).
fn dir_with_ex2neg() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results/h100/2026-11-27/mufu")
}

fn hex(v: &serde_json::Value) -> u32 {
    let s = v.as_str().expect("a hex string");
    u32::from_str_radix(s.trim_start_matches("0x"), 16).expect("hex")
}

#[test]
fn rsqrt_of_subnormals_is_what_the_h100_returned() {
    let tables = mufu_file::load_dir(&dir()).expect("the committed tables");
    let text = std::fs::read_to_string(dir().join("mufu.json")).expect("mufu.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let form = json["verification"]
        .as_array()
        .expect("verification")
        .iter()
        .find(|f| f["form"] == "rsqrt.approx.f32")
        .expect("rsqrt.approx.f32 verified");
    let examples = form["variants"][0]["classes"]["special"]["examples"]
        .as_array()
        .expect("examples");
    assert!(!examples.is_empty(), "no examples to check");
    for e in examples {
        let (x, device) = (f32::from_bits(hex(&e[0])), f32::from_bits(hex(&e[1])));
        let got = tables.predict(MufuForm::Rsqrt, x).expect("a table entry");
        let same = got.to_bits() == device.to_bits() || (got.is_nan() && device.is_nan());
        assert!(
            same,
            "rsqrt.approx.f32({x:e}): predicted {got:e}, the H100 {device:e}"
        );
    }
}

/// The verification of 2026-11-27 scored each candidate ex2 grid against the device on
/// 5 x 2^22 random inputs and kept (input, device, that grid's prediction) of the first
/// mismatches of each: device results at the inputs where a wrong grid fails, x < 0 among
/// them. The tables with `ex2neg.mufu`, under the grid the capture chose, give each of
/// them bit for bit (the H100 itself found 0 mismatches on all 20 971 520 inputs).
#[test]
fn ex2_device_results_of_every_scored_grid_are_reproduced_with_ex2neg() {
    let tables = mufu_file::load_dir(&dir_with_ex2neg()).expect("the committed tables");
    assert!(
        tables.ex2_negative.is_some(),
        "the 2026-11-27 capture has ex2neg.mufu"
    );
    let text = std::fs::read_to_string(dir_with_ex2neg().join("mufu.json")).expect("mufu.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        json["ex2_grid"], "24-truncate",
        "the grid the capture chose"
    );
    let mut checked = 0;
    let mut negative = 0;
    for form in [MufuForm::Ex2Ftz, MufuForm::Ex2] {
        let verified = json["verification"]
            .as_array()
            .expect("verification")
            .iter()
            .find(|f| f["form"] == form.ptx())
            .unwrap_or_else(|| panic!("{} verified", form.ptx()));
        for variant in verified["variants"].as_array().expect("variants") {
            let classes = variant["classes"].as_object().expect("classes");
            for (class, count) in classes {
                for e in count["examples"].as_array().expect("examples") {
                    let (x, device) = (f32::from_bits(hex(&e[0])), f32::from_bits(hex(&e[1])));
                    let got = tables.predict(form, x).expect("a table entry");
                    let same =
                        got.to_bits() == device.to_bits() || (got.is_nan() && device.is_nan());
                    assert!(
                        same,
                        "{}({x:e}) ({class}, kept under grid {}): predicted {got:e}, the H100 \
                         {device:e}",
                        form.ptx(),
                        variant["variant"]
                    );
                    checked += 1;
                    negative += usize::from(x < 0.0);
                }
            }
        }
    }
    // Per form, 4 examples of each failing (grid, class): 20- to 22-bit grids in all four
    // classes (6 x 4), 23-round in four, 24-round in the two fine ones; 23-truncate, like
    // the chosen grid, fails nowhere. 2 x 4 x 30 = 240, half of them x < 0.
    assert_eq!((checked, negative), (240, 120));
}
