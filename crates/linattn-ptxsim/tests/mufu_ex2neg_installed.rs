//! MUFU tables with `ex2neg.mufu` installed (`exec::mufu_table`, issue #23): the simulated
//! `ex2.approx(.ftz).f32` of x < 0 takes its bits from the negative table, sign-magnitude
//! (2^-|x| = 2^-m · U[g], |x| = m + g), and x ≥ 0 from the ex2 table, in
//! `Numerics::AsCompiled` only. Its own process: tables install once per process, and
//! `mufu_tables.rs` installs a directory without `ex2neg.mufu`.

mod common;

use std::sync::OnceLock;

use common::mufu::{simulate, synthetic_table};
use linattn_ptxsim::exec::mufu_file::{load_dir, write_table};
use linattn_ptxsim::exec::mufu_table;
use linattn_ptxsim::{MufuForm, MufuOp, MufuTable, MufuTables, Numerics};

/// Entries of the synthetic tables: every 2^14-th index.
const ENTRIES: u32 = 1 << 10;
const STRIDE: u32 = (1 << 24) / ENTRIES;

/// (table entry, planted deviation): T's and U's differ at every entry used.
fn planted(op: MufuOp) -> [(u32, i8); 3] {
    match op {
        MufuOp::Ex2 => [(3, 1), (256, 1), (1000, 2)],
        MufuOp::Ex2Negative => [(3, -1), (256, -2), (1000, 1)],
        _ => [(0, 0); 3],
    }
}

fn synthetic(op: MufuOp) -> MufuTable {
    synthetic_table(op, op.full_entries() / STRIDE, &planted(op))
}

/// All four synthetic tables, through a directory, installed once.
fn installed() -> &'static MufuTables {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("linattn-ex2neg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for op in MufuOp::ALL {
            write_table(&dir.join(format!("{}.mufu", op.name())), &synthetic(op)).unwrap();
        }
        let tables = load_dir(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(tables.ex2_negative.is_some());
        mufu_table::install(tables).unwrap();
    });
    mufu_table::for_numerics(Numerics::AsCompiled).expect("installed")
}

/// Entry k of `op`'s table with its planted deviation.
fn entry(op: MufuOp, k: u32, dev: i8) -> f32 {
    let base = op.correctly_rounded(k * STRIDE).to_bits();
    f32::from_bits(base.wrapping_add_signed(i32::from(dev)))
}

#[test]
fn simulated_ex2_of_negative_inputs_reads_the_negative_table() {
    let tables = installed();
    let (t, u) = (MufuOp::Ex2, MufuOp::Ex2Negative);
    for form in [MufuForm::Ex2Ftz, MufuForm::Ex2] {
        let mut xs = Vec::new();
        let mut want = Vec::new();
        for ((k, dt), (_, du)) in planted(t).into_iter().zip(planted(u)) {
            let g = t.input(k * STRIDE); // = |u.input(k·STRIDE)|
            for m in [0i32, 2, 5, 60] {
                // x = -(m + g): U[k]·2^-m; x = m + g: T[k]·2^m.
                xs.push(-(g + m as f32));
                want.push(entry(u, k, du) * 2f32.powi(-m));
                xs.push(g + m as f32);
                want.push(entry(t, k, dt) * 2f32.powi(m));
            }
            // Below -126 ex2.approx.f32 squares MUFU.EX2(x/2) (x/2 = -(65 + g): U, scaled);
            // the ftz form flushes the subnormal result.
            xs.push(-2.0 * (65.0 + g));
            let y = entry(u, k, du) * 2f32.powi(-65);
            want.push(if form == MufuForm::Ex2 { y * y } else { 0.0 });
        }
        let got = simulate(Numerics::AsCompiled, form, &xs);
        let exact = simulate(Numerics::Exact, form, &xs);
        let mut differs = 0;
        for (((x, g), w), e) in xs.iter().zip(&got).zip(&want).zip(&exact) {
            assert_eq!(
                *g,
                w.to_bits(),
                "{}({x:e}): {:e}, want {w:e}",
                form.ptx(),
                f32::from_bits(*g)
            );
            assert_eq!(*g, tables.predict(form, *x).unwrap().to_bits());
            differs += usize::from(g != e);
        }
        // The planted ulps show: the default mode's correctly rounded bits differ.
        assert!(
            differs >= 12,
            "{} of {} differ from Exact",
            differs,
            xs.len()
        );
    }
}
