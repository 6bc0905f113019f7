//! `tallyho train`: a training run on the market of `--data` (or the embedded synthetic
//! default), on the CUDA trainer where a GPU is present and the CPU oracle otherwise, with a
//! progress bar and the metrics of every window in `DIR/metrics.jsonl`.
//!
//! The two backends run the same loop (tallyho_oracle::trainer::train); only the defaults
//! differ: on a GPU a real run, on the CPU a smaller network and fewer envs that finish in
//! about a minute (the run says which it is).

use crate::error::{Error, Result};
use crate::runtime::Gpu;
use crate::trainer::CudaTrainer;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tallyho_oracle::features::Market;
use tallyho_oracle::schedule::EpsilonSchedule;
use tallyho_oracle::trainer::{self, Metrics, Observer, OracleTrainer, TrainError};
use tallyho_oracle::TrainConfig;

/// Which trainer runs the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// CUDA where a GPU is present, else the CPU oracle.
    Auto,
    Cpu,
    Cuda,
}

/// What `tallyho train` was asked for; `None`: the backend's default.
#[derive(Clone, Debug)]
pub struct TrainOptions {
    pub data: Option<PathBuf>,
    pub steps: Option<u64>,
    pub envs: Option<usize>,
    pub seed: Option<u64>,
    pub out: PathBuf,
    pub backend: BackendChoice,
    pub metrics_every: Option<u32>,
}

/// The two backends' defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// A real run: 1024 envs, the full network, 30 000 steps.
    Gpu,
    /// About a minute on one core: 16 envs, a network of 64-wide layers, 10 000 steps.
    Cpu,
}

impl Preset {
    pub fn steps(self) -> u64 {
        match self {
            Preset::Gpu => 30_000,
            Preset::Cpu => 10_000,
        }
    }

    /// The run's config for `steps` steps of `envs` envs (None: the preset's), seeded by
    /// `seed` where given, resolved for `feature_dim`.
    pub fn config(
        self,
        steps: u64,
        envs: Option<usize>,
        seed: Option<u64>,
        feature_dim: usize,
    ) -> TrainConfig {
        let mut cfg = TrainConfig::default();
        match self {
            Preset::Gpu => {
                cfg.env.envs = envs.unwrap_or(1024);
                cfg.replay.capacity = 1 << 20;
                cfg.schedule.learn_start = 16_384;
            }
            Preset::Cpu => {
                cfg.env.envs = envs.unwrap_or(16);
                (
                    cfg.qnet.h1,
                    cfg.qnet.h2,
                    cfg.qnet.value_hidden,
                    cfg.qnet.adv_hidden,
                ) = (64, 64, 32, 32);
                cfg.qnet.atoms = 21;
                cfg.replay.batch = 64;
                cfg.replay.capacity = 1 << 15;
                cfg.schedule.learn_start = 1024;
                cfg.schedule.target_period = 250;
            }
        }
        // Keep the replay at least 4 inserts deep for a larger --envs.
        cfg.replay.capacity = cfg
            .replay
            .capacity
            .max((4 * cfg.env.envs).next_power_of_two());
        cfg.schedule.learn_start = cfg
            .schedule
            .learn_start
            .max(cfg.replay.batch)
            .min(cfg.replay.capacity);
        let anneal = (steps / 2).clamp(1, u64::from(u32::MAX)) as u32;
        cfg.schedule.epsilon = EpsilonSchedule {
            start: 1.0,
            end: 0.05,
            steps: anneal,
        };
        cfg.replay.beta_steps = (steps.max(1)).min(u64::from(u32::MAX)) as u32;
        if let Some(s) = seed {
            (cfg.env.seed, cfg.qnet.seed, cfg.replay.seed) = (s, s ^ 0x9e37_79b9, s ^ 0x7f4a_7c15);
        }
        cfg.resolve(feature_dim)
    }
}

/// One line of `metrics.jsonl`: a window's metrics, with the wall clock.
#[derive(Serialize)]
struct Line<'a> {
    #[serde(flatten)]
    m: &'a Metrics,
    wall_s: f64,
    transitions_per_s: f64,
}

/// The progress bar and the metrics file.
struct Report {
    bar: ProgressBar,
    file: BufWriter<File>,
    start: Instant,
    last: Option<(f64, u64)>,
}

impl Observer for Report {
    fn on_step(&mut self, step: u64) {
        self.bar.set_position(step);
    }

    fn on_metrics(&mut self, m: &Metrics) -> std::io::Result<()> {
        let wall = self.start.elapsed().as_secs_f64();
        let (t0, n0) = self.last.unwrap_or((0.0, 0));
        let rate = (m.transitions - n0) as f64 / (wall - t0).max(1e-9);
        self.last = Some((wall, m.transitions));
        serde_json::to_writer(
            &mut self.file,
            &Line {
                m,
                wall_s: wall,
                transitions_per_s: rate,
            },
        )?;
        self.file.write_all(b"\n")?;
        self.file.flush()?;
        let loss = m.loss.map_or("-".to_string(), |l| format!("{l:.4}"));
        self.bar.set_message(format!(
            "{:.0} transitions/s  loss {loss}  eps {:.3}",
            rate, m.epsilon
        ));
        Ok(())
    }
}

