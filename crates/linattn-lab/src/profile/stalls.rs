//! Where a warp's cycles go, on the hardware and in the model (`linattn profile --against`
//! with an export that has Nsight Compute's stall reasons, `gpu_run.sh`'s ncu-stalls steps).
//!
//! Both sides in one unit, warp cycles per issued instruction:
//! - the hardware's `smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`, the
//!   warps found in each state per cycle that issued, i.e. per instruction issued; over all
//!   reasons they sum to `smsp__average_warp_latency_per_inst_issued.ratio`;
//! - the model's critical path (`PathBreakdown`: the clock of the CTA's last warp, one cycle
//!   per instruction it issued plus its waits) divided by the instructions that warp issued.
//!
//! The reasons are grouped by what the model can tell apart: the class of the instruction whose
//! result a warp waited for, barriers, and issue itself. One group has no model counterpart:
//! a warp ready but not picked, or held by a busy pipe (`not_selected`, the throttles). The
//! model's path has no contention in it; its overlap rule adds contention per wave instead,
//! and this is the table that shows how much the hardware had.

use linattn_cuda::executor::sim::{Counters, InstrClass};
use tabled::builder::Builder;
use tabled::settings::Style;

use super::against::Pair;

/// The metric name of one stall reason.
pub fn reason_metric(reason: &str) -> String {
    format!("smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio")
}

/// ncu's average warp cycles per issued instruction (the sum of every reason).
pub const LATENCY_PER_INSTRUCTION: &str = "smsp__average_warp_latency_per_inst_issued.ratio";
const WARPS_ACTIVE: &str = "smsp__warps_active.avg.per_cycle_active";
const WARPS_ELIGIBLE: &str = "smsp__warps_eligible.avg.per_cycle_active";

/// One column: the stall reasons it sums, and the parts of the model's path that match them.
pub struct Group {
    pub label: &'static str,
    pub reasons: &'static [&'static str],
    /// Operand waits on values of these classes.
    pub classes: &'static [InstrClass],
    pub issue: bool,
    pub barrier: bool,
    pub store_drain: bool,
}

/// Every stall reason of sm_70..sm_90 in exactly one group (a test holds it).
pub const GROUPS: &[Group] = &[
    Group {
        label: "issuing",
        reasons: &["selected"],
        classes: &[],
        issue: true,
        barrier: false,
        store_drain: false,
    },
    Group {
        label: "ready, not picked / pipe busy",
        reasons: &[
            "not_selected",
            "dispatch_stall",
            "math_pipe_throttle",
            "mio_throttle",
            "lg_throttle",
            "tex_throttle",
        ],
        classes: &[],
        issue: false,
        barrier: false,
        store_drain: false,
    },
    Group {
        label: "fixed-latency result (ALU, mma)",
        reasons: &["wait"],
        classes: &[
            InstrClass::Fp32,
            InstrClass::Integer,
            InstrClass::Conversion,
            InstrClass::Mma,
            InstrClass::Control,
        ],
        issue: false,
        barrier: false,
        store_drain: false,
    },
    Group {
        label: "MIO result (shared, special fn, shuffle)",
        reasons: &["short_scoreboard"],
        classes: &[
            InstrClass::SharedLoad,
            InstrClass::SharedStore,
            InstrClass::SpecialFunction,
            InstrClass::Shuffle,
        ],
        issue: false,
        barrier: false,
        store_drain: false,
    },
    Group {
        label: "L1TEX result (global)",
        reasons: &["long_scoreboard"],
        classes: &[
            InstrClass::GlobalLoad,
            InstrClass::GlobalStore,
            InstrClass::Atomic,
        ],
        issue: false,
        barrier: false,
        store_drain: false,
    },
    Group {
        label: "barrier",
        reasons: &["barrier", "membar"],
        classes: &[InstrClass::Barrier],
        issue: false,
        barrier: true,
        store_drain: false,
    },
    Group {
        label: "other (drain, branch, fetch, ...)",
        reasons: &[
            "drain",
            "branch_resolving",
            "imc_miss",
            "misc",
            "no_instruction",
            "sleeping",
        ],
        classes: &[],
        issue: false,
        barrier: false,
        store_drain: true,
    },
];

