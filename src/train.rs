//! `tallyho train`: a training run on the market of `--data` (or the embedded synthetic
//! default), on the CUDA trainer where a GPU is present and the CPU oracle otherwise, with a
//! progress bar and the metrics of every window in `DIR/metrics.jsonl`.
//!
//! The two backends run the same loop (tallyho_oracle::trainer::train); only the defaults
//! differ: on a GPU a real run, on the CPU a smaller network and fewer envs that finish in
//! about a minute (the run says which it is).

use crate::checkpoint::{self, Checkpoint, Header, SYNTHETIC};
use crate::config;
use crate::env::load_market;
use crate::error::{Error, Result};
use crate::eval;
use crate::report::{self, ReportFiles};
use crate::runtime::Gpu;
use crate::trainer::CudaTrainer;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tallyho_oracle::features::Market;
use tallyho_oracle::schedule::EpsilonSchedule;
use tallyho_oracle::trainer::trace::{step_trace, Buffer, Fault, Values};
use tallyho_oracle::trainer::{
    self, Metrics, ObserveError, Observer, OracleTrainer, StateSource, TrainError,
};
use tallyho_oracle::{EvalReport, TrainConfig};

/// Which trainer runs the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum BackendChoice {
    /// CUDA where a GPU is present, else the CPU oracle.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

/// How the run reports as it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Output {
    /// A progress bar (steps, ETA, transitions/s and the latest metrics) on stderr.
    #[default]
    Bar,
    /// Nothing until the final line.
    Quiet,
    /// One JSON object a line on stdout per event: `metrics` (each window), `checkpoint`,
    /// `eval`; the caller prints the final `done`.
    Json,
}

/// What `tallyho train` was asked for; `None`: the config's (or the backend's preset's).
#[derive(Clone, Debug, Default)]
pub struct TrainOptions {
    pub data: Option<PathBuf>,
    pub steps: Option<u64>,
    pub envs: Option<usize>,
    pub seed: Option<u64>,
    /// The run folder; None: `runs/train-<unix seconds>`, or the resumed run's.
    pub out: Option<PathBuf>,
    pub backend: BackendChoice,
    pub metrics_every: Option<u32>,
    /// A TOML file of config keys, laid over the backend's preset.
    pub config: Option<PathBuf>,
    /// `key=value` overrides, after the file.
    pub sets: Vec<String>,
    /// A run folder or a checkpoint file to continue from.
    pub resume: Option<PathBuf>,
    pub output: Output,
    /// Set (by Ctrl-C) to stop after the current step with a final checkpoint.
    pub stop: Option<Arc<AtomicBool>>,
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
    /// `seed` where given, resolved for `feature_dim`: epsilon anneals over the first half
    /// of the steps and beta over all of them; a checkpoint every 5000 steps (GPU) or 2500
    /// (CPU) and at the end.
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
        cfg.run.steps = steps;
        cfg.run.checkpoint_every = match self {
            Preset::Gpu => 5_000,
            Preset::Cpu => 2_500,
        };
        if let Some(s) = seed {
            [cfg.env.seed, cfg.qnet.seed, cfg.replay.seed] = seeds(s);
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

/// The run's observer: the progress bar or JSON events, the metrics file, the checkpoints,
/// the evaluations.
struct Recorder<'a> {
    market: &'a Market,
    out: PathBuf,
    /// The newest evaluation and its step.
    eval: Option<(u64, EvalReport)>,
    output: Output,
    bar: ProgressBar,
    file: BufWriter<File>,
    start: Instant,
    /// The wall clock and transitions count at the last window.
    last: (f64, u64),
    checkpoints: PathBuf,
    header: Header,
    keep: usize,
    stop: Option<Arc<AtomicBool>>,
    written: Vec<PathBuf>,
}

impl Recorder<'_> {
    fn event(&self, value: serde_json::Value) {
        if self.output == Output::Json {
            println!("{value}");
        }
    }
}

