//! PNG plots for the harness results, drawn with plotters' bitmap backend: a line chart (one
//! line per series, optional log x axis) and a grouped bar chart. Text needs a system font
//! (plotters' `ttf` feature goes through fontconfig); when none can be loaded the plot is
//! drawn again without any text, so a minimal container still gets its picture and the
//! numbers stay in the Markdown table next to it.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// One named line of (x, y) points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A plot that could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("could not draw plot '{path}': {msg}")]
pub struct PlotError {
    /// Output file.
    pub path: String,
    /// What plotters said.
    pub msg: String,
}

/// Whether the last plot was drawn with text (false: fonts were missing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drawn {
    /// Title, axis labels and legend are in the picture.
    WithText,
    /// No usable font: only lines, bars and the grid.
    WithoutText,
}

type DynErr = Box<dyn std::error::Error>;

fn with_text_fallback(
    path: &Path,
    draw: impl Fn(bool) -> Result<(), DynErr>,
) -> Result<Drawn, PlotError> {
    match draw(true) {
        Ok(()) => Ok(Drawn::WithText),
        Err(first) => draw(false)
            .map(|()| Drawn::WithoutText)
            .map_err(|e| PlotError {
                path: path.display().to_string(),
                msg: format!("{e} (with text: {first})"),
            }),
    }
}

/// Draws a line chart of `series` to the PNG `path`.
///
/// # Errors
/// [`PlotError`] when even the text-free drawing fails (e.g. the directory is missing).
pub fn line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    log_x: bool,
) -> Result<Drawn, PlotError> {
    let all = || series.iter().flat_map(|s| s.points.iter().copied());
    let (mut x0, mut x1) = all().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| (a.min(x), b.max(x)));
    let (mut y0, mut y1) = all().fold((f64::MAX, f64::MIN), |(a, b), (_, y)| (a.min(y), b.max(y)));
    if x0 > x1 {
        (x0, x1, y0, y1) = (1.0, 10.0, 0.0, 1.0);
    }
    if log_x {
        x0 = x0.max(1e-9) / 1.3;
        x1 *= 1.3;
    } else {
        let pad = ((x1 - x0) * 0.05).max(1e-9);
        (x0, x1) = (x0 - pad, x1 + pad);
    }
    let pad = ((y1 - y0) * 0.1).max(1e-3);
    (y0, y1) = (y0 - pad, y1 + pad);
    with_text_fallback(path, |text| {
        let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut b = ChartBuilder::on(&root);
        b.margin(16);
        if text {
            b.caption(title, ("sans-serif", 22))
                .x_label_area_size(44)
                .y_label_area_size(64);
        }
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart;
                let mut mesh = chart.configure_mesh();
                if text {
                    mesh.x_desc(x_desc).y_desc(y_desc);
                } else {
                    mesh.x_labels(0).y_labels(0);
                }
                mesh.draw()?;
                for (i, s) in series.iter().enumerate() {
                    let color = Palette99::pick(i).to_rgba();
                    let line = chart.draw_series(LineSeries::new(
                        s.points.iter().copied(),
                        color.stroke_width(2),
                    ))?;
                    if text {
                        line.label(s.name.as_str()).legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                        });
                    }
                    chart
                        .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
                }
                if text {
                    chart
                        .configure_series_labels()
                        .background_style(WHITE.mix(0.85))
                        .border_style(BLACK)
                        .position(SeriesLabelPosition::UpperRight)
                        .draw()?;
                }
            }};
        }
        if log_x {
            finish!(b.build_cartesian_2d((x0..x1).log_scale(), y0..y1)?);
        } else {
            finish!(b.build_cartesian_2d(x0..x1, y0..y1)?);
        }
        root.present()?;
        Ok(())
    })
}

