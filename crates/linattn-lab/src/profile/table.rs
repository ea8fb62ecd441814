//! Text (and markdown) tables of profiles: one row per kernel and phase, then the phase
//! totals against the minimal traffic.

use tabled::builder::Builder;
use tabled::settings::Style;

use crate::results::profiles::ProfileRecord;

fn sci(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if (0.01..10_000.0).contains(&x.abs()) {
        format!("{x:.3}")
    } else {
        format!("{x:.3e}")
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn micros(s: f64) -> String {
    format!("{:.2}", s * 1e6)
}

/// The per-kernel table of one profile (markdown when `markdown`).
pub(crate) fn kernel_table(p: &ProfileRecord, markdown: bool) -> String {
    let mut b = Builder::new();
    b.push_record([
        "phase",
        "kernel",
        "launches",
        "warp instr/token",
        "lanes",
        "sectors/req",
        "sector eff",
        "wavefronts/req",
        "conflicts",
        "DRAM B/token",
        "mma/token",
        "occupancy",
        "model µs",
        "bound",
        "roofline µs",
    ]);
    for k in &p.kernels {
        b.push_record([
            k.phase.clone(),
            k.kernel.clone(),
            k.launches.to_string(),
            sci(k.per_token.warp_instructions),
            pct(k.lane_utilisation),
            sci(k.global_sectors_per_request),
            pct(k.sector_efficiency),
            sci(k.shared_wavefronts_per_request),
            format!("{:.2}×", k.bank_conflict_factor),
            sci(k.per_token.unique_dram_bytes),
            sci(k.per_token.mma),
            format!(
                "{} ({} CTA/SM, {})",
                pct(k.occupancy.fraction),
                k.occupancy.ctas_per_sm,
                k.occupancy.limiter
            ),
            micros(k.model.total_s),
            k.model.bound.clone(),
            micros(k.model.roofline_s),
        ]);
    }
    finish(b, markdown)
}

/// Where the modelled critical path of each kernel's longest CTA went, as shares of it: one
/// cycle per instruction its last warp issued, its waits for operands by the producing
/// class, for earlier global stores, and at barriers (the shares sum to 100%).
pub(crate) fn path_table(p: &ProfileRecord, markdown: bool) -> String {
    // The waits shown in columns of their own; the other classes' are summed in "other".
    const WAITS: [(&str, &str); 5] = [
        ("mma", "mma"),
        ("global_load", "global load"),
        ("shared_load", "shared load"),
        ("special", "special fn"),
        ("shuffle", "shuffle"),
    ];
    let mut b = Builder::new();
    let mut head = vec!["phase", "kernel", "path cycles", "issue"];
    head.extend(WAITS.iter().map(|(_, label)| *label));
    head.extend(["other operands", "store drain", "barrier"]);
    b.push_record(head);
    for k in &p.kernels {
        let path = &k.critical_path;
        let share = |cycles: u64| pct(cycles as f64 / path.cycles.max(1) as f64);
        let shown: u64 = WAITS.iter().map(|(name, _)| path.waited_on(name)).sum();
        let other = path.operand_wait.values().sum::<u64>() - shown;
        let mut row = vec![
            k.phase.clone(),
            k.kernel.clone(),
            path.cycles.to_string(),
            share(path.issue),
        ];
        row.extend(WAITS.iter().map(|(name, _)| share(path.waited_on(name))));
        row.extend([share(other), share(path.store_drain), share(path.barrier)]);
        b.push_record(row);
    }
    finish(b, markdown)
}

/// The phase totals of one profile.
pub(crate) fn phase_table(p: &ProfileRecord, markdown: bool) -> String {
    let mut b = Builder::new();
    b.push_record([
        "phase",
        "launches",
        "warp instr/token",
        "thread instr/token",
        "DRAM B/token",
        "minimal B/token",
        "DRAM / minimal",
        "model µs",
    ]);
    for ph in &p.phases {
        b.push_record([
            ph.phase.clone(),
            ph.launches.to_string(),
            sci(ph.per_token.warp_instructions),
            sci(ph.per_token.thread_instructions),
            sci(ph.per_token.unique_dram_bytes),
            sci(ph.minimal_bytes_per_token),
            format!("{:.2}×", ph.dram_over_minimum),
            micros(ph.model_s),
        ]);
    }
    finish(b, markdown)
}

fn finish(b: Builder, markdown: bool) -> String {
    let mut t = b.build();
    if markdown {
        t.with(Style::markdown());
    } else {
        t.with(Style::sharp());
    }
    t.to_string()
}

/// Every profile's header, kernel table (unless `quiet`) and phase totals.
pub(crate) fn render_profiles(profiles: &[ProfileRecord], quiet: bool) -> String {
    let mut out = String::new();
    for p in profiles {
        out.push_str(&format!(
            "\n{} — {} tokens (B·H·N), model on {} {} (not a measurement)\n",
            p.key(),
            p.tokens,
            p.arch.part,
            p.arch.arch
        ));
        if !quiet {
            out.push_str(&kernel_table(p, false));
            out.push('\n');
            out.push_str("critical path of each kernel's longest CTA (model):\n");
            out.push_str(&path_table(p, false));
            out.push('\n');
        }
        out.push_str(&phase_table(p, false));
        out.push('\n');
    }
    out
}
