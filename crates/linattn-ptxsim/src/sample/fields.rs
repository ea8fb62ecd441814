//! Every counter of [`Counters`] by name, so a sampled launch can say which counters its
//! rows differed in.

use crate::counters::Counters;
use crate::instr_class::InstrClass;

/// (name, value) of every counter, the per-class arrays as "warp fp32", "thread fp32", ….
pub fn named(c: &Counters) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = vec![
        ("warp instructions".into(), c.warp_instructions),
        ("thread instructions".into(), c.thread_instructions),
    ];
    for class in InstrClass::ALL {
        out.push((format!("warp {}", class.name()), c.warp(class)));
    }
    for class in InstrClass::ALL {
        out.push((
            format!("thread {}", class.name()),
            c.thread_by_class[class as usize],
        ));
    }
    let scalars: [(&str, u64); 18] = [
        ("fp32 flops", c.fp32_flops),
        ("mma", c.mma),
        ("barriers", c.barriers),
        ("global load requests", c.global_load_requests),
        ("global load sectors", c.global_load_sectors),
        ("global load bytes", c.global_load_bytes),
        ("global store requests", c.global_store_requests),
        ("global store sectors", c.global_store_sectors),
        ("global store bytes", c.global_store_bytes),
        ("unique load sectors", c.unique_load_sectors),
        ("unique store sectors", c.unique_store_sectors),
        ("shared load requests", c.shared_load_requests),
        ("shared load wavefronts", c.shared_load_wavefronts),
        (
            "shared load ideal wavefronts",
            c.shared_load_ideal_wavefronts,
        ),
        ("shared store requests", c.shared_store_requests),
        ("shared store wavefronts", c.shared_store_wavefronts),
        (
            "shared store ideal wavefronts",
            c.shared_store_ideal_wavefronts,
        ),
        ("critical path cycles", c.critical_path_cycles),
    ];
    out.extend(scalars.iter().map(|&(n, v)| (n.to_string(), v)));
    out
}

/// "name a vs b" for every counter in which `a` and `b` differ.
pub fn differences(a: &Counters, b: &Counters) -> Vec<String> {
    named(a)
        .into_iter()
        .zip(named(b))
        .filter(|((_, x), (_, y))| x != y)
        .map(|((name, x), (_, y))| format!("{name} {x} vs {y}"))
        .collect()
}
