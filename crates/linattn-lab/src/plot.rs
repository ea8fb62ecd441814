//! The SVG plots of the lab (`report`, the decode bench, `sparsity`), drawn with plotters
//! into strings: one palette, one way to render and name a failed plot, and the log-log plot
//! of a quantity against N.
//!
//! Log-log axes are drawn in log space with ticks placed by hand, so a reader sees exactly
//! the N that ran (2^k), memory in binary units and times at whole decades (no "1.000 ms").
//! Time points carry min–max whiskers; a line that stops because a cell ran out of memory or
//! was predicted too slow ends in a labelled mark at the next N; dashed N¹ and N² slopes from
//! the lower-left corner show at a glance which rows grow linearly.

use linattn_core::AttnError;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

/// The palette of every plot (report and sparsity), one colour per line.
const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// The colour of the `i`-th line of a plot.
pub(crate) fn line_color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

/// What `draw` may fail with (plotters' errors, boxed).
pub(crate) type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Renders an SVG of `size` pixels: a white canvas handed to `draw`, then written out. A
/// failure is an `AttnError` naming the plot's `title`.
pub(crate) fn render_svg(
    size: (u32, u32),
    title: &str,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> DrawResult,
) -> Result<String, AttnError> {
    let mut svg = String::new();
    let drawn = (|| -> DrawResult {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)?;
        draw(&root)?;
        root.present()?;
        Ok(())
    })();
    drawn.map_err(|e| AttnError::State(format!("plot '{title}': {e}")))?;
    Ok(svg)
}

/// A chart on an SVG canvas with plain f64 axes (log-space values where the plot is log).
pub(crate) type Chart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A line through `points`, `width` pixels wide, with a dot on each point, named `label`
/// in the legend.
pub(crate) fn draw_dotted_line(
    chart: &mut Chart,
    points: &[(f64, f64)],
    label: String,
    color: RGBColor,
    width: u32,
) -> DrawResult {
    chart
        .draw_series(LineSeries::new(
            points.to_vec(),
            ShapeStyle::from(&color).stroke_width(width),
        ))?
        .label(label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    Ok(())
}

/// The legend at `position`, boxed, over the plot behind it faded to `opacity` of white.
pub(crate) fn draw_legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
    opacity: f64,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(opacity))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// What a plot's y axis shows: seconds (decade ticks) or bytes (binary ticks).
#[derive(Clone, Copy)]
pub(crate) enum Quantity {
    Time,
    Memory,
}

/// One measured point: x = N (or a context length), the value, and the min–max of its
/// samples when there are several.
pub(crate) struct Point {
    pub n: f64,
    pub value: f64,
    pub range: Option<(f64, f64)>,
}

/// One line of a plot: label, points, a thin stroke for peers, and where and why it stops
/// early (out of memory, too slow) when it does.
pub(crate) struct Series {
    pub label: String,
    pub thin: bool,
    pub points: Vec<Point>,
    pub stop: Option<(f64, &'static str)>,
}

impl Quantity {
    /// Time is plotted as log10(seconds) (decade ticks), memory as log2(bytes) (binary ticks).
    fn to_axis(self, v: f64) -> f64 {
        match self {
            Quantity::Time => v.log10(),
            Quantity::Memory => v.log2(),
        }
    }

    /// How many axis units one doubling of the value spans (the slope unit of N¹).
    fn per_doubling(self) -> f64 {
        match self {
            Quantity::Time => std::f64::consts::LOG10_2,
            Quantity::Memory => 1.0,
        }
    }

    fn description(self) -> &'static str {
        match self {
            Quantity::Time => "median time (whiskers: min–max of the samples)",
            Quantity::Memory => "peak memory",
        }
    }

    /// The label of an axis position: whole decades of seconds or whole powers of two of
    /// bytes; anything else gets no label.
    fn tick_label(self, y: f64) -> String {
        if (y - y.round()).abs() > 1e-6 {
            return String::new();
        }
        let e = y.round() as i32;
        match self {
            Quantity::Time => decade_seconds(e),
            Quantity::Memory => binary_bytes(e),
        }
    }
}

/// 10^e seconds without needless decimals: "100 µs", "1 ms", "10 s".
fn decade_seconds(e: i32) -> String {
    let (unit, offset) = match e {
        e if e >= 0 => ("s", 0),
        -3..=-1 => ("ms", 3),
        -6..=-4 => ("µs", 6),
        _ => ("ns", 9),
    };
    let digits = e + offset;
    if digits < 0 {
        return format!("1e{e} s");
    }
    format!("{} {unit}", 10u64.pow(digits as u32))
}

/// 2^e bytes in binary units: "512 B", "1 KiB", "256 MiB".
fn binary_bytes(e: i32) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if e < 0 {
        return String::new();
    }
    let unit = ((e / 10) as usize).min(UNITS.len() - 1);
    let rest = e - 10 * unit as i32;
    format!("{} {}", 1u64 << rest, UNITS[unit])
}

/// N = 2^k as "2^k".
pub(crate) fn power_of_two_label(x: f64, run: &[i32]) -> String {
    let k = x.round() as i32;
    if (x - x.round()).abs() > 1e-6 || !run.contains(&k) {
        return String::new();
    }
    format!("2^{k}")
}

