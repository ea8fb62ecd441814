//! MUFU tables (`exec::mufu_table`, issue #23): the prediction of each form from a table,
//! the `.mufu` file's checks, and the simulated instructions taking their bits from
//! installed tables in `Numerics::AsCompiled` only.
//!
//! The tables here are synthetic: shortened (a stride), with deviations planted at known
//! indices, so the expected bits are known without a GPU. The process installs the three
//! tables of a directory without `ex2neg.mufu` (as captured before it existed);
//! `mufu_ex2neg_installed.rs` installs all four. The committed H100 directory (no
//! `ex2neg.mufu`) is checked to load and predict negative ex2 inputs as it always did.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::mufu::{simulate, synthetic_table};
use linattn_ptxsim::exec::mufu_file::{load_dir, read_table, write_table};
use linattn_ptxsim::exec::mufu_table::{self, Ex2Grid};
use linattn_ptxsim::{MufuForm, MufuOp, MufuTable, MufuTables, Numerics};

/// Entries of the synthetic tables (every 2^14-th index of ex2 and rsqrt, 2^13-th of rcp).
const ENTRIES: usize = 1 << 10;

/// (table entry, planted deviation) per op; the other entries are 0.
fn planted(op: MufuOp) -> [(u32, i8); 3] {
    match op {
        MufuOp::Ex2 => [(3, 1), (400, -2), (1000, 2)],
        MufuOp::Rsqrt => [(5, -1), (600, 1), (1023, 2)],
        MufuOp::Rcp => [(7, 1), (512, -1), (900, -2)],
        MufuOp::Ex2Negative => [(2, -1), (512, 1), (1023, -2)],
    }
}

fn synthetic(op: MufuOp) -> MufuTable {
    synthetic_table(op, ENTRIES as u32, &planted(op))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("linattn-mufu-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The three tables of a directory without `ex2neg.mufu`.
const WITHOUT_EX2NEG: [MufuOp; 3] = [MufuOp::Ex2, MufuOp::Rsqrt, MufuOp::Rcp];

/// The synthetic tables (no `ex2neg.mufu`: ex2 of negative x from T), written to a directory
/// and loaded back, installed once (the directory goes once they are in memory: nothing is
/// left in the temp dir).
fn installed() -> &'static MufuTables {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let dir = scratch("installed");
        for op in WITHOUT_EX2NEG {
            write_table(&dir.join(format!("{}.mufu", op.name())), &synthetic(op)).unwrap();
        }
        let tables = load_dir(&dir).unwrap();
        assert_eq!(tables.ex2_negative, None);
        std::fs::remove_dir_all(&dir).unwrap();
        mufu_table::install(tables).unwrap();
    });
    mufu_table::for_numerics(Numerics::AsCompiled).expect("installed")
}

