//! The H100's MUFU tables as committed (`bench-results/h100/2026-11-26/mufu/`: `linattn mufu
//! --platform cuda`), against the device results its verification kept as examples in
//! `mufu.json`: every example of a (form, input class) that the prediction now covers is
//! reproduced bit for bit (NaN as any NaN). Those of rsqrt.approx.f32's special inputs were
//! the device's finite results for subnormal inputs, which the earlier prediction (±inf)
//! missed: with the SASS's scaling (`MufuTables::predict_on`) they hold. ex2's misses (the
//! device 1 ulp under the table for negative inputs) are not covered by the prediction and
//! are not checked here.

use std::path::Path;

use linattn_ptxsim::exec::mufu_file;
use linattn_ptxsim::MufuForm;

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-results/h100/2026-11-26/mufu")
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
