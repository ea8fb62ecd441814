//! The markdown table `linattn sparsity` prints (and the README quotes).

use super::record::{SparsityRecord, Sweep};

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("—".into(), |x| format!("{x:.digits$}"))
}

pub fn markdown(records: &[SparsityRecord]) -> String {
    let mut out = String::from(
        "| case | sweep | β | γ | λ | n | S measured | se | bias est. | S closed form (SPEC §7) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in records {
        let sweep = match r.sweep {
            Sweep::N => "n",
            Sweep::Gamma => "γ",
        };
        out.push_str(&format!(
            "| {} | {sweep} | {} | {} | {} | {} | {:.5} | {:.1e} | {:.1e} | {} |\n",
            r.case,
            opt(r.beta, 2),
            opt(r.gamma, 2),
            opt(r.lambda, 3),
            r.n,
            r.measured,
            r.se,
            r.bias,
            opt(r.closed_form, 5),
        ));
    }
    out.push_str(
        "\nS closed form: n → ∞ for the keyed cases; exact at this n for decay (→ 0 as n → ∞).\n",
    );
    out
}
