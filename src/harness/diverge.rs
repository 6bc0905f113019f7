//! `tallyho diverge`: two paths of the training step run side by side, step by step, and
//! the first step, stage (kernel), buffer and element where they part beyond the bound,
//! with both values and the bound.
//!
//! A side is the CUDA trainer on chosen paths (graph or eager, fused or unfused reward and
//! experience step, the update overlapped or not), the CPU trainer, or a run recorded by
//! `--record` (another build's, say). After each step both sides give the step's trace
//! ([`tallyho_oracle::trainer::trace`]): every buffer the step wrote, tagged with the stage
//! that wrote it, compared in stage order, bitwise (paths of one build must agree bit for
//! bit). The CUDA trainer against the CPU trainer is another comparison: the CPU trainer is
//! taught the GPU's state before each step and compared with each stage's tolerance
//! ([`crate::harness::parity::trainer`]), and its first failing row is the divergence.
//!
//! A planted fault ([`Fault`]: a test-only switch that moves one element of a stage's
//! output from step k on) checks the finder: it must be found at step k, in that stage.

use crate::error::{Error, Result};
use crate::experience::ExperiencePath;
use crate::harness::parity::trainer::{trainer_vs_oracle_with, TrainerStep};
use crate::reward::RewardPath;
use crate::tensor_file::{read, tensor, write_atomic, Tensor};
use crate::trainer::CudaTrainer;
use crate::Gpu;
use safetensors::tensor::SafeTensors;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tallyho_oracle::features::Market;
use tallyho_oracle::trainer::trace::{
    first_divergence, step_trace, Buffer, Divergence, Fault, Trace, Values, STAGES,
};
use tallyho_oracle::trainer::{OracleError, OracleTrainer};
use tallyho_oracle::{Comparison, TrainConfig};

/// The CUDA trainer's paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaPaths {
    pub graphs: bool,
    pub reward: RewardPath,
    pub experience: ExperiencePath,
    pub overlap: bool,
}

impl CudaPaths {
    /// The fast paths: graph-replayed, fused reward, one-launch experience where it fits.
    pub const FAST: CudaPaths = CudaPaths {
        graphs: true,
        reward: RewardPath::Fused,
        experience: ExperiencePath::Fused,
        overlap: false,
    };
    /// The slow paths: eager launches, the unfused reward chain and experience step.
    pub const SLOW: CudaPaths = CudaPaths {
        graphs: false,
        reward: RewardPath::Unfused,
        experience: ExperiencePath::Unfused,
        overlap: false,
    };
}

/// One side of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub enum Side {
    Cuda(CudaPaths),
    Cpu,
    /// The traces `--record` wrote to this file.
    Recorded(PathBuf),
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Side::Cuda(p) => write!(
                f,
                "cuda ({}, {} reward, {} experience{})",
                if p.graphs { "graph" } else { "eager" },
                match p.reward {
                    RewardPath::Fused => "fused",
                    RewardPath::Unfused => "unfused",
                },
                match p.experience {
                    ExperiencePath::Fused => "fused",
                    ExperiencePath::Unfused => "unfused",
                },
                if p.overlap { ", overlapped" } else { "" }
            ),
            Side::Cpu => write!(f, "cpu"),
            Side::Recorded(p) => write!(f, "recorded {}", p.display()),
        }
    }
}

/// What a comparison found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub a: String,
    pub b: String,
    /// Steps run and compared (up to and including the divergent one).
    pub steps: u64,
    pub divergence: Option<Divergence>,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.divergence {
            Some(d) => write!(f, "{} and {} part at {d}", self.a, self.b),
            None => write!(
                f,
                "{} and {} agree for all {} steps",
                self.a, self.b, self.steps
            ),
        }
    }
}

fn oracle_err(e: OracleError) -> Error {
    Error::Train(format!("the CPU trainer: {e}"))
}

/// A side that steps and gives each step's trace.
enum Runner {
    Cuda {
        trainer: Box<CudaTrainer>,
        view: Box<OracleTrainer>,
    },
    Cpu(Box<OracleTrainer>),
    Recorded(Recording),
}