/// Draws a grouped bar chart: one group per category, one bar per series in each group
/// (`values[series][category]`; non-finite values are left out). With `log_y` the y axis is
/// logarithmic, so a 300 ms bufferbloat bar and a 2 ms CAKE bar are both readable.
///
/// # Errors
/// [`PlotError`] when even the text-free drawing fails.
pub fn bar_chart(
    path: &Path,
    title: &str,
    y_desc: &str,
    categories: &[String],
    series_names: &[String],
    values: &[Vec<f64>],
    log_y: bool,
) -> Result<Drawn, PlotError> {
    let n_cat = categories.len().max(1);
    let n_ser = series_names.len().max(1);
    let finite = || {
        values
            .iter()
            .flatten()
            .copied()
            .filter(|v| v.is_finite() && (!log_y || *v > 0.0))
    };
    let y1 = finite().fold(0.0f64, f64::max).max(1e-3) * if log_y { 2.0 } else { 1.15 };
    let y0 = if log_y {
        finite().fold(f64::MAX, f64::min).min(y1 / 10.0) / 2.0
    } else {
        0.0
    };
    with_text_fallback(path, |text| {
        let width = (n_cat as u32 * 48).clamp(900, 2400);
        let root = BitMapBackend::new(path, (width, 700)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut b = ChartBuilder::on(&root);
        b.margin(16);
        if text {
            b.caption(title, ("sans-serif", 22))
                .x_label_area_size(170)
                .y_label_area_size(64);
        }
        macro_rules! finish {
            ($chart:expr) => {{
                let mut chart = $chart;
                let mut mesh = chart.configure_mesh();
                mesh.disable_x_mesh();
                let fmt = |x: &f64| {
                    let i = x.floor() as usize;
                    if (x - x.floor() - 0.5).abs() < 1e-6 {
                        // Rotated labels are centred on the tick; as many leading spaces as
                        // characters put the text below the axis instead.
                        let c = categories.get(i).cloned().unwrap_or_default();
                        format!("{}{c}", " ".repeat(c.chars().count() * 2 + 4))
                    } else {
                        String::new()
                    }
                };
                if text {
                    mesh.y_desc(y_desc)
                        .x_labels(n_cat * 2 + 1)
                        .x_label_formatter(&fmt)
                        .x_label_style(
                            ("sans-serif", 11)
                                .into_font()
                                .transform(FontTransform::Rotate90)
                                .into_text_style(&root)
                                .pos(Pos::new(HPos::Left, VPos::Center)),
                        );
                } else {
                    mesh.x_labels(0).y_labels(0);
                }
                mesh.draw()?;
                let width = 0.8 / n_ser as f64;
                for (si, row) in values.iter().enumerate() {
                    let color = Palette99::pick(si).to_rgba();
                    let bars = chart.draw_series(
                        row.iter()
                            .enumerate()
                            .filter(|(_, v)| v.is_finite() && (!log_y || **v > 0.0))
                            .map(|(ci, &v)| {
                                let x = ci as f64 + 0.1 + si as f64 * width;
                                Rectangle::new([(x, y0), (x + width * 0.95, v)], color.filled())
                            }),
                    )?;
                    if text {
                        if let Some(name) = series_names.get(si) {
                            bars.label(name.as_str()).legend(move |(x, y)| {
                                Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
                            });
                        }
                    }
                }
                if text {
                    chart
                        .configure_series_labels()
                        .background_style(WHITE.mix(0.85))
                        .border_style(BLACK)
                        .position(SeriesLabelPosition::UpperRight)
                        .draw()?;
                }
            }};
        }
        if log_y {
            finish!(b.build_cartesian_2d(0f64..n_cat as f64, (y0..y1).log_scale())?);
        } else {
            finish!(b.build_cartesian_2d(0f64..n_cat as f64, y0..y1)?);
        }
        root.present()?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_png(p: &Path) -> bool {
        std::fs::read(p).is_ok_and(|b| b.len() > 1000 && b.starts_with(b"\x89PNG"))
    }

    #[test]
    fn a_log_scale_line_chart_renders_a_png() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l.png");
        let s = vec![
            Series {
                name: "htb".into(),
                points: vec![(10.0, -0.2), (100.0, -0.4), (1000.0, 0.1)],
            },
            Series {
                name: "tbf".into(),
                points: vec![(10.0, 0.3), (1000.0, -1.0)],
            },
        ];
        line_chart(&p, "accuracy", "Mbit/s", "error %", &s, true).unwrap();
        assert!(is_png(&p));
    }

    #[test]
    fn a_grouped_bar_chart_renders_a_png_even_with_missing_values() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.png");
        let cats = vec![
            "htb+pfifo nup32".to_string(),
            "cake eq q8 unequal".to_string(),
        ];
        let names = vec!["p50".to_string(), "p99".to_string()];
        let vals = vec![vec![19.0, 1.0], vec![28.0, f64::NAN]];
        bar_chart(&p, "latency", "ms", &cats, &names, &vals, false).unwrap();
        assert!(is_png(&p));
        bar_chart(&p, "latency", "ms", &cats, &names, &vals, true).unwrap();
        if let Ok(keep) = std::env::var("CW_KEEP_PLOT") {
            std::fs::copy(&p, keep).unwrap();
        }
        assert!(is_png(&p));
    }

    #[test]
    fn an_empty_chart_still_renders() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("e.png");
        line_chart(&p, "nothing", "x", "y", &[], false).unwrap();
        assert!(is_png(&p));
    }
}
