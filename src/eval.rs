//! Evaluation of a trained network on the test split (bars it never trained on):
//! tallyho_oracle::backtest_report walks the split with the greedy policy, a random policy
//! and buy-and-hold, deterministically, and gives each one's figures and equity curve.
//! A run writes the newest evaluation to `DIR/eval.json` (the report's JSON with the step)
//! and appends each one's figures to `DIR/evals.jsonl`; `tallyho eval CHECKPOINT` evaluates
//! any checkpoint on any data with the same features.

use crate::checkpoint::Checkpoint;
use crate::env::load_market;
use crate::error::{Error, Result};
use crate::tensor_file::write_atomic;
use std::io::Write;
use std::path::{Path, PathBuf};
use tallyho_oracle::features::Market;
use tallyho_oracle::{backtest_report, EvalReport, TrainConfig};

/// The evaluation of the network `online` of `cfg` on `market`'s test split (the random
/// policy's draws and the fills keyed by `cfg.env.seed`).
pub fn evaluate(cfg: &TrainConfig, online: &[f32], market: &Market) -> Result<EvalReport> {
    backtest_report(cfg, online, market, cfg.env.seed)
        .map_err(|e| Error::Train(format!("evaluating on the test split: {e}")))
}

/// The report as JSON, with the step it evaluated.
fn with_step(report: &EvalReport, step: u64) -> Result<serde_json::Value> {
    let mut v = serde_json::to_value(report)
        .map_err(|e| Error::Train(format!("the evaluation as JSON: {e}")))?;
    v["step"] = step.into();
    Ok(v)
}

/// Write `report` of step `step` as `dir/eval.json` (atomically, replacing the last one)
/// and append its figures (no curves) to `dir/evals.jsonl`; returns eval.json's path.
pub fn write(dir: &Path, step: u64, report: &EvalReport) -> Result<PathBuf> {
    let path = dir.join("eval.json");
    let v = with_step(report, step)?;
    let text = serde_json::to_string(&v).map_err(|e| Error::Train(e.to_string()))?;
    write_atomic(&path, text.as_bytes())?;
    let figures: serde_json::Map<String, serde_json::Value> = report
        .policies
        .iter()
        .map(|p| (p.name.clone(), serde_json::json!(p.figures)))
        .collect();
    let line = serde_json::json!({"step": step, "figures": figures});
    let log = dir.join("evals.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|err| Error::Io {
            what: format!("opening {}", log.display()),
            err,
        })?;
    writeln!(f, "{line}").map_err(|err| Error::Io {
        what: format!("writing {}", log.display()),
        err,
    })?;
    Ok(path)
}

/// What `tallyho eval` was asked for.
pub struct EvalOptions {
    /// A checkpoint file or a run folder (its newest checkpoint).
    pub checkpoint: PathBuf,
    /// The data to evaluate on; None: the checkpoint's own.
    pub data: Option<PathBuf>,
    /// Write the report as JSON here.
    pub json: Option<PathBuf>,
}

/// `tallyho eval`: the checkpoint's network on the test split of `--data` (or of the data
/// it trained on).
pub fn run(opts: &EvalOptions) -> Result<(Checkpoint, EvalReport)> {
    let c = Checkpoint::read(&Checkpoint::find(&opts.checkpoint)?)?;
    let data = opts.data.clone().or_else(|| c.header.market.data());
    let market = load_market(data.as_deref())?;
    let report = evaluate(&c.header.config, &c.online()?, &market)?;
    if let Some(path) = &opts.json {
        let v = with_step(&report, c.header.step)?;
        let text = serde_json::to_string(&v).map_err(|e| Error::Train(e.to_string()))?;
        write_atomic(path, text.as_bytes())?;
    }
    Ok((c, report))
}