impl Runner {
    fn new(
        side: &Side,
        gpu: Option<&Gpu>,
        cfg: &TrainConfig,
        market: &Market,
        fault: Option<Fault>,
    ) -> Result<Runner> {
        Ok(match side {
            Side::Cuda(p) => {
                let gpu = gpu.ok_or_else(|| {
                    Error::Train(
                        "a cuda side needs a GPU: compare cpu with a recorded run instead".into(),
                    )
                })?;
                let mut t = CudaTrainer::with_overlap(gpu, cfg, market, p.overlap)?;
                t.set_graphs(p.graphs);
                t.set_reward_path(p.reward);
                t.set_experience_path(p.experience);
                t.plant_fault(fault)?;
                Runner::Cuda {
                    trainer: Box::new(t),
                    view: Box::new(OracleTrainer::new(cfg, market).map_err(oracle_err)?),
                }
            }
            Side::Cpu => {
                let mut o = OracleTrainer::new(cfg, market).map_err(oracle_err)?;
                o.fault = fault;
                Runner::Cpu(Box::new(o))
            }
            Side::Recorded(path) => {
                if fault.is_some() {
                    return Err(Error::Train(
                        "a fault cannot be planted in a recorded run: plant it in the side that runs".into(),
                    ));
                }
                Runner::Recorded(Recording::open(path)?)
            }
        })
    }

    /// Step `t` of kind `kind`, and its trace.
    fn step(&mut self, t: u64, cfg: &TrainConfig) -> Result<Trace> {
        let kind = cfg
            .schedule
            .kind(t, cfg.env.envs, cfg.qnet.n_step, cfg.replay.capacity);
        match self {
            Runner::Cuda { trainer, view, .. } => {
                trainer.step_kind(kind)?;
                trainer.trace(kind, view)
            }
            Runner::Cpu(o) => {
                o.step_with(kind, None).map_err(oracle_err)?;
                step_trace(o).ok_or_else(|| Error::Train("the CPU trainer made no step".into()))
            }
            Runner::Recorded(r) => r.trace(t),
        }
    }
}

/// Run `a` and `b` on `cfg` and `market` for up to `steps` steps (each with its fault) and
/// find where they first part. The CUDA trainer against the CPU trainer goes through the
/// taught comparison (module doc); every other pair through the traces, bitwise.
pub fn diverge(
    gpu: Option<&Gpu>,
    cfg: &TrainConfig,
    market: &Market,
    sides: [&Side; 2],
    faults: [Option<Fault>; 2],
    steps: u64,
    record: Option<&Path>,
) -> Result<Outcome> {
    let names = sides.map(|s| s.to_string());
    if let Some(path) = record {
        // Refused before any step runs, not after them all.
        let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
        if folder.is_some_and(|f| !f.is_dir()) {
            return Err(Error::Train(format!(
                "--record {}: the folder does not exist: create it or give another path",
                path.display()
            )));
        }
    }
    if let [Side::Cuda(p), Side::Cpu] | [Side::Cpu, Side::Cuda(p)] = sides {
        let gpu = gpu.ok_or_else(|| Error::Train("the cuda side needs a GPU".into()))?;
        if record.is_some() {
            return Err(Error::Train(
                "--record writes one side's traces: compare that side with itself or another path, not with cpu".into(),
            ));
        }
        let fault = faults.iter().flatten().next().cloned();
        let cuda_first = matches!(sides[0], Side::Cuda(_));
        if fault.is_some() && (faults[0].is_some() != cuda_first) {
            return Err(Error::Train(
                "against the CPU trainer a fault is planted in the cuda side only (the CPU side is taught the GPU's state each step)".into(),
            ));
        }
        return taught(gpu, cfg, market, *p, fault, steps, names);
    }
    let mut runners = [
        Runner::new(sides[0], gpu, cfg, market, faults[0].clone())?,
        Runner::new(sides[1], gpu, cfg, market, faults[1].clone())?,
    ];
    let mut recorder = record.map(|_| Recorder::new(cfg, &names[0], steps));
    for t in 0..steps {
        let ta = runners[0].step(t, cfg)?;
        let tb = runners[1].step(t, cfg)?;
        if let Some(r) = recorder.as_mut() {
            r.push(t, &ta);
        }
        if let Some(d) = first_divergence(t, &ta, &tb, |_| None) {
            if let (Some(r), Some(path)) = (recorder, record) {
                r.write(path)?;
            }
            return Ok(Outcome {
                a: names[0].clone(),
                b: names[1].clone(),
                steps: t + 1,
                divergence: Some(d),
            });
        }
    }
    if let (Some(r), Some(path)) = (recorder, record) {
        r.write(path)?;
    }
    let [a, b] = names;
    Ok(Outcome {
        a,
        b,
        steps,
        divergence: None,
    })
}