/// One log-log plot of `quantity` against N for `series`; `None` when no series has a point.
pub(crate) fn log_log_svg(
    title: &str,
    x_desc: &str,
    quantity: Quantity,
    series: &[Series],
) -> Result<Option<String>, AttnError> {
    let to_xy = |p: &Point| (p.n.log2(), quantity.to_axis(p.value));
    let points: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().map(to_xy))
        .collect();
    if points.is_empty() {
        return Ok(None);
    }
    let whisker_ends = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter_map(|p| p.range)
        .flat_map(|(lo, hi)| [lo, hi])
        .map(|v| quantity.to_axis(v));
    let all_n = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.n).chain(s.stop.map(|(n, _)| n)));
    let mut run: Vec<i32> = all_n
        .clone()
        .filter(|n| n.fract() == 0.0 && (*n as u64).is_power_of_two())
        .map(|n| n.log2().round() as i32)
        .collect();
    run.sort_unstable();
    run.dedup();
    let x_lo = points
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .floor()
        - 0.5;
    let x_hi = all_n
        .map(f64::log2)
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil()
        + 0.5;
    let ys: Vec<f64> = points.iter().map(|p| p.1).chain(whisker_ends).collect();
    let y_lo = ys.iter().copied().fold(f64::INFINITY, f64::min).floor();
    let y_hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max).ceil() + 1.0;
    let (x_ticks, y_ticks) = (
        (x_hi - x_lo).ceil() as usize + 1,
        (y_hi - y_lo) as usize + 1,
    );

    let svg = render_svg((960, 640), title, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(quantity.description())
            .x_labels(x_ticks.min(40))
            .y_labels(y_ticks.min(40))
            .x_label_formatter(&|x| power_of_two_label(*x, &run))
            .y_label_formatter(&|y| quantity.tick_label(*y))
            .light_line_style(WHITE)
            .draw()?;

        // Reference slopes N¹ and N² through the lowest point at the smallest N.
        let x0 = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let y0 = points
            .iter()
            .filter(|p| p.0 == x0)
            .map(|p| p.1)
            .fold(f64::INFINITY, f64::min);
        let grey = RGBColor(120, 120, 120);
        for (power, label) in [(1.0, "∝ N"), (2.0, "∝ N²")] {
            let slope = power * quantity.per_doubling();
            let x_end = (x0 + (y_hi - y0) / slope).min(x_hi);
            let end = (x_end, y0 + slope * (x_end - x0));
            chart
                .draw_series(DashedLineSeries::new(
                    [(x0, y0), end],
                    6,
                    4,
                    ShapeStyle::from(&grey).stroke_width(1),
                ))?
                .label(format!("{label} (reference slope)"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey));
            chart.draw_series(std::iter::once(Text::new(
                label.to_string(),
                (end.0 - 0.35, end.1 - 0.15),
                ("sans-serif", 13).into_font().color(&grey),
            )))?;
        }

        for (i, line) in series.iter().enumerate() {
            let color = line_color(i);
            let xy: Vec<(f64, f64)> = line.points.iter().map(to_xy).collect();
            let width = if line.thin { 1 } else { 2 };
            draw_dotted_line(&mut chart, &xy, line.label.clone(), color, width)?;
            for p in &line.points {
                let Some((lo, hi)) = p.range else { continue };
                let x = p.n.log2();
                let (lo, hi) = (quantity.to_axis(lo), quantity.to_axis(hi));
                let thin = ShapeStyle::from(&color).stroke_width(1);
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, lo), (x, hi)],
                    thin,
                )))?;
                for y in [lo, hi] {
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x - 0.06, y), (x + 0.06, y)],
                        thin,
                    )))?;
                }
            }
            if let Some((n, label)) = line.stop {
                let at = (n.log2(), xy.last().map_or(y_hi - 0.5, |p| p.1));
                chart.draw_series(std::iter::once(Cross::new(
                    at,
                    6,
                    ShapeStyle::from(&color).stroke_width(2),
                )))?;
                chart.draw_series(std::iter::once(Text::new(
                    label.to_string(),
                    (at.0 + 0.1, at.1),
                    ("sans-serif", 12).into_font().color(&color),
                )))?;
            }
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft, 0.85)
    })?;
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_whole_decades_and_binary_units() {
        assert_eq!(decade_seconds(0), "1 s");
        assert_eq!(decade_seconds(1), "10 s");
        assert_eq!(decade_seconds(-1), "100 ms");
        assert_eq!(decade_seconds(-3), "1 ms");
        assert_eq!(decade_seconds(-5), "10 µs");
        assert_eq!(decade_seconds(-9), "1 ns");
        assert_eq!(binary_bytes(9), "512 B");
        assert_eq!(binary_bytes(10), "1 KiB");
        assert_eq!(binary_bytes(28), "256 MiB");
        assert_eq!(binary_bytes(30), "1 GiB");
        assert_eq!(Quantity::Time.tick_label(-2.5), "");
        assert_eq!(power_of_two_label(10.0, &[8, 10]), "2^10");
        assert_eq!(power_of_two_label(9.0, &[8, 10]), "", "N = 2^9 did not run");
        assert_eq!(power_of_two_label(9.5, &[8, 10]), "");
    }
}