impl Observer for Recorder<'_> {
    fn on_step(&mut self, step: u64) {
        self.bar.set_position(step);
    }

    fn on_metrics(&mut self, m: &Metrics) -> std::result::Result<(), ObserveError> {
        let wall = self.start.elapsed().as_secs_f64();
        let (t0, n0) = self.last;
        let done = m.transitions.saturating_sub(n0);
        let rate = done as f64 / (wall - t0).max(1e-9);
        self.last = (wall, m.transitions);
        let line = Line {
            m,
            wall_s: wall,
            transitions_per_s: rate,
        };
        serde_json::to_writer(&mut self.file, &line)?;
        self.file.write_all(b"\n")?;
        self.file.flush()?;
        if self.output == Output::Json {
            let mut v = serde_json::to_value(&line)?;
            v["event"] = "metrics".into();
            println!("{v}");
        }
        let loss = m.loss.map_or("-".to_string(), |l| format!("{l:.4}"));
        self.bar.set_message(format!(
            "{rate:.0} transitions/s  loss {loss}  reward {:.4}  pnl {:.0}  eps {:.3}",
            m.reward, m.pnl, m.epsilon
        ));
        Ok(())
    }

    fn on_checkpoint(
        &mut self,
        step: u64,
        state: &mut dyn StateSource,
    ) -> std::result::Result<(), ObserveError> {
        let header = Header {
            step,
            ..self.header.clone()
        };
        let state = state.get()?;
        // A checkpoint is the state a run resumes from: never one that has diverged.
        if let Some(what) = non_finite_state(state) {
            return Err(Box::new(NonFiniteState { step, what }));
        }
        let path = checkpoint::write(&self.checkpoints, &header, state, self.keep)?;
        self.event(serde_json::json!({"event": "checkpoint", "step": step, "path": path}));
        self.written.push(path);
        Ok(())
    }

    fn on_eval(
        &mut self,
        step: u64,
        state: &mut dyn StateSource,
    ) -> std::result::Result<(), ObserveError> {
        let state = state.get()?;
        let report = eval::evaluate(&state.cfg, &state.online, self.market)?;
        let path = eval::write(&self.out, step, &report)?;
        if let Some(greedy) = report.policies.first() {
            let f = &greedy.figures;
            self.bar.println(format!(
                "step {step}: greedy on the test split: PnL {:.0}, Sharpe {:.2}, {} trades ({})",
                f.total_pnl,
                f.sharpe,
                f.trades,
                path.display()
            ));
        }
        self.event(serde_json::json!({"event": "eval", "step": step, "path": path,
            "figures": report.policies.iter().map(|p| (p.name.clone(), serde_json::json!(p.figures))).collect::<serde_json::Map<_, _>>()}));
        self.eval = Some((step, report));
        Ok(())
    }

    fn stop_requested(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }
}

/// What a run ends with.
pub struct TrainSummary {
    pub backend: &'static str,
    /// Steps run in all (a resumed run's earlier steps included), and of them this call's.
    pub steps: u64,
    pub steps_run: u64,
    pub transitions: u64,
    pub seconds: f64,
    /// Whether Ctrl-C stopped it (after a final checkpoint).
    pub stopped: bool,
    pub last: Option<Metrics>,
    pub out: PathBuf,
    pub metrics_path: PathBuf,
    /// The newest checkpoint written.
    pub checkpoint: Option<PathBuf>,
    /// The newest evaluation on the test split and its step (the run's end unless stopped).
    pub eval: Option<(u64, EvalReport)>,
    /// The figures drawn at the end (none when stopped).
    pub report: Option<ReportFiles>,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    move |err| Error::Io {
        what: what.into(),
        err,
    }
}

/// `runs/train-<unix seconds>`: a fresh folder per run.
pub fn default_run_dir() -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    PathBuf::from("runs").join(format!("train-{secs}"))
}

/// The GPU to train on, or None for the CPU oracle (`note` says why where it falls back).
fn choose_backend(choice: BackendChoice, note: &mut impl FnMut(&str)) -> Result<Option<Gpu>> {
    Ok(match choice {
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
    })
}

/// The command line's flags as config keys (they win over the file and `--set`).
fn flag_sets(opts: &TrainOptions) -> Vec<String> {
    let mut sets = opts.sets.clone();
    if let Some(n) = opts.steps {
        sets.push(format!("run.steps={n}"));
    }
    if let Some(n) = opts.envs {
        sets.push(format!("env.envs={n}"));
    }
    if let Some(k) = opts.metrics_every {
        sets.push(format!("schedule.metrics_every={k}"));
    }
    if let Some(s) = opts.seed {
        let [e, q, r] = seeds(s);
        sets.extend([
            format!("env.seed={e}"),
            format!("qnet.seed={q}"),
            format!("replay.seed={r}"),
        ]);
    }
    sets
}

