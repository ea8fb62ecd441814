//! SVG plots of S against n (log axis, ticks at the n that ran) and against γ: measured points joined by thick
//! lines (±2 se bars), the closed form as a thin line of the same colour.

use super::record::{SparsityRecord, Sweep};
use crate::plot::{draw_dotted_line, draw_legend, line_color, power_of_two_label, render_svg};
use linattn_core::AttnError;
use plotters::prelude::*;

/// One sweep's plot, or `None` when the sweep has no records.
pub fn svg(records: &[SparsityRecord], sweep: Sweep) -> Result<Option<String>, AttnError> {
    let rows: Vec<&SparsityRecord> = records.iter().filter(|r| r.sweep == sweep).collect();
    let x_of = |r: &SparsityRecord| match sweep {
        // log2(n): a linear axis whose whole numbers are the powers of two that ran.
        Sweep::N => (r.n as f64).log2(),
        Sweep::Gamma => r.gamma.unwrap_or(0.0),
    };
    if rows.is_empty() {
        return Ok(None);
    }
    let mut cases: Vec<&str> = Vec::new();
    for r in &rows {
        if !cases.contains(&r.case.as_str()) {
            cases.push(&r.case);
        }
    }
    let x_min = rows.iter().map(|r| x_of(r)).fold(f64::INFINITY, f64::min);
    let x_max = rows.iter().map(|r| x_of(r)).fold(0.0, f64::max);
    let title = match sweep {
        Sweep::N => "S(a) against row length n: decay → 0, linear maps flat",
        Sweep::Gamma => "S(a) against γ = σ‖q‖: softmax → 0, linear maps bounded",
    };

    let svg = render_svg((900, 600), title, |root| {
        let mut builder = ChartBuilder::on(root);
        builder
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(60);
        let (x_lo, x_hi, x_desc) = match sweep {
            Sweep::N => (
                x_min - 0.5,
                x_max + 0.5,
                "n (log scale; thin lines: closed form)",
            ),
            Sweep::Gamma => (
                x_min * 0.9,
                x_max * 1.05,
                "γ (thin lines: closed form, n → ∞)",
            ),
        };
        let run: Vec<i32> = rows
            .iter()
            .filter(|r| r.n.is_power_of_two())
            .map(|r| r.n.trailing_zeros() as i32)
            .collect();
        let mut chart = builder.build_cartesian_2d(x_lo..x_hi, 0.0..1.05)?;
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(x_desc).y_desc("S(a) = E|a| / √(E a²)");
        let n_label = |x: &f64| power_of_two_label(*x, &run);
        if matches!(sweep, Sweep::N) {
            mesh.x_labels(((x_hi - x_lo).ceil() as usize + 1).min(40))
                .x_label_formatter(&n_label);
        }
        mesh.draw()?;
        for (i, case) in cases.iter().enumerate() {
            let color = line_color(i);
            let mine: Vec<&&SparsityRecord> = rows.iter().filter(|r| r.case == *case).collect();
            let measured: Vec<(f64, f64)> = mine.iter().map(|r| (x_of(r), r.measured)).collect();
            draw_dotted_line(&mut chart, &measured, case.to_string(), color, 2)?;
            chart.draw_series(mine.iter().map(|r| {
                let x = x_of(r);
                PathElement::new(
                    vec![(x, r.measured - 2.0 * r.se), (x, r.measured + 2.0 * r.se)],
                    color,
                )
            }))?;
            let closed: Vec<(f64, f64)> = mine
                .iter()
                .filter_map(|r| Some((x_of(r), r.closed_form?)))
                .collect();
            chart.draw_series(LineSeries::new(
                closed,
                ShapeStyle::from(&color.mix(0.6)).stroke_width(1),
            ))?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::LowerLeft, 0.8)
    })?;
    Ok(Some(svg))
}