/// One side of one launch: cycles per instruction, in all and per group (None where that side
/// has no counterpart or the export lacks the reasons), and warps per scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct Breakdown {
    pub per_instruction: f64,
    pub groups: Vec<Option<f64>>,
    /// Warps per scheduler, each with what it counts: the hardware's active and eligible
    /// per cycle (those the export has), the model's resident in theory.
    pub warps: Vec<(&'static str, f64)>,
}

/// The hardware's side, if the launch has any stall reason (a reason the export lacks counts
/// as absent for its group, never as 0).
pub fn hardware(h: &super::ncu::NcuLaunch) -> Option<Breakdown> {
    let group =
        |g: &Group| -> Option<f64> { g.reasons.iter().map(|r| h.metric(&reason_metric(r))).sum() };
    let groups: Vec<Option<f64>> = GROUPS.iter().map(group).collect();
    if groups.iter().all(Option::is_none) {
        return None;
    }
    let per_instruction = h
        .metric(LATENCY_PER_INSTRUCTION)
        .unwrap_or_else(|| groups.iter().flatten().sum());
    Some(Breakdown {
        per_instruction,
        groups,
        warps: [("active", WARPS_ACTIVE), ("eligible", WARPS_ELIGIBLE)]
            .into_iter()
            .filter_map(|(what, metric)| Some((what, h.metric(metric)?)))
            .collect(),
    })
}

/// The model's side: the critical path of the launch's longest CTA per instruction its last
/// warp issued; `resident_warps_per_scheduler` from the theoretical occupancy.
pub fn model(c: &Counters, resident_warps_per_scheduler: f64) -> Breakdown {
    let p = &c.critical_path;
    let instructions = p.issue.max(1) as f64;
    let groups = GROUPS
        .iter()
        .map(|g| {
            let mut cycles: u64 = g.classes.iter().map(|&k| p.operand_wait[k as usize]).sum();
            if g.issue {
                cycles += p.issue;
            }
            if g.barrier {
                cycles += p.barrier;
            }
            if g.store_drain {
                cycles += p.store_drain;
            }
            let counterpart = g.issue || g.barrier || g.store_drain || !g.classes.is_empty();
            counterpart.then_some(cycles as f64 / instructions)
        })
        .collect();
    Breakdown {
        per_instruction: p.total() as f64 / instructions,
        groups,
        warps: vec![("resident", resident_warps_per_scheduler)],
    }
}