/// The env, network and replay seeds of run seed `s`.
fn seeds(s: u64) -> [u64; 3] {
    [s, s ^ 0x9e37_79b9, s ^ 0x7f4a_7c15]
}

fn integer_at(t: &toml::Table, section: &str, key: &str) -> Option<u64> {
    t.get(section)?
        .get(key)?
        .as_integer()
        .map(|v| v.max(0) as u64)
}

/// The config of a new run: the preset of the backend for the run's steps and envs (from
/// the flags, the overrides or the preset), with the file's keys, the `--set` overrides and
/// the flags laid over it, validated.
pub fn resolve_config(
    opts: &TrainOptions,
    preset: Preset,
    feature_dim: usize,
) -> Result<TrainConfig> {
    let over = config::overrides(opts.config.as_deref(), &flag_sets(opts), &config::shape()?)?;
    let steps = integer_at(&over, "run", "steps").unwrap_or(preset.steps());
    let envs = integer_at(&over, "env", "envs").map(|n| n as usize);
    let base = preset.config(steps, envs, None, feature_dim);
    let cfg = config::apply(&base, &over)?.resolve(feature_dim);
    cfg.validate(feature_dim)?;
    Ok(cfg)
}

/// The resolved config `tallyho train --print-config` prints (TOML, a valid `--config`).
pub fn print_config(opts: &TrainOptions, mut note: impl FnMut(&str)) -> Result<String> {
    if let Some(from) = &opts.resume {
        let c = Checkpoint::read(&Checkpoint::find(from)?)?;
        let cfg = resumed_config(opts, &c)?;
        return config::to_toml(&cfg);
    }
    let gpu = choose_backend(opts.backend, &mut note)?;
    let market = load_market(opts.data.as_deref())?;
    let preset = if gpu.is_some() {
        Preset::Gpu
    } else {
        Preset::Cpu
    };
    config::to_toml(&resolve_config(opts, preset, market.feature_dim)?)
}

/// The checkpoint's config with the run's overrides; only `run` keys may change.
fn resumed_config(opts: &TrainOptions, c: &Checkpoint) -> Result<TrainConfig> {
    let saved = &c.header.config;
    let over = config::overrides(opts.config.as_deref(), &flag_sets(opts), &config::shape()?)?;
    let cfg = config::apply(saved, &over)?;
    let changed = config::differences(saved, &cfg, &["run"])?;
    if !changed.is_empty() {
        return Err(Error::Settings(format!(
            "--resume continues the run of {} with its config; these keys would change it (checkpoint vs now): {}: resume without them, or start a new run",
            c.path.display(),
            changed.join("; ")
        )));
    }
    if cfg.run.steps <= c.header.step {
        return Err(Error::Settings(format!(
            "{} is at step {}, and run.steps is {}: give --steps above {} to train on",
            c.path.display(),
            c.header.step,
            cfg.run.steps,
            c.header.step
        )));
    }
    Ok(cfg)
}

/// The run folder of a checkpoint file (`DIR/checkpoints/step-k.safetensors` -> DIR).
fn run_dir_of(checkpoint: &Path) -> Option<PathBuf> {
    let dir = checkpoint.parent()?;
    (dir.file_name()? == "checkpoints").then(|| dir.parent().map(Path::to_path_buf))?
}

/// Keep the lines of `path` (metrics.jsonl) of steps up to `step`: the later ones are of
/// steps the resumed run runs again, bit for bit, and writes again.
fn cut_metrics(path: &Path, step: u64) -> Result<()> {
    let text = std::fs::read_to_string(path).map_err(io(format!("reading {}", path.display())))?;
    let mut kept = String::new();
    for line in text.lines() {
        let at = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|v| v.get("step").and_then(|s| s.as_u64()));
        if at.is_some_and(|k| k <= step) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    crate::tensor_file::write_atomic(path, kept.as_bytes())
}

