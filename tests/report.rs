//! `tallyho report`: the figures of a run folder, and the errors of one that is not.

use std::path::{Path, PathBuf};
use tallyho::report::report;

/// A fresh folder under the system's temp dir holding `metrics` as metrics.jsonl (and
/// `eval` as eval.json where given).
fn run_dir(name: &str, metrics: Option<&str>, eval: Option<&str>) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tallyho-report-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    if let Some(m) = metrics {
        std::fs::write(d.join("metrics.jsonl"), m).unwrap();
    }
    if let Some(e) = eval {
        std::fs::write(d.join("eval.json"), e).unwrap();
    }
    d
}

/// Three windows as `tallyho train` writes them; no updates (a null loss) in the first.
const METRICS: &str = r#"{"step":100,"transitions":1600,"window_steps":100,"updates":0,"loss":null,"reward":0.01,"pnl":3.0,"trades":2,"episodes":0,"epsilon":0.9,"grad_norm":null,"mean_q":0.1,"non_finite":[],"wall_s":1.0,"transitions_per_s":1600.0}
{"step":200,"transitions":3200,"window_steps":100,"updates":50,"loss":1.5,"reward":0.02,"pnl":-1.0,"trades":1,"episodes":1,"epsilon":0.8,"grad_norm":3.2,"mean_q":0.2,"non_finite":[],"wall_s":2.0,"transitions_per_s":1500.0}
{"step":300,"transitions":4800,"window_steps":100,"updates":50,"loss":1.2,"reward":0.015,"pnl":2.0,"trades":3,"episodes":0,"epsilon":0.7,"grad_norm":2.9,"mean_q":0.25,"non_finite":[],"wall_s":3.0,"transitions_per_s":1550.0}
"#;

/// An evaluation of three policies over 50 test bars.
fn eval_json() -> String {
    let equity = |slope: f64| -> Vec<f64> { (0..50).map(|i| 1e5 + slope * i as f64).collect() };
    serde_json::json!({
        "split": {"first_bar": 800, "bars": 50},
        "policies": [
            {"name": "greedy", "figures": {"return": 0.01}, "equity": equity(10.0)},
            {"name": "random", "figures": {"return": -0.02}, "equity": equity(-20.0)},
            {"name": "buy_and_hold", "figures": {"return": 0.005}, "equity": equity(5.0)},
        ]
    })
    .to_string()
}

/// The file's bytes, asserting that it is there and not empty.
#[track_caller]
fn non_empty(path: &Path) -> Vec<u8> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!bytes.is_empty(), "{} is empty", path.display());
    bytes
}

/// The texts of an SVG's `<text>` elements, trimmed.
fn svg_texts(svg: &str) -> Vec<&str> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| {
            let body = &t[t.find('>')? + 1..];
            Some(body[..body.find("</text>")?].trim())
        })
        .collect()
}

const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

#[test]
fn report_draws_the_training_and_equity_figures_of_a_run_folder() {
    let dir = run_dir("full", Some(METRICS), Some(&eval_json()));
    let files = report(&dir).unwrap();
    let out = dir.join("report");
    assert_eq!(
        files.paths(),
        [
            out.join("training.svg"),
            out.join("training.png"),
            out.join("equity.svg"),
            out.join("equity.png"),
        ]
    );
    let training = String::from_utf8(non_empty(&files.training.svg)).unwrap();
    let texts = svg_texts(&training);
    for title in [
        "loss",
        "reward",
        "epsilon",
        "transitions/s",
        "grad norm",
        "mean Q",
    ] {
        assert!(
            texts.contains(&title),
            "no panel {title:?} in training.svg: {texts:?}"
        );
    }
    let equity = files.equity.as_ref().unwrap();
    let svg = String::from_utf8(non_empty(&equity.svg)).unwrap();
    let texts = svg_texts(&svg);
    for name in ["greedy", "random", "buy_and_hold"] {
        assert!(
            texts.contains(&name),
            "no legend {name:?} in equity.svg: {texts:?}"
        );
    }
    for png in [&files.training.png, &equity.png] {
        assert!(
            non_empty(png).starts_with(PNG_SIGNATURE),
            "{} is not a PNG",
            png.display()
        );
    }
}

#[test]
fn report_without_eval_json_draws_the_training_figure_only() {
    let dir = run_dir("training-only", Some(METRICS), None);
    let files = report(&dir).unwrap();
    assert!(files.equity.is_none());
    assert_eq!(files.paths().len(), 2);
    assert!(non_empty(&files.training.png).starts_with(PNG_SIGNATURE));
    assert!(!dir.join("report/equity.svg").exists());
}

#[test]
fn report_of_a_folder_without_metrics_names_the_path_and_the_fix() {
    let dir = run_dir("no-metrics", None, None);
    let msg = report(&dir).unwrap_err().to_string();
    assert!(
        msg.contains(&dir.join("metrics.jsonl").display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("a run folder of `tallyho train`"), "{msg}");
}

#[test]
fn report_of_a_malformed_line_names_the_file_the_line_and_the_parse_error() {
    let bad = format!("{}{{\"step\": \"three\"}}\n", METRICS);
    let dir = run_dir("malformed", Some(&bad), None);
    let msg = report(&dir).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("{} line 4", dir.join("metrics.jsonl").display())),
        "{msg}"
    );
    assert!(msg.contains("invalid type"), "{msg}");
}

#[test]
fn report_of_an_empty_metrics_file_says_it_is_empty() {
    let dir = run_dir("empty", Some("\n"), None);
    let msg = report(&dir).unwrap_err().to_string();
    assert!(msg.contains("metrics.jsonl is empty"), "{msg}");
}

#[test]
fn report_of_an_eval_json_without_policies_names_the_file() {
    let dir = run_dir("bad-eval", Some(METRICS), Some(r#"{"split": {}}"#));
    let msg = report(&dir).unwrap_err().to_string();
    assert!(msg.contains("eval.json: has no `policies` list"), "{msg}");
}