/// The input at table entry k, scaled into another binade where the form allows it.
fn inputs_at(op: MufuOp, k: u32) -> Vec<f32> {
    let stride = op.full_entries() / ENTRIES as u32;
    let x = op.input(k * stride);
    match op {
        // 2^(n + f) = 2^n · T(f): a few n, exact in f32 for these f (no ex2neg.mufu here:
        // x - 5 < 0 is T's too). The forms read the ex2 table, never ex2neg directly.
        MufuOp::Ex2 | MufuOp::Ex2Negative => vec![x, x + 3.0, x - 5.0],
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
            let base = op.correctly_rounded(k * stride);
            for ((x, g), e) in xs.iter().zip(&got).zip(&exact) {
                // The planted ulps, at the input's own scale (a power of two: exact).
                let scale = f64::from(*x) / f64::from(op.input(k * stride));
                let unit = match op {
                    MufuOp::Ex2 | MufuOp::Ex2Negative => {
                        (f64::from(*x) - f64::from(op.input(k * stride))).exp2()
                    }
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
    // ex2neg.mufu is optional, but checked where present: its op, and ex2.mufu's grid.
    let four = dir.join("four");
    std::fs::create_dir_all(&four).unwrap();
    for op in MufuOp::ALL {
        write_table(&four.join(format!("{}.mufu", op.name())), &synthetic(op)).unwrap();
    }
    let tables = load_dir(&four).unwrap();
    assert_eq!(tables.ex2_negative, Some(synthetic(MufuOp::Ex2Negative)));
    assert_eq!(
        tables.table(MufuOp::Ex2Negative),
        tables.ex2_negative.as_ref()
    );
    let mut regridded = synthetic(MufuOp::Ex2Negative);
    regridded.grid = Ex2Grid {
        bits: 22,
        round: true,
    };
    write_table(&four.join("ex2neg.mufu"), &regridded).unwrap();
    let err = load_dir(&four).unwrap_err().to_string();
    assert!(
        err.contains("ex2neg.mufu") && err.contains("22-round differs from ex2.mufu's 24-truncate"),
        "{err}"
    );
    write_table(&four.join("ex2neg.mufu"), &synthetic(MufuOp::Ex2)).unwrap();
    let err = load_dir(&four).unwrap_err().to_string();
    assert!(
        err.contains("ex2neg.mufu") && err.contains("holds the ex2 table, not ex2neg"),
        "{err}"
    );
    std::fs::remove_file(four.join("ex2neg.mufu")).unwrap();
    assert_eq!(load_dir(&four).unwrap().ex2_negative, None);
    // An unknown op is refused naming the known ones.
    let text = String::from_utf8_lossy(&good[..header_end]).replace("op=rcp", "op=exp");
    let mut unknown = text.into_bytes();
    unknown.extend_from_slice(&good[header_end..]);
    refused(&unknown, "unknown op 'exp' (ex2, rsqrt, rcp, ex2neg)");
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

/// A full table (stride 1) of `op`, all zeros but the `planted` (index, ulps).
fn full(op: MufuOp, planted: &[(u32, i8)]) -> MufuTable {
    let mut deviations = vec![0i8; op.full_entries() as usize];
    for &(i, d) in planted {
        deviations[i as usize] = d;
    }
    MufuTable::new(op, 1, deviations).unwrap()
}

/// Entry `index` of `op`'s table deviating `dev` ulps from the correctly rounded result.
fn entry(op: MufuOp, index: u32, dev: i8) -> f32 {
    f32::from_bits(
        op.correctly_rounded(index)
            .to_bits()
            .wrapping_add_signed(i32::from(dev)),
    )
}

const HALF: u32 = 1 << 23;
const QUARTER: u32 = 1 << 22;
const LAST: u32 = (1 << 24) - 1;
/// T (ex2 of x ≥ 0) and U (ex2neg): different deviations at the entries the cases use.
const T_PLANTED: [(u32, i8); 3] = [(HALF, 1), (LAST, -1), (QUARTER, 2)];
const U_PLANTED: [(u32, i8); 4] = [(HALF, -1), (LAST - 3, 2), (1, 1), (QUARTER, 1)];

/// The ex2 tables above, with (`Some`) and without (`None`) the negative one.
fn ex2_pair() -> (MufuTables, MufuTables) {
    let old = MufuTables {
        ex2: full(MufuOp::Ex2, &T_PLANTED),
        rsqrt: synthetic(MufuOp::Rsqrt),
        rcp: synthetic(MufuOp::Rcp),
        ex2_negative: None,
    };
    let new = MufuTables {
        ex2_negative: Some(full(MufuOp::Ex2Negative, &U_PLANTED)),
        ..old.clone()
    };
    (old, new)
}

#[test]
fn negative_ex2_inputs_come_from_their_own_table_sign_magnitude() {
    let (old, new) = ex2_pair();
    let (t, u) = (MufuOp::Ex2, MufuOp::Ex2Negative);
    let at = |tables: &MufuTables, form: MufuForm, x: f32, grid: Ex2Grid| {
        tables
            .predict_on(form, x, grid)
            .unwrap_or_else(|| panic!("{}({x:e}) not predicted", form.ptx()))
            .to_bits()
    };
    let trunc = |bits| Ex2Grid { bits, round: false };
    let round = |bits| Ex2Grid { bits, round: true };
    let p2 = |n: i32| 2f32.powi(n);
    // The H100's telling miss: x = -6.15e-9 is |x| = 0 + g, g < 2^-24: U[0] = 1, where the
    // old prediction (n = -1, f = 1 - 6e-9) takes T[2^24 - 1]/2.
    let tiny = f32::from_bits(0xb1d3_7212);
    assert_eq!(entry(t, LAST, 0).to_bits(), 0x3fff_ffff);
    // (form, x, grid, with U, without U): the without-U column is today's prediction.
    #[rustfmt::skip]
    let cases: Vec<(MufuForm, f32, Ex2Grid, f32, f32)> = vec![
        (MufuForm::Ex2Ftz, tiny, trunc(24), 1.0, entry(t, LAST, -1) * 0.5),
        // -1.5 = -(1 + 0.5): U[2^23]·2^-1; before, n = -2, f = 0.5: T[2^23]·2^-2.
        (MufuForm::Ex2Ftz, -1.5, trunc(24), entry(u, HALF, -1) * 0.5, entry(t, HALF, 1) * 0.25),
        // -4.25 = -(4 + 0.25): U[2^22]·2^-4; before, n = -5, f = 0.75: T[3·2^22]·2^-5.
        (MufuForm::Ex2Ftz, -4.25, trunc(24), entry(u, QUARTER, 1) * p2(-4), entry(t, 3 * QUARTER, 0) * p2(-5)),
        // 1 - 2^-24 on 22 bits: truncated toward zero to U[2^24 - 4]; rounded up to index
        // 2^22, which carries: m = 1, U[0]·2^-1.
        (MufuForm::Ex2Ftz, -(1.0 - p2(-24)), trunc(22), entry(u, LAST - 3, 2), entry(t, 0, 0) * 0.5),
        (MufuForm::Ex2Ftz, -(1.0 - p2(-24)), round(22), 0.5, entry(t, 0, 0) * 0.5),
        // 3·2^-26 on 24 bits: 0.75 of an entry, truncated to U[0], rounded to U[1]; 2^-25
        // is a tie, to even: U[0].
        (MufuForm::Ex2Ftz, -3.0 * p2(-26), trunc(24), 1.0, entry(t, LAST, -1) * 0.5),
        (MufuForm::Ex2Ftz, -3.0 * p2(-26), round(24), entry(u, 1, 1), entry(t, LAST, -1) * 0.5),
        (MufuForm::Ex2Ftz, -p2(-25), round(24), 1.0, 1.0),
        // -0 and a negative subnormal (flushed to -0) are x ≥ 0: T[0].
        (MufuForm::Ex2Ftz, -0.0, trunc(24), 1.0, 1.0),
        (MufuForm::Ex2Ftz, -1e-40, trunc(24), 1.0, 1.0),
        // The cut-offs and the flush of a subnormal result are as for x ≥ 0.
        (MufuForm::Ex2Ftz, f32::NEG_INFINITY, trunc(24), 0.0, 0.0),
        (MufuForm::Ex2Ftz, -160.5, trunc(24), 0.0, 0.0),
        (MufuForm::Ex2Ftz, -127.0, trunc(24), 0.0, 0.0),
        (MufuForm::Ex2Ftz, -125.75, trunc(24), entry(u, 3 * QUARTER, 0) * p2(-125), entry(t, QUARTER, 2) * p2(-126)),
        // ex2.approx.f32 below -126 squares MUFU.EX2(x/2): -70.25 takes U[2^22]·2^-70.
        (MufuForm::Ex2, -140.5, trunc(24), sq(entry(u, QUARTER, 1) * p2(-70)), sq(entry(t, 3 * QUARTER, 0) * p2(-71))),
        (MufuForm::Ex2, -1.5, trunc(24), entry(u, HALF, -1) * 0.5, entry(t, HALF, 1) * 0.25),
        // x ≥ 0 never reads U.
        (MufuForm::Ex2Ftz, 0.5, trunc(24), entry(t, HALF, 1), entry(t, HALF, 1)),
        (MufuForm::Ex2Ftz, 3.25, trunc(24), entry(t, QUARTER, 2) * 8.0, entry(t, QUARTER, 2) * 8.0),
        (MufuForm::Ex2, 6.15e-9, trunc(24), 1.0, 1.0),
        (MufuForm::Ex2Ftz, 200.0, trunc(24), f32::INFINITY, f32::INFINITY),
    ];
    for (form, x, grid, with, without) in cases {
        let what = format!("{}({x:e}) on {}", form.ptx(), grid.name());
        assert_eq!(
            at(&new, form, x, grid),
            with.to_bits(),
            "with ex2neg: {what}"
        );
        assert_eq!(
            at(&old, form, x, grid),
            without.to_bits(),
            "without: {what}"
        );
    }
    assert_eq!(
        new.predict(MufuForm::Ex2Ftz, -1.5),
        Some(entry(u, HALF, -1) * 0.5)
    );
    assert!(new.predict(MufuForm::Ex2Ftz, -f32::NAN).unwrap().is_nan());
    // The negative table alone predicts x ≤ 0 only.
    let negative = new.ex2_negative.as_ref().unwrap();
    assert_eq!(negative.mufu(0.5), None);
    assert_eq!(negative.mufu(-0.0), Some(1.0));
    // Every x < 0 whose |x| = m + g has g on every grid (i a multiple of 2^13, so m + g is
    // exact in f32 up to m = 127): U[i]·2^-m, whatever the grid; x ≥ 0 is T's.
    for i in (0..1u32 << 24).step_by(5 << 13) {
        for m in [0.0f32, 1.0, 7.0, 100.0] {
            let x = -(u.input(i).abs() + m);
            assert_eq!(-x - m, u.input(i).abs(), "inexact");
            let want = entry(u, i, 0) * 2f32.powi(-(m as i32));
            for grid in Ex2Grid::all() {
                let what = format!("{x:e} on {}", grid.name());
                assert_eq!(
                    at(&new, MufuForm::Ex2Ftz, x, grid),
                    want.to_bits(),
                    "{what}"
                );
            }
            let y = -x;
            assert_eq!(
                new.predict(MufuForm::Ex2Ftz, y),
                old.predict(MufuForm::Ex2Ftz, y)
            );
        }
    }
}

fn sq(y: f32) -> f32 {
    y * y
}

#[test]
fn a_negative_table_round_trips_and_a_correctly_rounded_one_is_zero() {
    let op = MufuOp::Ex2Negative;
    assert_eq!(op.name(), "ex2neg");
    assert_eq!(MufuOp::from_name("ex2neg"), Some(op));
    assert_eq!(op.capture_form(), MufuForm::Ex2Ftz);
    assert_eq!(op.full_entries(), 1 << 24);
    assert_eq!(op.input(0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(op.input(HALF), -0.5);
    assert_eq!(op.input(LAST), -(1.0 - 2f32.powi(-24)));
    assert_eq!(op.correctly_rounded(HALF), std::f32::consts::FRAC_1_SQRT_2);
    let dir = scratch("ex2neg");
    let path = dir.join("ex2neg.mufu");
    let mut table = synthetic(op);
    table.grid = Ex2Grid {
        bits: 23,
        round: true,
    };
    write_table(&path, &table).unwrap();
    assert_eq!(read_table(&path).unwrap(), table);
    let header = std::fs::read(&path).unwrap();
    assert!(header.starts_with(b"LINATTN-MUFU 1\nop=ex2neg\nentries=1024\nstride=16384\n"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench-results/h100/2026-11-26/mufu`: the H100's capture, before ex2neg existed.
fn committed_h100() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench-results/h100/2026-11-26/mufu")
}

#[test]
fn the_committed_h100_tables_load_without_ex2neg_and_predict_as_before() {
    let tables = load_dir(&committed_h100()).expect("the committed tables");
    assert_eq!(tables.ex2_negative, None);
    assert_eq!(tables.table(MufuOp::Ex2Negative), None);
    assert_eq!(tables.ex2.grid, Ex2Grid::CAPTURED);
    // The bits these inputs were predicted as before the negative table existed (the first
    // seven are mufu.json's examples of the H100's negative misses: its "predicted" column).
    let cases: [(u32, u32, u32); 13] = [
        // (x, ex2.approx.ftz.f32, ex2.approx.f32)
        (0xb1d3_7212, 0x3f7f_ffff, 0x3f7f_ffff),
        (0xc226_95f0, 0x2aa3_8c7a, 0x2aa3_8c7a),
        (0xc2d4_e474, 0x0a3b_e5c7, 0x0a3b_e5c7),
        (0xc2f1_25c2, 0x032b_ffaf, 0x032b_ffaf),
        (0xc145_5850, 0x394b_15be, 0x394b_15be),
        (0xc2fe_69e4, 0x0000_0000, 0x0037_73dc),
        (0xc301_4a86, 0x0000_0000, 0x000d_138f),
        (0xbfc0_0000, 0x3eb5_04f3, 0x3eb5_04f3), // -1.5
        (0xbe80_0000, 0x3f57_44fd, 0x3f57_44fd), // -0.25
        (0xc049_0fdb, 0x3de8_118d, 0x3de8_118d), // -pi
        (0x3f00_0000, 0x3fb5_04f3, 0x3fb5_04f3), // 0.5
        (0x4049_0fdb, 0x410d_331d, 0x410d_331d), // pi
        (0x3e80_0001, 0x3f98_37f1, 0x3f98_37f1),
    ];
    for (x, ftz, full) in cases {
        let x = f32::from_bits(x);
        for (form, want) in [(MufuForm::Ex2Ftz, ftz), (MufuForm::Ex2, full)] {
            let got = tables.predict(form, x).expect("a full table");
            assert_eq!(
                got.to_bits(),
                want,
                "{}({x:e}) = {:#010x}, before {want:#010x}",
                form.ptx(),
                got.to_bits()
            );
        }
    }
}
