//! MUFU tables (`exec::mufu_table`, issue #23): the prediction of each form from a table,
//! the `.mufu` file's checks, and the simulated instructions taking their bits from
//! installed tables in `Numerics::AsCompiled` only.
//!
//! The tables here are synthetic: shortened (a stride), with deviations planted at known
//! indices, so the expected bits are known without a GPU.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::device;
use common::lanes::run_lanes_on;
use linattn_ptxsim::exec::mufu_file::{load_dir, read_table, write_table};
use linattn_ptxsim::exec::mufu_table::{self, Ex2Grid};
use linattn_ptxsim::{MufuForm, MufuOp, MufuTable, MufuTables, Numerics};

/// Entries of the synthetic tables (every 2^14-th index of ex2 and rsqrt, 2^13-th of rcp).
const ENTRIES: usize = 1 << 10;

/// (table entry, planted deviation) per op; the other entries are 0.
fn planted(op: MufuOp) -> [(usize, i8); 3] {
    match op {
        MufuOp::Ex2 => [(3, 1), (400, -2), (1000, 2)],
        MufuOp::Rsqrt => [(5, -1), (600, 1), (1023, 2)],
        MufuOp::Rcp => [(7, 1), (512, -1), (900, -2)],
    }
}

fn synthetic(op: MufuOp) -> MufuTable {
    let mut deviations = vec![0i8; ENTRIES];
    for (k, d) in planted(op) {
        deviations[k] = d;
    }
    let mut t = MufuTable::new(op, op.full_entries() / ENTRIES as u32, deviations).unwrap();
    t.source = "synthetic (tests/mufu_tables.rs)".into();
    t
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("linattn-mufu-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The synthetic tables, written to a directory and loaded back, installed once (the
/// directory goes once they are in memory: nothing is left in the temp dir).
fn installed() -> &'static MufuTables {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let dir = scratch("installed");
        for op in MufuOp::ALL {
            write_table(&dir.join(format!("{}.mufu", op.name())), &synthetic(op)).unwrap();
        }
        let tables = load_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        mufu_table::install(tables).unwrap();
    });
    mufu_table::for_numerics(Numerics::AsCompiled).expect("installed")
}

/// `form` of each input on a simulated device in `numerics` (bits).
fn simulate(numerics: Numerics, form: MufuForm, xs: &[f32]) -> Vec<u32> {
    let snippet = format!(
        "
	mov.b32 	%f1, %r1;
	{} 	%f2, %f1;
	mov.b32 	%r4, %f2;",
        form.ptx()
    );
    let inputs: Vec<[u32; 3]> = xs.iter().map(|x| [x.to_bits(), 0, 0]).collect();
    run_lanes_on(device().with_numerics(numerics), &snippet, &inputs).0
}

/// The input at table entry k, scaled into another binade where the form allows it.
fn inputs_at(op: MufuOp, k: usize) -> Vec<f32> {
    let stride = op.full_entries() / ENTRIES as u32;
    let x = op.input(k as u32 * stride);
    match op {
        // 2^(n + f) = 2^n · T(f): a few n, exact in f32 for these f.
        MufuOp::Ex2 => vec![x, x + 3.0, x - 5.0],
        // Even powers of 4 keep the parity; the exponent's sign changes nothing.
        MufuOp::Rsqrt => vec![x, x * 16.0, x / 1024.0],
        MufuOp::Rcp => vec![x, -x * 8.0, x / 64.0],
    }
}