/// Where a run starts: a new one (step 0) or a checkpoint's state.
enum Start {
    New,
    Resume {
        step: u64,
        state: Box<OracleTrainer>,
    },
}

/// Run `tallyho train`; `note` receives the one-line messages (backend, preset, resume).
pub fn run(opts: &TrainOptions, mut note: impl FnMut(&str)) -> Result<TrainSummary> {
    let gpu = choose_backend(opts.backend, &mut note)?;
    let preset = if gpu.is_some() {
        Preset::Gpu
    } else {
        Preset::Cpu
    };
    let (cfg, market, source, out, start) = match &opts.resume {
        None => {
            let market = load_market(opts.data.as_deref())?;
            let cfg = resolve_config(opts, preset, market.feature_dim)?;
            let out = opts.out.clone().unwrap_or_else(default_run_dir);
            (
                cfg,
                market,
                source_of(opts.data.as_deref()),
                out,
                Start::New,
            )
        }
        Some(from) => {
            let c = Checkpoint::read(&Checkpoint::find(from)?)?;
            let cfg = resumed_config(opts, &c)?;
            let data = opts.data.clone().or_else(|| c.header.market.data());
            let market = load_market(data.as_deref())?;
            let source = source_of(data.as_deref());
            let state = Box::new(c.trainer(&market, &source)?);
            let out = match &opts.out {
                Some(o) => o.clone(),
                None if from.is_dir() => from.clone(),
                None => run_dir_of(&c.path).ok_or_else(|| {
                    Error::Settings(format!(
                        "{} is not inside a run folder's checkpoints/: give --out for the resumed run",
                        c.path.display()
                    ))
                })?,
            };
            note(&format!(
                "resuming {} at step {} of {} (written by the {} backend)",
                c.path.display(),
                c.header.step,
                cfg.run.steps,
                c.header.backend
            ));
            let step = c.header.step;
            (cfg, market, source, out, Start::Resume { step, state })
        }
    };
    let metrics_path = out.join("metrics.jsonl");
    let from = match &start {
        Start::New => {
            prepare_new(&out, &metrics_path)?;
            0
        }
        Start::Resume { step, .. } => {
            if metrics_path.exists() {
                cut_metrics(&metrics_path, *step)?;
            }
            *step
        }
    };
    std::fs::create_dir_all(&out).map_err(io(format!(
        "creating the run folder {} (give --out a folder that can be created and written)",
        out.display()
    )))?;
    let config_path = out.join("config.toml");
    crate::tensor_file::write_atomic(&config_path, config::to_toml(&cfg)?.as_bytes())?;
    let file = BufWriter::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&metrics_path)
            .map_err(io(format!("opening {}", metrics_path.display())))?,
    );
    let steps = cfg.run.steps;
    let bar = match opts.output {
        Output::Bar => ProgressBar::new(steps),
        Output::Quiet | Output::Json => ProgressBar::hidden(),
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} steps  {elapsed_precise} (eta {eta})  {msg}",
        )
        .map_err(|e| Error::Shape(format!("progress template: {e}")))?,
    );
    bar.set_position(from);
    bar.reset_eta();
    let backend_name = if gpu.is_some() { "cuda" } else { "cpu" };
    let mut rec = Recorder {
        market: &market,
        out: out.clone(),
        eval: None,
        output: opts.output,
        bar,
        file,
        start: Instant::now(),
        // A resumed run's rate counts its own transitions only.
        last: (0.0, from * cfg.env.envs as u64),
        checkpoints: out.join("checkpoints"),
        header: Header::new(0, backend_name, &market, &source, &cfg),
        keep: cfg.run.keep_checkpoints as usize,
        stop: opts.stop.clone(),
        written: Vec::new(),
    };
    let q = &cfg.qnet;
    let shape = format!(
        "{} envs, network {}-{} / {} value / {} advantage, {} atoms, batch {}, {} steps",
        cfg.env.envs, q.h1, q.h2, q.value_hidden, q.adv_hidden, q.atoms, cfg.replay.batch, steps
    );
    let fault = planted_fault()?;
    let place = |gpu| Run {
        cfg: &cfg,
        market: &market,
        source: &source,
        out: &out,
        gpu,
        fault: &fault,
    };
    let finish = match &gpu {
        Some(g) => {
            if from == 0 {
                note(&format!("training on {} (CUDA backend): {shape}", g.name()));
            }
            let mut t = build_cuda(g, &cfg, &market)?;
            if let Start::Resume { step, state } = &start {
                t.restore(state, *step)?;
            }
            t.plant_fault(fault.clone())?;
            let run = trainer::train(&cfg, from, &mut t, &mut rec);
            finished(run, &place(Some(g)))?
        }
        None => {
            if from == 0 {
                note(&format!(
                    "training on the CPU oracle backend, a smaller default than a GPU run's: {shape}"
                ));
            }
            let mut t = match start {
                Start::New => {
                    OracleTrainer::new(&cfg, &market).map_err(|e| Error::Train(e.to_string()))?
                }
                Start::Resume { state, .. } => {
                    let mut t = *state;
                    t.cfg = cfg.clone();
                    t
                }
            };
            t.fault = fault.clone();
            let run = trainer::train(&cfg, from, &mut t, &mut rec);
            finished(run, &place(None))?
        }
    };
    rec.bar.finish();
    let report = if finish.stopped {
        None
    } else {
        Some(report::report(&out)?)
    };
    Ok(TrainSummary {
        eval: rec.eval.take(),
        report,
        backend: backend_name,
        steps: finish.step,
        steps_run: finish.step - from,
        transitions: (finish.step - from) * cfg.env.envs as u64,
        seconds: rec.start.elapsed().as_secs_f64(),
        stopped: finish.stopped,
        last: finish.last,
        out,
        metrics_path,
        checkpoint: rec.written.last().cloned(),
    })
}

