//! `tallyho report DIR`: the figures of a run folder of `tallyho train`. The training curves
//! of `DIR/metrics.jsonl` against the step (one panel each) and, where the run was evaluated,
//! every policy's equity curve of `DIR/eval.json` against the test bar; each figure as SVG
//! and PNG in `DIR/report/`.
//!
//! Text is drawn with DejaVu Sans embedded in the binary, so the PNGs render on a machine
//! with no system fonts.

use crate::error::{ReportError, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::Deserialize;
use std::fs::File;
use std::io::BufWriter;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The figures `report` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportFiles {
    /// The training curves (`training.svg`, `training.png`).
    pub training: FigureFiles,
    /// The equity curves (`equity.svg`, `equity.png`), where `eval.json` exists.
    pub equity: Option<FigureFiles>,
}

/// One figure's two renderings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FigureFiles {
    pub svg: PathBuf,
    pub png: PathBuf,
}

impl ReportFiles {
    /// Every file written, training first.
    pub fn paths(&self) -> Vec<&Path> {
        let mut v = vec![self.training.svg.as_path(), self.training.png.as_path()];
        if let Some(e) = &self.equity {
            v.extend([e.svg.as_path(), e.png.as_path()]);
        }
        v
    }
}

/// Reads `dir/metrics.jsonl` (and `dir/eval.json` where present) and draws their figures
/// into `dir/report/`.
pub fn report(dir: &Path) -> Result<ReportFiles> {
    let windows = read_metrics(&dir.join("metrics.jsonl"))?;
    let eval_path = dir.join("eval.json");
    let equity = if eval_path.exists() {
        Some(equity_panel(&eval_path)?)
    } else {
        None
    };
    register_font()?;
    let out = dir.join("report");
    std::fs::create_dir_all(&out).map_err(|err| ReportError::Write {
        path: out.clone(),
        err,
    })?;
    let training = write_figure(
        &out.join("training"),
        &Figure {
            title: "training",
            panels: training_panels(&windows),
            grid: (3, 2),
            size: (1200, 1050),
        },
    )?;
    let equity = match equity {
        Some(panel) => Some(write_figure(
            &out.join("equity"),
            &Figure {
                title: "evaluation on the test split",
                panels: vec![panel],
                grid: (1, 1),
                size: (1100, 600),
            },
        )?),
        None => None,
    };
    Ok(ReportFiles { training, equity })
}

/// One line of `metrics.jsonl`: the fields the figures read (the line holds more, see
/// `tallyho_oracle::trainer::Metrics`). A null or absent value is not drawn.
#[derive(Debug, Deserialize)]
struct Window {
    step: u64,
    loss: Option<f64>,
    reward: Option<f64>,
    epsilon: Option<f64>,
    transitions_per_s: Option<f64>,
    grad_norm: Option<f64>,
    mean_q: Option<f64>,
}

/// What a window gives one training panel (None: not drawn).
type Value = fn(&Window) -> Option<f64>;

/// The training panels: title and the value each window gives it.
const TRAINING: [(&str, Value); 6] = [
    ("loss", |w| w.loss),
    ("reward", |w| w.reward),
    ("epsilon", |w| w.epsilon),
    ("transitions/s", |w| w.transitions_per_s),
    ("grad norm", |w| w.grad_norm),
    ("mean Q", |w| w.mean_q),
];

/// Every window of a metrics file, in file order; blank lines are skipped.
fn read_metrics(path: &Path) -> Result<Vec<Window>, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => ReportError::NoMetrics {
            path: path.to_path_buf(),
        },
        _ => ReportError::Read {
            path: path.to_path_buf(),
            err,
        },
    })?;
    let mut windows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        windows.push(
            serde_json::from_str(line).map_err(|err| ReportError::Malformed {
                path: path.to_path_buf(),
                line: i + 1,
                err,
            })?,
        );
    }
    if windows.is_empty() {
        return Err(ReportError::EmptyMetrics {
            path: path.to_path_buf(),
        });
    }
    Ok(windows)
}

/// A line to draw: its legend name and its (x, y) points.
#[derive(Clone, Debug, PartialEq)]
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
}

/// One chart: a title, the x axis's name, and its lines (a legend where there are several).
#[derive(Clone, Debug, PartialEq)]
struct Panel {
    title: String,
    x_desc: &'static str,
    series: Vec<Series>,
}

/// Panels on a grid of (rows, columns), drawn at `size` pixels.
struct Figure {
    title: &'static str,
    panels: Vec<Panel>,
    grid: (usize, usize),
    size: (u32, u32),
}

/// One panel per training curve against the step; windows without the value (the loss
/// before learning starts) and non-finite values are left out, not drawn as zero.
fn training_panels(windows: &[Window]) -> Vec<Panel> {
    TRAINING
        .iter()
        .map(|(title, value)| Panel {
            title: title.to_string(),
            x_desc: "step",
            series: vec![Series {
                name: title.to_string(),
                points: windows
                    .iter()
                    .filter_map(|w| value(w).map(|y| (w.step as f64, y)))
                    .filter(|(_, y)| y.is_finite())
                    .collect(),
            }],
        })
        .collect()
}