/// The CUDA trainer against the CPU trainer taught its state each step, each row under its
/// stage's tolerance: the first failing row of the first step with one, in stage order.
fn taught(
    gpu: &Gpu,
    cfg: &TrainConfig,
    market: &Market,
    paths: CudaPaths,
    fault: Option<Fault>,
    steps: u64,
    names: [String; 2],
) -> Result<Outcome> {
    let mut found: Option<Divergence> = None;
    let mut ran = 0u64;
    trainer_vs_oracle_with(
        gpu,
        cfg,
        market,
        steps as usize,
        paths.overlap,
        |t| {
            t.set_graphs(paths.graphs);
            t.set_reward_path(paths.reward);
            t.set_experience_path(paths.experience);
            t.plant_fault(fault.clone())
        },
        |step: TrainerStep| {
            ran = step.t as u64 + 1;
            found = first_failing_row(step.t as u64, step.comparisons);
            found.is_none()
        },
    )?;
    let [a, b] = names;
    Ok(Outcome {
        a,
        b,
        steps: ran,
        divergence: found,
    })
}

/// The stage of a row of the taught comparison, by its output's name.
pub fn stage_of_row(output: &str) -> &'static str {
    const ROWS: [(&str, &str); 17] = [
        ("epsilon", "schedule"),
        ("acting q", "acting"),
        ("states", "state_gather"),
        ("sampled indices", "replay_sample"),
        ("importance weights", "replay_sample"),
        ("replay priorities", "replay_update_priorities"),
        ("replay max priority", "replay_update_priorities"),
        ("replay", "replay_insert"),
        ("transition", "transition_assemble"),
        ("reward", "reward"),
        ("trade closed", "reward"),
        ("global", "reward"),
        ("loss", "qnet_loss"),
        ("priorities", "qnet_loss"),
        ("parameter displacement", "optimizer"),
        ("adam step", "optimizer"),
        ("target displacement", "target_sync"),
    ];
    if output.starts_with("metric") {
        return "trainer_metrics";
    }
    ROWS.iter()
        .find(|(prefix, _)| output.starts_with(prefix))
        .map_or("env_step", |(_, stage)| stage)
}

/// The first failing row of one step in stage order, as a divergence.
fn first_failing_row(step: u64, rows: &[Comparison]) -> Option<Divergence> {
    let rank = |stage: &str| {
        STAGES
            .iter()
            .position(|s| *s == stage)
            .unwrap_or(STAGES.len())
    };
    rows.iter()
        .filter_map(|c| c.first_failure.map(|f| (stage_of_row(&c.output), c, f)))
        .min_by_key(|(stage, ..)| rank(stage))
        .map(|(stage, c, (element, a, b, error, bound))| Divergence {
            step,
            stage,
            buffer: c.output.clone(),
            element,
            a,
            b,
            error,
            bound,
            tolerance: c.tolerance.describe(),
        })
}

/// Traces of a run, step by step, written as one safetensors file: tensor
/// `<step>/<k>/<stage>/<buffer>` for the k-th buffer of a step's trace, and the run (config,
/// side, steps) in the metadata.
struct Recorder {
    tensors: Vec<(String, Tensor)>,
    meta: BTreeMap<String, String>,
}

const TRACE_FORMAT: &str = "tallyho-trace-1";

impl Recorder {
    fn new(cfg: &TrainConfig, side: &str, steps: u64) -> Recorder {
        let mut meta = BTreeMap::new();
        meta.insert("format".into(), TRACE_FORMAT.into());
        meta.insert("side".into(), side.to_string());
        meta.insert("steps".into(), steps.to_string());
        meta.insert("config".into(), format!("{cfg:?}"));
        Recorder {
            tensors: Vec::new(),
            meta,
        }
    }

