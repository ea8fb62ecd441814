//! Per-warp issue clocks: the latency term of the performance model. Kept only while the
//! launch counts (`LaunchCtx::latency`), never on the plain check/bench path.
//!
//! Rules. A warp issues in order: an instruction issues at the latest of the cycle after the
//! warp's previous issue and the ready cycles of its source registers (guard predicate and
//! address registers included); each destination becomes ready at issue + the latency of
//! the instruction's class. Divergent paths are issued one after the other, so the clock
//! advances for every group issued whatever its mask. At `bar.sync` every waiting warp
//! continues at the latest of their clocks plus the barrier cost. A CTA's critical path is
//! the latest clock of its warps at exit. A global store completes a DRAM latency after it
//! issues, and the warp's next global load issues no earlier than its last store's
//! completion: on the H100, cc_scan's loop (four loads, then the four values stored in
//! place) took 819 cycles a group against 436 without the stores (`linattn latency`,
//! `bench-results/h100/2026-11-26/latency.json`), and with this rule the model puts the
//! second run's short in-place scans (cumsum's) at 0.79–1.07× of their measured time, not
//! 0.57–0.64×.

use crate::arch::Latencies;
use crate::counters::PathBreakdown;
use crate::instr_class::InstrClass;
use crate::ir::{Bank, Instr, Op, Reg, Space};

/// When a register's value is ready, and the class of the instruction that wrote it.
#[derive(Debug, Clone, Copy)]
struct Ready {
    at: u64,
    by: InstrClass,
}

impl Default for Ready {
    fn default() -> Self {
        Ready {
            at: 0,
            by: InstrClass::Integer,
        }
    }
}

/// One warp's clock: the earliest cycle of its next issue, the cycle each register's value
/// is ready, per bank, and where the clock's cycles went.
#[derive(Debug, Clone, Default)]
struct WarpClock {
    next: u64,
    /// When the warp's last global store completes: a later global load issues no earlier.
    stores_done: u64,
    preds: Vec<Ready>,
    r32: Vec<Ready>,
    r64: Vec<Ready>,
    parts: PathBreakdown,
}

impl WarpClock {
    fn slot(&mut self, r: Reg) -> Option<&mut Ready> {
        let bank = match r.bank {
            Bank::Pred => &mut self.preds,
            Bank::R32 => &mut self.r32,
            Bank::R64 => &mut self.r64,
        };
        bank.get_mut(r.index as usize)
    }

    fn ready(&mut self, r: Reg) -> Ready {
        self.slot(r).map_or(Ready::default(), |t| *t)
    }
}

/// What holds an instruction back: the warp's own issue order, an operand, or the stores.
#[derive(Clone, Copy)]
enum Cause {
    InOrder,
    Operand(InstrClass),
    StoreDrain,
}

/// The clocks of one CTA's warps.
#[derive(Debug, Clone, Default)]
pub struct Clocks {
    warps: Vec<WarpClock>,
    latency: Option<Latencies>,
}

impl Clocks {
    /// Starts a CTA of `nwarps` warps with `(preds, regs32, regs64)` registers at cycle 0.
    pub fn reset(&mut self, nwarps: usize, regs: (u32, u32, u32), latency: Latencies) {
        self.latency = Some(latency);
        self.warps.resize_with(nwarps, WarpClock::default);
        self.warps.truncate(nwarps);
        for w in &mut self.warps {
            w.next = 0;
            w.stores_done = 0;
            w.parts = PathBreakdown::default();
            for (bank, n) in [
                (&mut w.preds, regs.0),
                (&mut w.r32, regs.1),
                (&mut w.r64, regs.2),
            ] {
                bank.clear();
                bank.resize(n as usize, Ready::default());
            }
        }
    }

    /// Issues `instr` on warp `warp`; returns its issue cycle.
    pub fn issue(&mut self, warp: usize, instr: &Instr) -> u64 {
        let Some(lat) = self.latency else { return 0 };
        let Some(w) = self.warps.get_mut(warp) else {
            return 0;
        };
        let (mut at, mut cause) = (w.next, Cause::InOrder);
        let mut wait_for = |ready: Ready| {
            if ready.at > at {
                (at, cause) = (ready.at, Cause::Operand(ready.by));
            }
        };
        if let Some((p, _)) = instr.guard {
            wait_for(w.ready(p));
        }
        instr.op.each_source(&mut |r| wait_for(w.ready(r)));
        if instr.class == InstrClass::GlobalLoad && w.stores_done > at {
            (at, cause) = (w.stores_done, Cause::StoreDrain);
        }
        let waited = at - w.next;
        match cause {
            Cause::InOrder => {}
            Cause::Operand(by) => w.parts.operand_wait[by as usize] += waited,
            Cause::StoreDrain => w.parts.store_drain += waited,
        }
        w.parts.issue += 1;
        if instr.class == InstrClass::GlobalStore {
            w.stores_done = at + u64::from(lat.dram);
        }
        let done = Ready {
            at: at + u64::from(latency_of(&lat, instr)),
            by: instr.class,
        };
        instr.op.each_dest(&mut |r| {
            if let Some(t) = w.slot(r) {
                *t = done;
            }
        });
        w.next = at + 1;
        at
    }