fn source_of(data: Option<&Path>) -> String {
    data.map_or(SYNTHETIC.to_string(), |p| p.display().to_string())
}

/// The CUDA trainer of `cfg`, or where the device has too little memory for it, an error
/// with the memory asked, the memory free and the largest env count that fits.
fn build_cuda(g: &Gpu, cfg: &TrainConfig, market: &Market) -> Result<CudaTrainer> {
    match CudaTrainer::new(g, cfg, market) {
        Err(Error::Driver(e)) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
            Err(out_of_memory(g, cfg, market))
        }
        other => other,
    }
}

/// Bytes of device memory free and in all.
fn device_memory(g: &Gpu) -> (usize, usize) {
    let _ = g.ctx.bind_to_thread();
    cudarc::driver::result::mem_get_info().unwrap_or((0, 0))
}

/// The out-of-memory error of `cfg`: the largest env count that fits (halved until a
/// trainer builds, then bisected), the memory a trainer takes (measured at two sizes that
/// fit, extrapolated to the one asked) and the memory free. Only on this failure path.
fn out_of_memory(g: &Gpu, cfg: &TrainConfig, market: &Market) -> Error {
    let mib = |b: f64| b / (1u64 << 20) as f64;
    let (free, total) = device_memory(g);
    let with_envs = |n: usize| {
        let mut c = cfg.clone();
        c.env.envs = n;
        c
    };
    // The memory a trainer of n envs takes, or None where it does not build.
    let taken = |n: usize| -> Option<usize> {
        let before = device_memory(g).0;
        let t = CudaTrainer::new(g, &with_envs(n), market).ok()?;
        let _ = t.synchronize();
        let after = device_memory(g).0;
        drop(t);
        Some(before.saturating_sub(after))
    };
    let asked = cfg.env.envs;
    let (mut fits, mut fails) = (asked / 2, asked);
    while fits > 0 && taken(fits).is_none() {
        fails = fits;
        fits /= 2;
    }
    if fits == 0 {
        return Error::Train(format!(
            "the device is out of memory: not even 1 env fits beside a replay of {} rows ({:.0} MiB free of {:.0} MiB): lower replay.capacity",
            cfg.replay.capacity,
            mib(free as f64),
            mib(total as f64)
        ));
    }
    while fails - fits > (fits / 64).max(1) {
        let mid = fits + (fails - fits) / 2;
        if taken(mid).is_some() {
            fits = mid;
        } else {
            fails = mid;
        }
    }
    let estimate = match (taken(fits), taken((fits / 2).max(1))) {
        (Some(a), Some(b)) if fits > 1 => {
            let per_env = a.saturating_sub(b) as f64 / (fits - (fits / 2).max(1)) as f64;
            format!(
                "about {:.0} MiB ({:.0} MiB at {fits} envs, {:.3} MiB an env)",
                mib(a as f64 + per_env * (asked - fits) as f64),
                mib(a as f64),
                mib(per_env)
            )
        }
        _ => "more than is free".into(),
    };
    Error::Train(format!(
        "the device is out of memory for {asked} envs and a replay of {} rows: they take {estimate}, and {:.0} MiB of {:.0} MiB are free; the largest env count that fits is {fits}: give --envs {fits} or fewer (or lower replay.capacity)",
        cfg.replay.capacity,
        mib(free as f64),
        mib(total as f64)
    ))
}