#[test]
fn simulated_instructions_return_the_planted_bits() {
    let tables = installed();
    for form in [
        MufuForm::Ex2Ftz,
        MufuForm::Ex2,
        MufuForm::Rsqrt,
        MufuForm::RcpFtz,
    ] {
        let op = form.op();
        let stride = op.full_entries() / ENTRIES as u32;
        for (k, dev) in planted(op) {
            let xs = inputs_at(op, k);
            let got = simulate(Numerics::AsCompiled, form, &xs);
            let exact = simulate(Numerics::Exact, form, &xs);
            let base = op.correctly_rounded(k as u32 * stride);
            for ((x, g), e) in xs.iter().zip(&got).zip(&exact) {
                // The planted ulps, at the input's own scale (a power of two: exact).
                let scale = f64::from(*x) / f64::from(op.input(k as u32 * stride));
                let unit = match op {
                    MufuOp::Ex2 => (f64::from(*x) - f64::from(op.input(k as u32 * stride))).exp2(),
                    MufuOp::Rsqrt => 1.0 / scale.sqrt(),
                    MufuOp::Rcp => 1.0 / scale,
                };
                let planted = f32::from_bits(base.to_bits().wrapping_add_signed(i32::from(dev)));
                let want = (f64::from(planted) * unit) as f32;
                assert_eq!(
                    *g,
                    want.to_bits(),
                    "{}({x:e}): {:e}, want {want:e} (entry {k}, {dev:+} ulp)",
                    form.ptx(),
                    f32::from_bits(*g)
                );
                assert_eq!(*g, tables.predict(form, *x).unwrap().to_bits());
                // The default mode is untouched by installed tables: correctly rounded.
                assert_eq!(
                    *e,
                    ((f64::from(base) * unit) as f32).to_bits(),
                    "exact {}({x:e})",
                    form.ptx()
                );
            }
        }
    }
}

#[test]
fn special_inputs_follow_the_isa_and_uncaptured_entries_fall_back() {
    let tables = installed();
    let cases: [(MufuForm, f32, f32); 11] = [
        (MufuForm::Ex2Ftz, f32::NEG_INFINITY, 0.0),
        (MufuForm::Ex2Ftz, 128.0, f32::INFINITY),
        (MufuForm::Ex2Ftz, -130.0, 0.0),
        (MufuForm::Ex2, -130.0, 2f32.powi(-130)),
        (MufuForm::Ex2, -149.0, 2f32.powi(-149)),
        (MufuForm::Ex2Ftz, -0.0, 1.0),
        (MufuForm::Rsqrt, 0.0, f32::INFINITY),
        (MufuForm::Rsqrt, -0.0, f32::NEG_INFINITY),
        (MufuForm::Rsqrt, f32::INFINITY, 0.0),
        (MufuForm::RcpFtz, -1e-40, f32::NEG_INFINITY),
        (MufuForm::RcpFtz, 1.5 * 2f32.powi(126), 0.0),
    ];
    for (form, x, want) in cases {
        let got = tables.predict(form, x).unwrap();
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "{}({x:e}) = {got:e}",
            form.ptx()
        );
        let sim = simulate(Numerics::AsCompiled, form, &[x])[0];
        assert_eq!(sim, want.to_bits(), "simulated {}({x:e})", form.ptx());
    }
    assert!(tables.predict(MufuForm::Rsqrt, -4.0).unwrap().is_nan());
    // A subnormal rsqrt.approx.f32 input is scaled by 2^24 into the table and the result by
    // 2^12 (the SASS), never flushed: ≈ 1e20 at 1e-40, from the table where it holds the
    // scaled entry, else the simulator's own.
    let want = 1.0 / f64::from(1e-40f32).sqrt();
    let sim = f32::from_bits(simulate(Numerics::AsCompiled, MufuForm::Rsqrt, &[1e-40])[0]);
    assert!(
        (f64::from(sim) / want - 1.0).abs() < 1e-6,
        "rsqrt(1e-40) = {sim:e}"
    );
    if let Some(r) = tables.predict(MufuForm::Rsqrt, 1e-40) {
        assert_eq!(r.to_bits(), sim.to_bits());
    }
    // 1 + 2^-23 is not a captured rcp entry: no prediction, the simulator's own result.
    let x = 1.0 + f32::EPSILON;
    assert_eq!(tables.predict(MufuForm::RcpFtz, x), None);
    let sim = simulate(Numerics::AsCompiled, MufuForm::RcpFtz, &[x])[0];
    assert_eq!(sim, (1.0 / x).to_bits());
}