/// The equity curves of `eval.json`: one line per policy, named by it, against the bar.
fn equity_panel(path: &Path) -> Result<Panel, ReportError> {
    let eval_err = |why: String| ReportError::Eval {
        path: path.to_path_buf(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|err| ReportError::Read {
        path: path.to_path_buf(),
        err,
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| eval_err(format!("not JSON: {e}")))?;
    let policies = v["policies"]
        .as_array()
        .ok_or_else(|| eval_err("has no `policies` list".into()))?;
    let mut series = Vec::with_capacity(policies.len());
    for (i, p) in policies.iter().enumerate() {
        let name = p["name"]
            .as_str()
            .ok_or_else(|| eval_err(format!("policy {i} has no `name`")))?;
        let equity = p["equity"]
            .as_array()
            .ok_or_else(|| eval_err(format!("policy {name:?} has no `equity` list")))?;
        let points = equity
            .iter()
            .enumerate()
            .filter_map(|(bar, e)| e.as_f64().map(|y| (bar as f64, y)))
            .filter(|(_, y)| y.is_finite())
            .collect();
        series.push(Series {
            name: name.to_string(),
            points,
        });
    }
    Ok(Panel {
        title: "equity".into(),
        x_desc: "test bar",
        series,
    })
}

/// The embedded font under the family name the panels ask for.
fn register_font() -> Result<(), ReportError> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| ReportError::Font)
}

/// `stem.svg` and `stem.png` of `figure`.
fn write_figure(stem: &Path, figure: &Figure) -> Result<FigureFiles, ReportError> {
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let draw_err = |path: &Path, why: String| ReportError::Draw {
        path: path.to_path_buf(),
        why,
    };
    {
        let root = SVGBackend::new(&svg, figure.size).into_drawing_area();
        draw_figure(&root, figure)
            .and_then(|()| root.present())
            .map_err(|e| draw_err(&svg, e.to_string()))?;
    }
    let (w, h) = figure.size;
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut pixels, figure.size).into_drawing_area();
        draw_figure(&root, figure)
            .and_then(|()| root.present())
            .map_err(|e| draw_err(&png, e.to_string()))?;
    }
    write_png(&png, &pixels, figure.size)?;
    Ok(FigureFiles { svg, png })
}

/// The figure's title over its panels on the grid, on any backend: the one drawing code
/// the SVG and the PNG share.
fn draw_figure<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    figure: &Figure,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let body = root.titled(figure.title, ("sans-serif", 26))?;
    for (area, panel) in body.split_evenly(figure.grid).iter().zip(&figure.panels) {
        draw_panel(area, panel)?;
    }
    Ok(())
}

/// Line colours in series order (the tab10 palette's first five: distinct on white).
const LINE_COLORS: [RGBColor; 5] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
];

/// One panel: axes fitted to its points, a line per series, a legend where there are
/// several.
fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let points = || panel.series.iter().flat_map(|s| s.points.iter());
    let x = span(points().map(|p| p.0));
    let y = span(points().map(|p| p.1));
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 13))
        .draw()?;
    for (i, s) in panel.series.iter().enumerate() {
        let color = LINE_COLORS[i % LINE_COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if panel.series.len() > 1 {
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    Ok(())
}

/// The axis range of `values`, padded by 5 %; 0..1 where there are none, and a unit
/// around a single value.
fn span(values: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if lo > hi {
        return 0.0..1.0;
    }
    let pad = if hi > lo {
        0.05 * (hi - lo)
    } else {
        0.5 * lo.abs().max(1.0)
    };
    lo - pad..hi + pad
}

/// An 8-bit RGB `pixels` buffer of `(w, h)` as a PNG file.
fn write_png(path: &Path, pixels: &[u8], (w, h): (u32, u32)) -> Result<(), ReportError> {
    let write_err = |err: std::io::Error| ReportError::Write {
        path: path.to_path_buf(),
        err,
    };
    let png_err = |e: png::EncodingError| write_err(std::io::Error::other(e));
    let file = File::create(path).map_err(write_err)?;
    let mut encoder = png::Encoder::new(BufWriter::new(file), w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(png_err)?;
    writer.write_image_data(pixels).map_err(png_err)?;
    writer.finish().map_err(png_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(line: &str) -> Window {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn a_null_loss_is_left_out_not_drawn_as_zero() {
        let windows = [
            window(r#"{"step": 100, "loss": null, "reward": 0.5}"#),
            window(r#"{"step": 200, "loss": 2.0, "reward": 0.25}"#),
        ];
        let panels = training_panels(&windows);
        let titles: Vec<&str> = panels.iter().map(|p| p.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "loss",
                "reward",
                "epsilon",
                "transitions/s",
                "grad norm",
                "mean Q"
            ]
        );
        assert_eq!(panels[0].series[0].points, [(200.0, 2.0)]);
        assert_eq!(panels[1].series[0].points, [(100.0, 0.5), (200.0, 0.25)]);
        assert!(panels[2].series[0].points.is_empty());
    }

    #[test]
    fn span_pads_and_handles_no_or_one_value() {
        assert_eq!(span([].into_iter()), 0.0..1.0);
        assert_eq!(span([3.0].into_iter()), 1.5..4.5);
        assert_eq!(span([0.0, 10.0].into_iter()), -0.5..10.5);
    }
}