/// A fault planted by the tests of a diverging run (never set in a run):
/// `TALLYHO_PLANT_FAULT=STAGE@STEP` makes the first element of STAGE's output NaN from step
/// STEP (counted from 0) on, in either backend (`trace::Fault`).
fn planted_fault() -> Result<Option<Fault>> {
    let Ok(spec) = std::env::var("TALLYHO_PLANT_FAULT") else {
        return Ok(None);
    };
    let bad = || {
        Error::Settings(format!(
            "TALLYHO_PLANT_FAULT={spec:?} is not STAGE@STEP: unset it"
        ))
    };
    let (stage, step) = spec.split_once('@').ok_or_else(bad)?;
    let step = step.parse().map_err(|_| bad())?;
    Fault::new(stage, step, f32::NAN)
        .map(Some)
        .map_err(Error::Settings)
}

/// A run as its errors describe it: its config, data, folder, device and planted fault.
struct Run<'a> {
    cfg: &'a TrainConfig,
    market: &'a Market,
    source: &'a str,
    out: &'a Path,
    gpu: Option<&'a Gpu>,
    fault: &'a Option<Fault>,
}

/// The loop's outcome as the run's: a non-finite value located (where it first appeared,
/// replayed from the last good checkpoint), any error with what the run folder keeps.
fn finished<E: std::error::Error + Send + Sync + 'static>(
    result: std::result::Result<trainer::Finish, TrainError<E>>,
    run: &Run,
) -> Result<trainer::Finish>
where
    Error: From<E>,
{
    match result {
        Ok(f) => Ok(f),
        Err(TrainError::Observe(e)) if e.is::<NonFiniteState>() => {
            let step = e.downcast_ref::<NonFiniteState>().map_or(0, |n| n.step);
            Err(diverged(run, step, &e.to_string()))
        }
        Err(TrainError::NonFinite { step, what }) => Err(diverged(run, step, &what)),
        Err(e) => Err(with_what_is_kept(flatten(e), run.out)),
    }
}

/// A state to checkpoint holding a non-finite parameter or Adam moment.
#[derive(Debug)]
struct NonFiniteState {
    step: u64,
    what: &'static str,
}

impl std::fmt::Display for NonFiniteState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {}", self.what)
    }
}

impl std::error::Error for NonFiniteState {}

/// The first part of a state that is not finite: the parameters or Adam's moments.
fn non_finite_state(o: &OracleTrainer) -> Option<&'static str> {
    if o.online.iter().any(|x| !x.is_finite()) {
        Some("online parameters")
    } else if o.target.iter().any(|x| !x.is_finite()) {
        Some("target parameters")
    } else if o.adam.m.iter().chain(&o.adam.v).any(|x| !x.is_finite()) {
        Some("Adam moments")
    } else {
        None
    }
}

/// The error of a run that diverged at `step` (`what` became non-finite), with where the
/// first non-finite value appeared and what the run folder keeps.
fn diverged(run: &Run, step: u64, what: &str) -> Error {
    let located = match locate_non_finite(run, step) {
                Ok(Some(hit)) => format!(
                    "; the first non-finite value appeared in step {} (stage {}, buffer {:?}, element {}), replayed from the checkpoint of step {}",
                    hit.step + 1,
                    hit.stage,
                    hit.buffer,
                    hit.element,
                    hit.from
                ),
                Ok(None) => "; replaying from the last checkpoint did not reproduce it".into(),
                Err(e) => format!("; it could not be located ({e})"),
            };
    with_what_is_kept(
                Error::Train(format!(
                    "training diverged at step {step}: {what} became non-finite{located}; lower qnet.lr or qnet.grad_clip, or check the data"
                )),
                run.out,
            )
}

