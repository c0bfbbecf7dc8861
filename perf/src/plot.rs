//! PNG plots of the harness's results (`--plot-dir`): a bar per
//! throughput scenario, the lag's cumulative distribution, and lines of a
//! quantity against the partition count.
//!
//! Text is drawn with a TrueType font read from the system (DejaVu Sans,
//! Debian's `fonts-dejavu-core`, or `RINGMIRROR_PLOT_FONT`), so no C
//! font library is linked; without a font the plot is an error, and the
//! measurements are still printed.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::Context;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

/// Where the font is looked for when `RINGMIRROR_PLOT_FONT` is not set.
const FONT_PATHS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];
const SIZE: (u32, u32) = (1000, 560);
const FONT: &str = "sans-serif";

/// Registers the font once for every plot of this process.
fn font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let chosen = std::env::var("RINGMIRROR_PLOT_FONT")
                .ok()
                .or_else(|| FONT_PATHS.iter().find(|p| Path::new(p).exists()).map(|p| p.to_string()))
                .ok_or_else(|| {
                    format!("no font for plots: set RINGMIRROR_PLOT_FONT or install one of {FONT_PATHS:?}")
                })?;
            let bytes = std::fs::read(&chosen).map_err(|e| format!("{chosen}: {e}"))?;
            // The font lives as long as the process: plotters keeps a `'static` reference to it.
            register_font(FONT, FontStyle::Normal, Box::leak(bytes.into_boxed_slice()))
                .map_err(|_| format!("{chosen}: not a TrueType font"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// One bar per `(label, value)`, in order, with its value written above it.
pub fn bars(path: &Path, title: &str, unit: &str, bars: &[(String, f64)]) -> anyhow::Result<()> {
    font()?;
    let top = bars.iter().map(|(_, v)| *v).fold(0.0, f64::max) * 1.15;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        // A segmented range over `0..n` has a segment for `n` too: the last bar is `n - 1`.
        .build_cartesian_2d((0..bars.len().max(2) - 1).into_segmented(), 0.0..top.max(1.0))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(unit)
        .x_labels(bars.len())
        .x_label_style((FONT, 13))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => bars.get(*i).map_or_else(String::new, |(label, _)| label.clone()),
            _ => String::new(),
        })
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
        let mut bar = Rectangle::new(
            [(SegmentValue::Exact(i), 0.0), (SegmentValue::Exact(i + 1), *v)],
            BLUE.mix(0.6).filled(),
        );
        bar.set_margin(0, 0, 12, 12);
        bar
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
        // Above the bar: the text's anchor is its top left corner.
        EmptyElement::at((SegmentValue::CenterOf(i), *v))
            + Text::new(three_figures(*v), (-18, -20), (FONT, 14).into_font())
    }))?;
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// `v` with about three significant figures: 2073, 1.38, 0.270.
fn three_figures(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// Cumulative distributions, one line per `(label, points)`; each point is
/// `(milliseconds, fraction of batches at or below it)`. The x axis is logarithmic.
pub fn cdf(path: &Path, title: &str, series: &[(String, Vec<(f64, f64)>)]) -> anyhow::Result<()> {
    let values = || series.iter().flat_map(|(_, points)| points.iter().map(|(ms, _)| *ms));
    let low = values().fold(f64::INFINITY, f64::min).max(0.001);
    let high = values().fold(0.0, f64::max).max(low * 10.0);
    let axes = LogXAxes {
        desc: ("lag, ms (availability at the source to commit)", "fraction of batches"),
        x: low..high,
        y: 0.0..1.0,
        legend: SeriesLabelPosition::LowerRight,
        markers: false,
    };
    log_x_lines(path, title, &axes, series)
}

/// Lines of `(x, y)` points, one per `(label, points)`, with a
/// logarithmic x axis (e.g. RSS against the partition count).
pub fn lines(path: &Path, title: &str, desc: (&str, &str), series: &[(String, Vec<(f64, f64)>)]) -> anyhow::Result<()> {
    let xs = || series.iter().flat_map(|(_, points)| points.iter().map(|(x, _)| *x));
    let ys = || series.iter().flat_map(|(_, points)| points.iter().map(|(_, y)| *y));
    let low = xs().fold(f64::INFINITY, f64::min).max(1.0);
    let high = xs().fold(0.0, f64::max).max(low * 2.0);
    let top = ys().fold(0.0, f64::max).max(1e-9) * 1.1;
    let axes = LogXAxes {
        desc,
        x: low * 0.8..high * 1.25,
        y: 0.0..top,
        legend: SeriesLabelPosition::UpperLeft,
        markers: true,
    };
    log_x_lines(path, title, &axes, series)
}

/// The axes of a line chart with a logarithmic x axis.
struct LogXAxes<'a> {
    desc: (&'a str, &'a str),
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    legend: SeriesLabelPosition,
    /// A dot at each point as well as the line.
    markers: bool,
}

fn log_x_lines(
    path: &Path,
    title: &str,
    axes: &LogXAxes<'_>,
    series: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    font()?;
    let root = BitMapBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(axes.x.clone().log_scale(), axes.y.clone())?;
    chart
        .configure_mesh()
        .x_desc(axes.desc.0)
        .y_desc(axes.desc.1)
        .label_style((FONT, 13))
        .draw()?;
    for (i, (label, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
        if axes.markers {
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
    }
    chart
        .configure_series_labels()
        .position(axes.legend.clone())
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_values_keep_about_three_figures() {
        assert_eq!(three_figures(2073.2), "2073");
        assert_eq!(three_figures(1.378), "1.38");
        assert_eq!(three_figures(0.2704), "0.270");
    }

    /// Every plot writes a PNG file (its signature checked); the set-up installs the font.
    #[test]
    fn plots_are_png_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bar_path = dir.path().join("bars.png");
        bars(&bar_path, "t", "MB/s", &[("a".into(), 10.0), ("b".into(), 20.0)]).expect("bars");
        let cdf_path = dir.path().join("cdf.png");
        cdf(
            &cdf_path,
            "t",
            &[("x".into(), vec![(0.1, 0.0), (1.0, 0.5), (10.0, 1.0)])],
        )
        .expect("cdf");
        let lines_path = dir.path().join("lines.png");
        lines(
            &lines_path,
            "t",
            ("partitions", "MiB"),
            &[("x".into(), vec![(100.0, 1.0), (1000.0, 5.0)])],
        )
        .expect("lines");
        for path in [bar_path, cdf_path, lines_path] {
            let bytes = std::fs::read(&path).expect("read");
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
        }
    }
}