/// The table, two rows per compared launch whose export has stall reasons; None when none has.
pub fn render(pairs: &[Pair<'_>]) -> Option<String> {
    let mut b = Builder::new();
    let mut head = vec![
        "launch".to_string(),
        "kernel".to_string(),
        "side".to_string(),
        "warps/scheduler".to_string(),
        "cycles/instr".to_string(),
    ];
    head.extend(GROUPS.iter().map(|g| g.label.to_string()));
    b.push_record(head);
    let mut any = false;
    for p in pairs {
        let (Some(h), Some(s), None) = (p.hw, p.sim, &p.problem) else {
            continue;
        };
        let Some(hw) = hardware(h) else { continue };
        any = true;
        let md = model(&s.counters, s.resident_warps_per_scheduler);
        let cell = |x: Option<f64>| x.map_or("—".to_string(), |v| format!("{v:.2}"));
        let row = |side: &str, id: String, kernel: String, bd: &Breakdown| {
            let warps: Vec<String> = bd
                .warps
                .iter()
                .map(|(what, n)| format!("{n:.2} {what}"))
                .collect();
            let warps = if warps.is_empty() {
                "—".to_string()
            } else {
                warps.join(", ")
            };
            let mut r = vec![
                id,
                kernel,
                side.to_string(),
                warps,
                format!("{:.2}", bd.per_instruction),
            ];
            r.extend(bd.groups.iter().map(|&g| cell(g)));
            r
        };
        b.push_record(row("hardware", format!("#{}", h.id), h.kernel.clone(), &hw));
        b.push_record(row("model", String::new(), String::new(), &md));
    }
    if !any {
        return None;
    }
    let mut t = b.build();
    t.with(Style::sharp());
    Some(t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::ncu;

    const ALL_REASONS: [&str; 18] = [
        "barrier",
        "branch_resolving",
        "dispatch_stall",
        "drain",
        "imc_miss",
        "lg_throttle",
        "long_scoreboard",
        "math_pipe_throttle",
        "membar",
        "mio_throttle",
        "misc",
        "no_instruction",
        "not_selected",
        "selected",
        "short_scoreboard",
        "sleeping",
        "tex_throttle",
        "wait",
    ];

    #[test]
    fn every_reason_and_every_instruction_class_lies_in_exactly_one_group() {
        for r in ALL_REASONS {
            let n = GROUPS.iter().filter(|g| g.reasons.contains(&r)).count();
            assert_eq!(n, 1, "{r}");
        }
        let grouped: usize = GROUPS.iter().map(|g| g.reasons.len()).sum();
        assert_eq!(grouped, ALL_REASONS.len());
        for k in InstrClass::ALL {
            let n = GROUPS.iter().filter(|g| g.classes.contains(&k)).count();
            assert_eq!(n, 1, "{}", k.name());
        }
    }

    fn export(reasons: &[(&str, &str)], latency: Option<&str>) -> Vec<ncu::NcuLaunch> {
        let mut text = String::from(
            "\"ID\",\"Kernel Name\",\"Block Size\",\"Grid Size\",\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n",
        );
        let mut row = |name: String, value: &str| {
            text.push_str(&format!(
                "\"0\",\"cc_forward_seg\",\"(256, 1, 1)\",\"(4, 32, 2)\",\"{name}\",\"\",\"{value}\"\n"
            ));
        };
        for (r, v) in reasons {
            row(reason_metric(r), v);
        }
        if let Some(l) = latency {
            row(LATENCY_PER_INSTRUCTION.into(), l);
        }
        row(WARPS_ACTIVE.into(), "3.69");
        ncu::parse(&text).unwrap()
    }

    #[test]
    fn the_hardware_side_sums_reasons_per_group_and_leaves_absent_ones_absent() {
        let hw = export(
            &[
                ("selected", "1"),
                ("not_selected", "0.5"),
                ("math_pipe_throttle", "0.25"),
                ("wait", "2"),
                ("barrier", "1.5"),
                ("membar", "0.5"),
            ],
            Some("7.62"),
        );
        let bd = hardware(&hw[0]).unwrap();
        assert_eq!(bd.per_instruction, 7.62);
        assert_eq!(
            bd.groups,
            vec![Some(1.0), None, Some(2.0), None, None, Some(2.0), None],
            "a group with one reason absent is absent (not_selected is there, dispatch_stall not)"
        );
        assert_eq!(bd.warps, vec![("active", 3.69)]);
        // Without the latency metric, the sum of the groups present.
        let bd = hardware(&export(&[("selected", "1"), ("wait", "2")], None)[0]).unwrap();
        assert_eq!(bd.per_instruction, 3.0);
        // No reason at all: no breakdown.
        assert_eq!(hardware(&export(&[], Some("7.62"))[0]), None);
    }

    #[test]
    fn the_model_side_divides_the_path_by_the_instructions_its_warp_issued() {
        let mut c = Counters::default();
        c.critical_path.issue = 100;
        c.critical_path.operand_wait[InstrClass::Mma as usize] = 50;
        c.critical_path.operand_wait[InstrClass::Integer as usize] = 25;
        c.critical_path.operand_wait[InstrClass::SharedLoad as usize] = 80;
        c.critical_path.operand_wait[InstrClass::GlobalLoad as usize] = 40;
        c.critical_path.barrier = 30;
        c.critical_path.store_drain = 10;
        c.critical_path_cycles = c.critical_path.total();
        let bd = model(&c, 4.0);
        assert_eq!(bd.per_instruction, 3.35);
        assert_eq!(
            bd.groups,
            vec![
                Some(1.0),
                None,
                Some(0.75),
                Some(0.8),
                Some(0.4),
                Some(0.3),
                Some(0.1)
            ]
        );
        let sum: f64 = bd.groups.iter().flatten().sum();
        assert!((sum - bd.per_instruction).abs() < 1e-12);
        assert_eq!(bd.warps, vec![("resident", 4.0)]);
    }
}