/// Where a run's first non-finite value appeared.
struct NonFiniteAt {
    /// The step (counted from 0) and the checkpoint step the replay started from.
    step: u64,
    from: u64,
    stage: &'static str,
    buffer: String,
    element: usize,
}

/// Replay the run from its newest checkpoint (or its start) up to step `until`, eagerly,
/// tracing every step, and find the first stage output holding a non-finite value: the
/// slow path a diverged run takes once, so the run itself never reads its buffers.
fn locate_non_finite(run: &Run, until: u64) -> Result<Option<NonFiniteAt>> {
    let Run {
        cfg,
        market,
        source,
        out,
        gpu,
        fault,
    } = *run;
    let newest = checkpoint::list(&out.join("checkpoints"))?.last().cloned();
    let (from, state) = match newest {
        Some((k, path)) => (k, Checkpoint::read(&path)?.trainer(market, source)?),
        None => (
            0,
            OracleTrainer::new(cfg, market).map_err(|e| Error::Train(e.to_string()))?,
        ),
    };
    let first = |t: u64, trace: &[Buffer]| {
        trace.iter().find_map(|b| {
            let element = match &b.values {
                Values::F32(v) => v.iter().position(|x| !x.is_finite()),
                Values::F64(v) => v.iter().position(|x| !x.is_finite()),
                _ => None,
            }?;
            Some(NonFiniteAt {
                step: t,
                from,
                stage: b.stage,
                buffer: b.name.clone(),
                element,
            })
        })
    };
    let kind = |t: u64| {
        cfg.schedule
            .kind(t, cfg.env.envs, cfg.qnet.n_step, cfg.replay.capacity)
    };
    match gpu {
        Some(g) => {
            let mut t = CudaTrainer::new(g, cfg, market)?;
            t.restore(&state, from)?;
            t.set_graphs(false);
            t.plant_fault(fault.clone())?;
            let mut view = state.clone();
            for s in from..until {
                t.step_kind(kind(s))?;
                if let Some(hit) = first(s, &t.trace(kind(s), &mut view)?) {
                    return Ok(Some(hit));
                }
            }
        }
        None => {
            let mut o = state;
            o.cfg = cfg.clone();
            o.fault = fault.clone();
            for s in from..until {
                o.step_with(kind(s), None)
                    .map_err(|e| Error::Train(e.to_string()))?;
                if let Some(hit) = step_trace(&o).and_then(|tr| first(s, &tr)) {
                    return Ok(Some(hit));
                }
            }
        }
    }
    Ok(None)
}

/// A run's error, with what its folder keeps and how to go on: the newest checkpoint on
/// disk (a checkpoint is written whole or not at all) and `--resume`.
fn with_what_is_kept(e: Error, out: &Path) -> Error {
    let newest = checkpoint::list(&out.join("checkpoints"))
        .ok()
        .and_then(|l| l.last().cloned());
    let kept = match newest {
        Some((step, path)) => format!(
            "{} keeps metrics.jsonl and the checkpoint of step {step} ({}): once the cause is fixed (space freed, say), `tallyho train --resume {}` continues from it",
            out.display(),
            path.display(),
            out.display()
        ),
        None => format!(
            "{} keeps metrics.jsonl; no checkpoint had been written",
            out.display()
        ),
    };
    Error::Train(format!("{e}; {kept}"))
}

/// Create the run folder of a new run, refusing one that already holds a run (nothing
/// written is lost).
fn prepare_new(out: &Path, metrics: &Path) -> Result<()> {
    if metrics.exists() {
        return Err(Error::Io {
            what: format!("{} already holds a run", out.display()),
            err: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "choose another --out, continue it with --resume, or move that run away first",
            ),
        });
    }
    Ok(())
}

fn flatten<E: std::error::Error + Send + Sync + 'static>(e: TrainError<E>) -> Error
where
    Error: From<E>,
{
    match e {
        TrainError::Backend(e) => Error::from(e),
        other => Error::Train(other.to_string()),
    }
}