    /// The warps `waiting` (indices) leave a `bar.sync` together: at the latest of their
    /// clocks plus the barrier cost.
    pub fn barrier(&mut self, waiting: &[usize]) {
        let Some(lat) = self.latency else { return };
        let latest = waiting
            .iter()
            .filter_map(|&i| self.warps.get(i))
            .map(|w| w.next)
            .max()
            .unwrap_or(0);
        for &i in waiting {
            if let Some(w) = self.warps.get_mut(i) {
                let leave = latest + u64::from(lat.barrier);
                w.parts.barrier += leave - w.next;
                w.next = leave;
            }
        }
    }

    /// The CTA's critical path so far: the latest clock of its warps.
    #[cfg(test)]
    pub fn critical_path(&self) -> u64 {
        self.critical_path_parts().0
    }

    /// The critical path and where its cycles went (those of the warp whose clock is latest;
    /// the first such warp).
    pub fn critical_path_parts(&self) -> (u64, PathBreakdown) {
        self.warps
            .iter()
            .rev()
            .max_by_key(|w| w.next)
            .map_or((0, PathBreakdown::default()), |w| (w.next, w.parts))
    }
}

/// Cycles until `instr`'s results may be used.
fn latency_of(lat: &Latencies, instr: &Instr) -> u32 {
    match instr.class {
        InstrClass::Conversion => lat.conversion,
        InstrClass::SpecialFunction => lat.sfu,
        InstrClass::Mma => lat.mma,
        InstrClass::Shuffle => lat.shfl,
        InstrClass::SharedLoad => lat.shared_load,
        InstrClass::GlobalLoad => lat.dram,
        InstrClass::Atomic => match instr.op {
            Op::Atom {
                space: Space::Shared,
                ..
            } => lat.shared_load,
            // Global atomics are performed at L2.
            _ => lat.l2_hit,
        },
        InstrClass::Fp32
        | InstrClass::Integer
        | InstrClass::GlobalStore
        | InstrClass::SharedStore
        | InstrClass::Barrier
        | InstrClass::Control => lat.alu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Address, FloatMode, Rounding, Src, Ty};

    const LAT: Latencies = Latencies::AMPERE_HOPPER;

    fn r32(i: u32) -> Reg {
        Reg {
            bank: Bank::R32,
            index: i,
        }
    }

    fn fma(d: u32, a: u32, b: u32, c: u32) -> Instr {
        let op = Op::Fma {
            ty: Ty::F32,
            mode: FloatMode {
                rounding: Rounding::Nearest,
                ftz: false,
                sat: false,
                contractible: false,
            },
            d: r32(d),
            a: Src::Reg(r32(a)),
            b: Src::Reg(r32(b)),
            c: Src::Reg(r32(c)),
        };
        Instr {
            guard: None,
            class: op.class(),
            fp32_flops: op.fp32_flops(),
            op,
            line: 1,
        }
    }

    fn clocks(nwarps: usize) -> Clocks {
        let mut c = Clocks::default();
        c.reset(nwarps, (0, 64, 0), LAT);
        c
    }

    #[test]
    fn a_dependent_chain_costs_its_latency_per_step() {
        let n = 100u64;
        let mut c = clocks(1);
        // r0 = r0 * r1 + r2, n times: each waits for the previous.
        let issues: Vec<u64> = (0..n).map(|_| c.issue(0, &fma(0, 0, 1, 2))).collect();
        let alu = u64::from(LAT.alu);
        assert_eq!(issues[1] - issues[0], alu);
        assert_eq!(issues[n as usize - 1], (n - 1) * alu);
        assert_eq!(c.critical_path(), (n - 1) * alu + 1);
    }

    #[test]
    fn independent_instructions_issue_one_per_cycle() {
        let mut c = clocks(1);
        // r(10+i) = r1 * r2 + r3: no instruction reads another's result.
        for i in 0..50u32 {
            assert_eq!(c.issue(0, &fma(10 + i, 1, 2, 3)), u64::from(i));
        }
        assert_eq!(c.critical_path(), 50);
        // A consumer of the last one waits for its latency.
        assert_eq!(c.issue(0, &fma(5, 59, 1, 1)), 49 + u64::from(LAT.alu));
    }

    #[test]
    fn a_barrier_waits_for_the_slowest_warp() {
        let mut c = clocks(3);
        for _ in 0..10 {
            c.issue(0, &fma(0, 0, 1, 2)); // slow: a dependent chain
        }
        c.issue(1, &fma(0, 1, 1, 1));
        // Warp 2 exited before the barrier: not among the waiting.
        c.barrier(&[0, 1]);
        let slow = 9 * u64::from(LAT.alu) + 1;
        let after = slow + u64::from(LAT.barrier);
        assert_eq!(c.issue(1, &fma(3, 1, 1, 1)), after);
        assert_eq!(c.issue(0, &fma(3, 1, 1, 1)), after);
        assert_eq!(c.critical_path(), after + 1);
    }

    fn instr(op: Op) -> Instr {
        Instr {
            guard: None,
            class: op.class(),
            fp32_flops: 0,
            op,
            line: 1,
        }
    }

    /// `ld.<space>.f32 r<d>, [0]`.
    fn ld(space: Space, d: u32) -> Instr {
        instr(Op::Ld {
            space,
            ty: Ty::F32,
            nc: false,
            d: vec![r32(d)],
            addr: Address {
                base: None,
                offset: 0,
            },
        })
    }

    #[test]
    fn a_global_load_waits_for_the_warps_last_store() {
        let mut c = clocks(2);
        let st = instr(Op::St {
            space: Space::Global,
            ty: Ty::F32,
            a: vec![Src::Reg(r32(1))],
            addr: Address {
                base: None,
                offset: 0,
            },
        });
        let (ld, shared) = (ld(Space::Global, 2), ld(Space::Shared, 3));
        assert_eq!(c.issue(0, &st), 0);
        // Independent arithmetic and shared loads go on; the global load waits.
        assert_eq!(c.issue(0, &fma(5, 6, 6, 6)), 1);
        assert_eq!(c.issue(0, &shared), 2);
        assert_eq!(c.issue(0, &ld), u64::from(LAT.dram));
        // Another warp's loads do not wait for this warp's stores.
        assert_eq!(c.issue(1, &ld), 0);
    }

    #[test]
    fn loads_make_their_destinations_wait_for_memory() {
        let mut c = clocks(1);
        let ld = ld(Space::Global, 1);
        assert_eq!(c.issue(0, &ld), 0);
        assert_eq!(c.issue(0, &fma(2, 1, 3, 3)), u64::from(LAT.dram));
    }

    #[test]
    fn the_path_splits_into_issue_operand_waits_drain_and_barriers() {
        let mut c = clocks(2);
        let alu = u64::from(LAT.alu);
        // Warp 0: a global load, its consumer (waits on the load), a store, a load behind it.
        let st = instr(Op::St {
            space: Space::Global,
            ty: Ty::F32,
            a: vec![Src::Reg(r32(2))],
            addr: Address {
                base: None,
                offset: 0,
            },
        });
        c.issue(0, &ld(Space::Global, 1));
        c.issue(0, &fma(2, 1, 1, 1));
        c.issue(0, &st);
        c.issue(0, &ld(Space::Global, 3));
        // Warp 1: a chain of 4 fma (each waits on an Fp32 result), then both meet at a barrier.
        for _ in 0..4 {
            c.issue(1, &fma(0, 0, 1, 2));
        }
        c.barrier(&[0, 1]);
        c.issue(1, &fma(5, 5, 5, 5));
        let (path, parts) = c.critical_path_parts();
        assert_eq!(parts.total(), path);
        // Warp 1 exits last (one issue after the barrier): 5 issues, 3 Fp32 waits of alu − 1.
        assert_eq!(parts.issue, 5);
        assert_eq!(parts.operand_wait[InstrClass::Fp32 as usize], 3 * (alu - 1));
        // Its barrier wait is the rest: up to warp 0's clock (the load's value, the store's
        // operand, the drain, one issue), plus the cost.
        let dram = u64::from(LAT.dram);
        let warp0 = 2 * dram + alu + 1;
        assert_eq!(
            parts.barrier,
            warp0 + u64::from(LAT.barrier) - (3 * alu + 1)
        );
        // Warp 0's own parts: 4 issues, a DRAM wait for the load's value, an Fp32 wait for the
        // store's operand, the store drain.
        let w0 = c.warps[0].parts;
        assert_eq!(w0.issue, 4);
        assert_eq!(w0.operand_wait[InstrClass::GlobalLoad as usize], dram - 1);
        assert_eq!(w0.operand_wait[InstrClass::Fp32 as usize], alu - 1);
        assert_eq!(w0.store_drain, dram - 1);
        assert_eq!(w0.total(), c.warps[0].next);
    }
}