    fn push(&mut self, t: u64, trace: &Trace) {
        for (k, b) in trace.iter().enumerate() {
            let t_ = match &b.values {
                Values::F32(v) => tensor(v),
                Values::F64(v) => tensor(v),
                Values::I32(v) => tensor(v),
                Values::U32(v) => tensor(v),
            };
            self.tensors
                .push((format!("{t}/{k:04}/{}/{}", b.stage, b.name), t_));
        }
        self.meta
            .insert("recorded steps".into(), (t + 1).to_string());
    }

    fn write(self, path: &Path) -> Result<()> {
        let bytes = safetensors::serialize(
            self.tensors.iter().map(|(n, t)| (n.as_str(), t)),
            &Some(self.meta.into_iter().collect()),
        )
        .map_err(|e| Error::Train(format!("serializing the traces: {e}")))?;
        write_atomic(path, &bytes)
    }
}

/// A recorded run, read back a step at a time.
struct Recording {
    path: PathBuf,
    bytes: Vec<u8>,
    /// Per step, its tensors' names.
    steps: BTreeMap<u64, Vec<String>>,
}

impl Recording {
    fn open(path: &Path) -> Result<Recording> {
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            what: format!("reading the recorded run {}", path.display()),
            err: e,
        })?;
        let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| {
            Error::Train(format!(
                "{} is not a recorded run ({e}): record one with `tallyho diverge --record FILE`",
                path.display()
            ))
        })?;
        let format = header
            .metadata()
            .as_ref()
            .and_then(|m| m.get("format").cloned());
        if format.as_deref() != Some(TRACE_FORMAT) {
            return Err(Error::Train(format!(
                "{} holds format {format:?}, not {TRACE_FORMAT}: record it again with this version's `tallyho diverge --record`",
                path.display()
            )));
        }
        let mut steps: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for name in header.tensors().keys() {
            if let Some(t) = name.split('/').next().and_then(|s| s.parse().ok()) {
                steps.entry(t).or_default().push(name.clone());
            }
        }
        // Within a step, the names sort by their position in the trace.
        for names in steps.values_mut() {
            names.sort();
        }
        Ok(Recording {
            path: path.to_path_buf(),
            bytes,
            steps,
        })
    }

    fn trace(&self, t: u64) -> Result<Trace> {
        let names = self.steps.get(&t).ok_or_else(|| {
            Error::Train(format!(
                "{} holds {} steps, not step {t}: give --steps {} at most, or record more",
                self.path.display(),
                self.steps.len(),
                self.steps.len()
            ))
        })?;
        let st = SafeTensors::deserialize(&self.bytes)
            .map_err(|e| Error::Train(format!("{}: {e}", self.path.display())))?;
        let origin = self.path.display().to_string();
        let mut trace = Trace::new();
        for name in names {
            let mut parts = name.splitn(4, '/');
            let (_, _, stage, buffer) = (parts.next(), parts.next(), parts.next(), parts.next());
            let (Some(stage), Some(buffer)) = (stage, buffer) else {
                continue;
            };
            let Some(stage) = STAGES.iter().copied().find(|s| *s == stage) else {
                return Err(Error::Train(format!(
                    "{origin}: tensor {name} names no stage of this version ({}): record it again",
                    STAGES.join(", ")
                )));
            };
            let view = st
                .tensor(name)
                .map_err(|e| Error::Train(format!("{origin}: {name}: {e}")))?;
            let values = match view.dtype() {
                safetensors::Dtype::F32 => {
                    Values::F32(read(&st, name, &origin).map_err(Error::Train)?)
                }
                safetensors::Dtype::F64 => {
                    Values::F64(read(&st, name, &origin).map_err(Error::Train)?)
                }
                safetensors::Dtype::I32 => {
                    Values::I32(read(&st, name, &origin).map_err(Error::Train)?)
                }
                safetensors::Dtype::U32 => {
                    Values::U32(read(&st, name, &origin).map_err(Error::Train)?)
                }
                other => {
                    return Err(Error::Train(format!(
                        "{origin}: {name} is {other:?}, which no trace holds: record it again"
                    )))
                }
            };
            trace.push(Buffer {
                stage,
                name: buffer.to_string(),
                values,
            });
        }
        Ok(trace)
    }
}