/// What a run ends with.
pub struct TrainSummary {
    pub backend: &'static str,
    pub steps: u64,
    pub transitions: u64,
    pub seconds: f64,
    pub last: Option<Metrics>,
    pub metrics_path: PathBuf,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    move |err| Error::Io {
        what: what.into(),
        err,
    }
}

/// Create the run folder, refusing one that already holds a run (nothing written is lost).
fn prepare_out(out: &Path) -> Result<PathBuf> {
    let metrics = out.join("metrics.jsonl");
    if metrics.exists() {
        return Err(Error::Io {
            what: format!("{} already holds a run", out.display()),
            err: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "choose another --out, or move that run away first",
            ),
        });
    }
    std::fs::create_dir_all(out)
        .map_err(io(format!("creating the run folder {}", out.display())))?;
    Ok(metrics)
}

/// Run `tallyho train`; `note` receives the one-line messages (backend, preset).
pub fn run(
    opts: &TrainOptions,
    market: &Market,
    mut note: impl FnMut(&str),
) -> Result<TrainSummary> {
    let gpu = match opts.backend {
        BackendChoice::Cpu => None,
        BackendChoice::Cuda => Some(Gpu::new()?),
        BackendChoice::Auto => match Gpu::new() {
            Ok(g) => Some(g),
            Err(e) => {
                let why = match e {
                    Error::NoDriver => "no CUDA driver".to_string(),
                    other => other.to_string(),
                };
                note(&format!("no GPU ({why}): training on the CPU oracle backend, the same loop, slower (--backend cuda insists on a GPU)"));
                None
            }
        },
    };
    let preset = if gpu.is_some() {
        Preset::Gpu
    } else {
        Preset::Cpu
    };
    let steps = opts.steps.unwrap_or(preset.steps());
    if steps == 0 {
        return Err(Error::Shape(
            "--steps 0 trains nothing: give at least 1".into(),
        ));
    }
    let mut cfg = preset.config(steps, opts.envs, opts.seed, market.feature_dim);
    if let Some(k) = opts.metrics_every {
        cfg.schedule.metrics_every = k;
    }
    cfg.validate(market.feature_dim)?;
    let metrics_path = prepare_out(&opts.out)?;
    let config_path = opts.out.join("config.json");
    let text = serde_json::to_string_pretty(&cfg)
        .map_err(|e| Error::Shape(format!("serialising the config: {e}")))?;
    std::fs::write(&config_path, text).map_err(io(format!("writing {}", config_path.display())))?;
    let file = BufWriter::new(
        File::create(&metrics_path).map_err(io(format!("creating {}", metrics_path.display())))?,
    );
    let bar = ProgressBar::new(steps);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps  {elapsed_precise}  {msg}")
            .map_err(|e| Error::Shape(format!("progress template: {e}")))?,
    );
    let mut report = Report {
        bar,
        file,
        start: Instant::now(),
        last: None,
    };
    let q = &cfg.qnet;
    let shape = format!(
        "{} envs, network {}-{} / {} value / {} advantage, {} atoms, batch {}, {} steps",
        cfg.env.envs, q.h1, q.h2, q.value_hidden, q.adv_hidden, q.atoms, cfg.replay.batch, steps
    );
    let (backend, last) = match &gpu {
        Some(g) => {
            note(&format!("training on {} (CUDA backend): {shape}", g.name()));
            let mut t = CudaTrainer::new(g, &cfg, market)?;
            (
                "cuda",
                trainer::train(&cfg, steps, &mut t, &mut report).map_err(flatten)?,
            )
        }
        None => {
            note(&format!(
                "training on the CPU oracle backend, a smaller default than a GPU run's: {shape}"
            ));
            let mut t =
                OracleTrainer::new(&cfg, market).map_err(|e| Error::Train(e.to_string()))?;
            (
                "cpu",
                trainer::train(&cfg, steps, &mut t, &mut report).map_err(flatten_cpu)?,
            )
        }
    };
    report.bar.finish();
    Ok(TrainSummary {
        backend,
        steps,
        transitions: steps * cfg.env.envs as u64,
        seconds: report.start.elapsed().as_secs_f64(),
        last,
        metrics_path,
    })
}

fn flatten(e: TrainError<Error>) -> Error {
    match e {
        TrainError::Backend(e) => e,
        other => Error::Train(other.to_string()),
    }
}

fn flatten_cpu(e: TrainError<trainer::OracleError>) -> Error {
    Error::Train(e.to_string())
}
