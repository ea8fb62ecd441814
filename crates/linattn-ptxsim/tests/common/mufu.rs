//! MUFU-table helpers shared by the test binaries that install tables (one per process, so
//! `mufu_tables.rs` and `mufu_ex2neg_installed.rs` are separate binaries): shortened
//! synthetic tables with planted deviations, and one `.approx` form simulated per lane.

use linattn_ptxsim::{MufuForm, MufuOp, MufuTable, Numerics};

use super::device;
use super::lanes::run_lanes_on;

/// A shortened table of `op` (`entries` of its indices, evenly strided), all correctly
/// rounded but the (entry, deviation in ulps) pairs of `planted`.
pub fn synthetic_table(op: MufuOp, entries: u32, planted: &[(u32, i8)]) -> MufuTable {
    let mut deviations = vec![0i8; entries as usize];
    for &(k, d) in planted {
        deviations[k as usize] = d;
    }
    let mut t = MufuTable::new(op, op.full_entries() / entries, deviations).unwrap();
    t.source = "synthetic (linattn-ptxsim tests)".into();
    t
}

/// `form` of each input on a simulated device in `numerics` (bits).
pub fn simulate(numerics: Numerics, form: MufuForm, xs: &[f32]) -> Vec<u32> {
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