#[test]
fn ex2_grids_quantise_the_fraction() {
    let mut t = synthetic(MufuOp::Ex2);
    t.stride = 1;
    t.deviations = vec![0; 1 << 24];
    // 2^-30 below 1 - 2^-22: truncation to 22 bits gives the entry below, rounding 1 - 2^-22.
    let x = 1.0 - 2f32.powi(-22) - 2f32.powi(-24);
    let at = |f: f64| (libm::exp2(f)) as f32;
    let trunc = Ex2Grid {
        bits: 22,
        round: false,
    };
    let round = Ex2Grid {
        bits: 22,
        round: true,
    };
    assert_eq!(t.mufu_on(x, trunc), Some(at(1.0 - 2f64.powi(-21))));
    assert_eq!(t.mufu_on(x, round), Some(at(1.0 - 2f64.powi(-22))));
    // A fraction that rounds up to 1 carries into n.
    let y = -(2f32.powi(-25));
    assert_eq!(t.mufu_on(y, round), Some(1.0));
    assert_eq!(t.mufu_on(y, trunc), Some(at(1.0 - 2f64.powi(-22)) * 0.5));
    for g in Ex2Grid::all() {
        assert_eq!(Ex2Grid::parse(&g.name()), Some(g));
    }
    assert_eq!(Ex2Grid::all().len(), 10);
}

#[test]
fn files_round_trip_and_damaged_ones_are_refused() {
    let dir = scratch("files");
    let path = dir.join("rcp.mufu");
    let table = synthetic(MufuOp::Rcp);
    write_table(&path, &table).unwrap();
    assert_eq!(read_table(&path).unwrap(), table);
    let good = std::fs::read(&path).unwrap();
    let refused = |bytes: &[u8], what: &str| {
        let p = dir.join("bad.mufu");
        std::fs::write(&p, bytes).unwrap();
        let err = read_table(&p).unwrap_err().to_string();
        assert!(err.contains(what), "{err}");
        assert!(err.contains("bad.mufu"), "{err}");
    };
    refused(&good[..good.len() - 5], "truncated");
    refused(b"GIF89a\n\n", "first line");
    refused(b"", "no header");
    let header_end = good.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    // One bit of the gzip stream flipped: gzip's own CRC or the sha256 catches it.
    let mut flipped = good.clone();
    flipped[header_end + 12] ^= 0x10;
    let p = dir.join("flipped.mufu");
    std::fs::write(&p, &flipped).unwrap();
    let err = read_table(&p).unwrap_err().to_string();
    assert!(
        err.contains("decompress") || err.contains("sha256"),
        "{err}"
    );
    // The payload of another table under this header: the digest no longer matches.
    let text = String::from_utf8_lossy(&good[..header_end]).replace("op=rcp", "op=ex2");
    let mut relabelled = text.into_bytes();
    relabelled.extend_from_slice(&good[header_end..]);
    refused(&relabelled, "do not cover");
    // A directory whose rsqrt.mufu holds the rcp table.
    let mixed = dir.join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    for op in MufuOp::ALL {
        let t = synthetic(if op == MufuOp::Rsqrt { MufuOp::Rcp } else { op });
        write_table(&mixed.join(format!("{}.mufu", op.name())), &t).unwrap();
    }
    let err = load_dir(&mixed).unwrap_err().to_string();
    assert!(
        err.contains("rsqrt.mufu") && err.contains("holds the rcp table"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_correctly_rounded_unit_gives_an_all_zero_table() {
    for op in MufuOp::ALL {
        let stride = op.full_entries() / ENTRIES as u32;
        let bits: Vec<u32> = (0..ENTRIES as u32)
            .map(|k| op.correctly_rounded(k * stride).to_bits())
            .collect();
        let t = MufuTable::from_results(op, stride, &bits).unwrap();
        assert_eq!(t.histogram(), ([0, 0, ENTRIES as u64, 0, 0], 0));
        let mut far = bits.clone();
        far[9] = far[9].wrapping_add(1000);
        let err = MufuTable::from_results(op, stride, &far).unwrap_err();
        assert!(err.contains("1000 ulps"), "{err}");
    }
}
