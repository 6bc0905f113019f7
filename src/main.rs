//! The tallyho command line.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use tallyho::harness::fixtures::{self, Replayer};
use tallyho::Gpu;

#[derive(Parser)]
#[command(
    name = "tallyho",
    version,
    about = "GPU-resident DQN trainer whose every kernel is checked against a CPU oracle"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train: the embedded synthetic market by default, on the GPU where there is one (else
    /// the CPU oracle, a smaller run of about a minute); metrics to DIR/metrics.jsonl,
    /// checkpoints to DIR/checkpoints, the resolved config to DIR/config.toml.
    Train(TrainArgs),
    /// Evaluate a checkpoint's greedy policy on the test split, beside buy-and-hold and a
    /// random policy: a table, and the report as JSON with --json.
    Eval {
        /// A checkpoint file, or a run folder (its newest checkpoint).
        checkpoint: PathBuf,
        /// The data to evaluate on (the same features); none: the data it trained on.
        #[arg(long)]
        data: Option<PathBuf>,
        /// Write the report (figures and equity curves) as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Draw a run folder's figures: training curves (metrics.jsonl) and, where the run was
    /// evaluated, equity curves (eval.json), as SVG and PNG in DIR/report/.
    Report {
        /// A run folder of `tallyho train` (its --out).
        dir: PathBuf,
    },
    /// Run the GPU-vs-oracle parity matrix and print a table; exits non-zero on any failure.
    Verify {
        /// Random cases per kernel.
        #[arg(long, default_value_t = 20)]
        cases: usize,
        /// Steps of the whole training step's rows (GPU vs CPU trainer, graph vs eager, ...).
        #[arg(long, default_value_t = 100)]
        steps: usize,
        /// Run only the groups whose name contains this, or that check this kernel file
        /// (e.g. `replay_sample`); repeatable. `--list` names them.
        #[arg(long)]
        only: Vec<String>,
        /// List the groups and the kernel files each checks, and exit (no GPU needed).
        #[arg(long)]
        list: bool,
        /// Plant a fault in the training-step rows' CUDA trainer (STAGE@STEP: the first
        /// element of STAGE's output moved from step STEP on), to see those rows fail.
        #[arg(long)]
        plant: Option<String>,
        /// Seed of the random cases.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Fixture folder to replay through the kernels as well.
        #[arg(long, default_value_os_t = fixtures::default_dir())]
        fixtures: PathBuf,
        /// Write the report as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Write the report as Markdown here.
        #[arg(long)]
        markdown: Option<PathBuf>,
    },
    /// Benchmarks on the GPU.
    Bench {
        #[command(subcommand)]
        what: BenchWhat,
    },
    /// Record (GPU) or check (CPU oracle, or --gpu) the golden fixtures.
    Fixtures {
        #[command(subcommand)]
        action: FixturesAction,
    },
    /// Compile every kernel with NVRTC for an architecture (no GPU needed).
    Kernels {
        #[arg(long, default_value = "sm_90")]
        arch: String,
        /// Also write each kernel's PTX here, as `<kernel>.ptx` (for ptxas -v, cuobjdump).
        #[arg(long)]
        ptx: Option<PathBuf>,
    },
    /// Load and validate market data (or the embedded synthetic default) and summarise its
    /// bars, splits and features. No GPU needed.
    Market {
        /// A folder of LEAN minute zips, or a headed CSV file; none: the synthetic default.
        #[arg(long)]
        data: Option<PathBuf>,
    },
    /// Run two paths of the training step side by side and report the first step, stage,
    /// buffer and element where they part: fast (graph, fused) against slow (eager,
    /// unfused) by default. Exits 1 where they part, 0 where they agree.
    Diverge(DivergeArgs),
    /// Mutation testing of the kernels: plant faults in cuda/ one at a time, run the verify
    /// groups covering each on the GPU, and report caught / missed and the score. Exits
    /// non-zero below --min-score. --list and --compile-only need no GPU.
    Mutants(MutantsArgs),
    /// What this machine offers: driver, NVRTC, device.
    Info,
}

#[derive(clap::Args)]
struct DivergeArgs {
    /// The first side: `fast` (CUDA: graph, fused reward and experience step), `slow` (CUDA:
    /// eager, unfused), `cuda:OPTIONS` (comma-separated: graph|eager, fused|unfused (the
    /// reward), one-launch|unfused-experience, overlap), `cpu` (the oracle trainer), or
    /// `recorded:FILE` (a run --record wrote).
    #[arg(long, default_value = "fast")]
    a: String,
    /// The second side, as --a.
    #[arg(long, default_value = "slow")]
    b: String,
    /// Steps to run at most.
    #[arg(long, default_value_t = 100)]
    steps: u64,
    /// A folder of LEAN minute zips or a headed CSV; none: the synthetic check market.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Seed of the envs, the network and the replay.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Plant a fault (a test of the finder): STAGE@STEP moves the first element of STAGE's
    /// output from step STEP on, in side a (STAGE@STEP@b: in side b). Stages: state_gather,
    /// acting, env_step, reward, replay_sample, qnet_loss, optimizer, target_sync.
    #[arg(long)]
    fault: Option<String>,
    /// Write side a's traces, step by step, to this file (compare another build's run with
    /// it as `--b recorded:FILE`).
    #[arg(long)]
    record: Option<PathBuf>,
    /// Write the outcome as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
struct MutantsArgs {
    /// Faults planted in each file of cuda/ at most (a deterministic sample over the kinds).
    #[arg(long, default_value_t = 8)]
    per_file: usize,
    /// Seed of the sample.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only the files of cuda/ whose path contains this (e.g. `replay_sample.cu`, `common/`).
    #[arg(long)]
    file: Option<String>,
    /// Only shard K of N (`K/N`, K from 0): the mutants whose index is K modulo N, to split a
    /// run across calls or machines.
    #[arg(long)]
    shard: Option<String>,
    /// List the mutants and exit.
    #[arg(long)]
    list: bool,
    /// Compile every mutant with NVRTC and report the viable ones, without a GPU.
    #[arg(long)]
    compile_only: bool,
    /// Architecture of --compile-only (a run uses the GPU's).
    #[arg(long, default_value = "sm_90")]
    arch: String,
    /// Mutants' processes at once.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// Seconds before a mutant's process counts as hung (caught); default ten times the
    /// baseline's, at least 60.
    #[arg(long)]
    timeout: Option<u64>,
    /// Start no mutant after this many seconds; the rest are reported untested.
    #[arg(long)]
    budget: Option<u64>,
    /// Random cases per kernel in each mutant's verify groups.
    #[arg(long, default_value_t = 3)]
    cases: usize,
    /// Training steps of the whole-step rows in each mutant's verify groups.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// The exit status is non-zero where fewer than this share of viable mutants is caught.
    #[arg(long, default_value_t = 0.9)]
    min_score: f64,
    /// Write every outcome and the summary as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// The kernel tree (the checkout's cuda/, which must be this build's).
    #[arg(long, default_value_os_t = tallyho::harness::mutants::default_cuda_dir())]
    cuda: PathBuf,
    /// Fixture folder the fixture rows replay.
    #[arg(long, default_value_os_t = fixtures::default_dir())]
    fixtures: PathBuf,
    /// (Internal) run one mutant, given as JSON, in this process.
    #[arg(long, hide = true)]
    apply: Option<String>,
    /// (Internal) run the unmutated kernels through every group in this process.
    #[arg(long, hide = true)]
    baseline: bool,
}

#[derive(clap::Args)]
struct TrainArgs {
    /// A folder of LEAN minute zips, or a headed CSV file; none: the synthetic default (or,
    /// with --resume, the resumed run's data).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Training steps in all (each steps every env once), the same as --set run.steps=N;
    /// default 30000 on a GPU, 10000 on the CPU.
    #[arg(long)]
    steps: Option<u64>,
    /// Parallel envs N (--set env.envs=N); default 1024 on a GPU, 16 on the CPU.
    #[arg(long)]
    envs: Option<usize>,
    /// Run seed: sets env.seed, qnet.seed and replay.seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Run folder (metrics.jsonl, config.toml, checkpoints/); refused if it already holds a
    /// run. Default: runs/train-<unix seconds>, or the resumed run's folder.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Which trainer: auto (CUDA with a GPU, else the CPU oracle), cpu or cuda.
    #[arg(long, value_enum, default_value_t = tallyho::train::BackendChoice::Auto)]
    backend: tallyho::train::BackendChoice,
    /// Steps between metric reads (--set schedule.metrics_every=K).
    #[arg(long)]
    metrics_every: Option<u32>,
    /// A TOML config file: any keys of [env], [qnet], [replay], [reward], [schedule], [run]
    /// (see --print-config), laid over the backend's defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Override one config key, after the file: --set qnet.lr=3e-4 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Print the full resolved config as TOML and exit (a valid --config file).
    #[arg(long)]
    print_config: bool,
    /// Continue a run exactly from its newest checkpoint (a run folder) or from a
    /// checkpoint file; give --steps to train past its run.steps.
    #[arg(long, value_name = "DIR|FILE")]
    resume: Option<PathBuf>,
    /// No progress bar and no notes: only the final line (and errors).
    #[arg(long, conflicts_with = "json")]
    quiet: bool,
    /// One JSON object a line on stdout (metrics, checkpoint, eval, done) instead of the bar.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum BenchWhat {
    /// Prioritized replay: sample (with IS weights) and insert, eager and graph-replayed.
    Replay(BenchArgs),
    /// Experience: one env timestep (gather, Q-forward, select, fill, barriers) at N = 256 and 4096.
    Env(BenchArgs),
    /// Reward pipeline: the unfused stages and the fused kernel at N = 16, 256, 1024, 4096.
    Reward(BenchArgs),
    /// Q-network: one full update at B = 256 and 1024 and its parts, eager and graph-replayed.
    Qnet(BenchArgs),
    /// The whole training step at N = 16 .. 4096 (U = 1, B = 256, 2^20 replay rows): eager,
    /// graph, graph with the unfused reward, each phase, back-to-back replay, device memory.
    Train(BenchArgs),
}

/// What every benchmark takes.
#[derive(clap::Args)]
struct BenchArgs {
    #[arg(long, default_value_t = 200)]
    reps: usize,
    #[arg(long, default_value_t = 20)]
    warmup: usize,
    /// The smallest sizes only (the first one or two), few repetitions: a smoke run.
    #[arg(long)]
    quick: bool,
    /// Write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Subcommand)]
enum FixturesAction {
    /// Run the recorded scenario on the GPU and write fixtures (safetensors + manifest).
    Record {
        #[arg(long, default_value_os_t = fixtures::default_dir())]
        dir: PathBuf,
    },
    /// Replay the fixtures through the oracle (or the kernels with --gpu) and compare.
    Check {
        #[arg(long, default_value_os_t = fixtures::default_dir())]
        dir: PathBuf,
        #[arg(long)]
        gpu: bool,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// `tallyho market`: what the trainer would learn from.
fn market_summary(data: Option<&std::path::Path>) -> Result<()> {
    use tallyho_oracle::features::{self, FeatureConfig, FEATURE_NAMES};
    use tallyho_oracle::market::{self, EpochMs, SyntheticConfig};
    let (source, (bars, lean)) = match data {
        Some(p) => (p.display().to_string(), market::load_detailed(p)?),
        None => (
            "the embedded synthetic market (seeded, SyntheticConfig::default)".to_string(),
            (market::synthetic(&SyntheticConfig::default())?, None),
        ),
    };
    let m = features::build(&bars, &FeatureConfig::default())?;
    let (first, last) = (bars.time_ms[0], bars.time_ms[bars.len() - 1]);
    println!("source: {source}");
    println!(
        "bars: {} from {} to {}",
        bars.len(),
        EpochMs(first),
        EpochMs(last)
    );
    for line in lean.iter().flat_map(market::LeanLog::lines) {
        println!("{line}");
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let spread: Vec<f64> = bars.ask.iter().zip(&bars.bid).map(|(a, b)| a - b).collect();
    println!(
        "close: first {:.2}, last {:.2}, min {:.2}, max {:.2}; mean spread {:.4}; mean volume {:.1}",
        bars.close[0],
        bars.close[bars.len() - 1],
        bars.close.iter().copied().fold(f64::INFINITY, f64::min),
        bars.close.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        mean(&spread),
        mean(&bars.volume)
    );
    println!(
        "warm-up bars [0, {}), training split [{}, {}), test split [{}, {})",
        m.first_bar, m.first_bar, m.train_end, m.train_end, m.bars
    );
    println!("features (normalised with training-split statistics):");
    for (j, name) in FEATURE_NAMES.iter().enumerate() {
        println!(
            "  {name:<12} mean {:>12.5e}  std {:>12.5e}",
            m.mean[j], m.std[j]
        );
    }
    Ok(())
}

/// `tallyho train`: Ctrl-C asks the run to stop after its current step with a final
/// checkpoint (a second Ctrl-C exits at once).
fn train(a: TrainArgs) -> Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tallyho::train::Output;
    let output = match (a.quiet, a.json) {
        (true, _) => Output::Quiet,
        (_, true) => Output::Json,
        _ => Output::Bar,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\nstopping after this step with a checkpoint (Ctrl-C again to quit at once)");
    })
    .context("installing the Ctrl-C handler")?;
    let opts = tallyho::train::TrainOptions {
        data: a.data,
        steps: a.steps,
        envs: a.envs,
        seed: a.seed,
        out: a.out,
        backend: a.backend,
        metrics_every: a.metrics_every,
        config: a.config,
        sets: a.sets,
        resume: a.resume,
        output,
        stop: Some(stop),
    };
    let quiet = output != Output::Bar;
    let note = |line: &str| {
        if !quiet {
            eprintln!("{line}")
        }
    };
    if a.print_config {
        print!("{}", tallyho::train::print_config(&opts, note)?);
        return Ok(());
    }
    let s = tallyho::train::run(&opts, note)?;
    let rate = s.transitions as f64 / s.seconds.max(1e-9);
    if output == Output::Json {
        println!(
            "{}",
            serde_json::json!({
                "event": "done", "backend": s.backend, "step": s.steps, "steps_run": s.steps_run,
                "transitions": s.transitions, "seconds": s.seconds, "transitions_per_s": rate,
                "stopped": s.stopped, "out": s.out, "checkpoint": s.checkpoint,
                "last": s.last, "eval": s.eval.as_ref().map(|(_, e)| e),
                "figures": s.report.as_ref().map(|r| r.paths()),
            })
        );
        return Ok(());
    }
    let tail = match &s.last {
        Some(m) => format!(
            "; last window: loss {}, reward {:.4}, pnl {:.0}, {} trades, epsilon {:.3}",
            m.loss.map_or("-".into(), |l| format!("{l:.4}")),
            m.reward,
            m.pnl,
            m.trades,
            m.epsilon
        ),
        None => String::new(),
    };
    let verb = if s.stopped {
        "stopped at step"
    } else {
        "trained to step"
    };
    println!(
        "{verb} {} ({} steps, {} transitions this run) on the {} backend in {:.1} s ({rate:.0} transitions/s){tail}",
        s.steps, s.steps_run, s.transitions, s.backend, s.seconds,
    );
    if let Some((step, e)) = &s.eval {
        println!("evaluation at step {step}:\n{}", e.table());
    }
    println!("run folder: {}", s.out.display());
    if let Some(c) = &s.checkpoint {
        println!("checkpoint: {}", c.display());
    }
    if let Some(r) = &s.report {
        for p in r.paths() {
            println!("figure: {}", p.display());
        }
    }
    if s.stopped {
        println!("continue with: tallyho train --resume {}", s.out.display());
    }
    Ok(())
}

fn write(path: &PathBuf, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A side of `tallyho diverge` from its spelling (see DivergeArgs).
fn diverge_side(spec: &str) -> Result<tallyho::harness::diverge::Side> {
    use tallyho::experience::ExperiencePath;
    use tallyho::harness::diverge::{CudaPaths, Side};
    use tallyho::reward::RewardPath;
    Ok(match spec {
        "fast" | "cuda" => Side::Cuda(CudaPaths::FAST),
        "slow" => Side::Cuda(CudaPaths::SLOW),
        "cpu" => Side::Cpu,
        _ => {
            if let Some(file) = spec.strip_prefix("recorded:") {
                return Ok(Side::Recorded(PathBuf::from(file)));
            }
            let Some(options) = spec.strip_prefix("cuda:") else {
                bail!("side {spec:?} is not one of fast, slow, cpu, cuda:OPTIONS or recorded:FILE");
            };
            let mut p = CudaPaths::FAST;
            for o in options.split(',').filter(|o| !o.is_empty()) {
                match o {
                    "graph" => p.graphs = true,
                    "eager" => p.graphs = false,
                    "fused" => p.reward = RewardPath::Fused,
                    "unfused" => p.reward = RewardPath::Unfused,
                    "one-launch" => p.experience = ExperiencePath::Fused,
                    "unfused-experience" => p.experience = ExperiencePath::Unfused,
                    "overlap" => p.overlap = true,
                    other => bail!("cuda option {other:?} in {spec:?} is not one of graph, eager, fused, unfused, one-launch, unfused-experience, overlap"),
                }
            }
            Side::Cuda(p)
        }
    })
}

/// A planted fault spelled STAGE@STEP or STAGE@STEP@SIDE (side a or b: 0 or 1).
fn parse_fault(spec: &str, delta: f32) -> Result<(tallyho_oracle::trainer::trace::Fault, usize)> {
    let parts: Vec<&str> = spec.split('@').collect();
    let (stage, step, side) = match parts.as_slice() {
        [stage, step] => (*stage, *step, "a"),
        [stage, step, side] => (*stage, *step, *side),
        _ => bail!(
            "fault {spec:?} is not STAGE@STEP or STAGE@STEP@SIDE (e.g. reward@10, reward@10@b)"
        ),
    };
    let step: u64 = step
        .parse()
        .with_context(|| format!("fault {spec:?}: the step {step:?} is not a step number"))?;
    let side = match side {
        "a" => 0,
        "b" => 1,
        other => bail!("fault {spec:?}: side {other:?} is not a or b"),
    };
    let fault = tallyho_oracle::trainer::trace::Fault::new(stage, step, delta)
        .map_err(anyhow::Error::msg)?;
    Ok((fault, side))
}

/// `tallyho diverge` (see [`tallyho::harness::diverge`]).
fn diverge(a: DivergeArgs) -> Result<()> {
    use tallyho::harness::diverge::{self as dv, Side};
    use tallyho::harness::parity::trainer::{small_config, small_market};
    let sides = [diverge_side(&a.a)?, diverge_side(&a.b)?];
    let mut faults = [None, None];
    if let Some(spec) = &a.fault {
        let (fault, side) = parse_fault(spec, 1.0)?;
        faults[side] = Some(fault);
    }
    if a.steps == 0 {
        bail!("--steps 0 compares nothing: give at least 1");
    }
    let market = match &a.data {
        Some(path) => tallyho::env::load_market(Some(path))?,
        None => small_market()?,
    };
    let mut cfg = small_config(market.feature_dim);
    (cfg.env.seed, cfg.qnet.seed, cfg.replay.seed) = (a.seed, a.seed, a.seed);
    let needs_gpu = sides.iter().any(|s| matches!(s, Side::Cuda(_)));
    let gpu = if needs_gpu {
        Some(
            Gpu::new()
                .context("a cuda side runs on a GPU (cpu against recorded:FILE needs none)")?,
        )
    } else {
        None
    };
    eprintln!(
        "diverge: {} against {}, up to {} steps of {} envs",
        sides[0], sides[1], a.steps, cfg.env.envs
    );
    let outcome = dv::diverge(
        gpu.as_ref(),
        &cfg,
        &market,
        [&sides[0], &sides[1]],
        faults,
        a.steps,
        a.record.as_deref(),
    )?;
    if let Some(p) = &a.json {
        let d = outcome.divergence.as_ref().map(|d| {
            serde_json::json!({
                "step": d.step, "stage": d.stage, "buffer": d.buffer, "element": d.element,
                "a": d.a, "b": d.b, "error": d.error, "bound": d.bound, "tolerance": d.tolerance,
            })
        });
        write(
            p,
            &serde_json::to_string_pretty(&serde_json::json!({
                "a": outcome.a, "b": outcome.b, "steps": outcome.steps, "divergence": d,
            }))?,
        )?;
    }
    if let Some(p) = &a.record {
        println!("recorded {}'s traces in {}", outcome.a, p.display());
    }
    println!("{outcome}");
    if outcome.divergence.is_some() {
        std::process::exit(1);
    }
    Ok(())
}

/// `tallyho mutants` (see [`tallyho::harness::mutants`]).
fn mutants(a: MutantsArgs) -> Result<()> {
    use tallyho::harness::mutants::{self as mt, exit, RunOptions, Tree};
    use tallyho::harness::verify;
    let verify_opts = verify::Options {
        cases: a.cases,
        steps: a.steps,
        seed: a.seed,
        fixture_dir: a.fixtures.clone(),
        only: Vec::new(),
        fault: None,
        fail_fast: true,
    };
    if a.apply.is_some() || a.baseline {
        // A mutant's own process: the exit status is the verdict (mutants::exit).
        let mutant: Option<mt::Mutant> = match &a.apply {
            Some(json) => {
                Some(serde_json::from_str(json).context("--apply takes a mutant as JSON")?)
            }
            None => None,
        };
        let (code, line) = match (Gpu::new(), Tree::read(&a.cuda)) {
            (Ok(gpu), Ok(tree)) => mt::run_one(&gpu, &tree, mutant.as_ref(), &verify_opts),
            (Err(e), _) | (_, Err(e)) => (exit::SETUP, e.to_string()),
        };
        println!("{line}");
        std::process::exit(code);
    }
    let tree = Tree::read(&a.cuda)?;
    let mut all = mt::generate(&tree, a.per_file, a.seed);
    if let Some(f) = &a.file {
        all.retain(|m| m.file.contains(f.as_str()));
        if all.is_empty() {
            bail!("--file {f:?} matches no file of {} with a mutant: give part of a path under cuda/, e.g. replay_sample.cu or common/", a.cuda.display());
        }
    }
    if let Some(spec) = &a.shard {
        let parsed = spec
            .split_once('/')
            .and_then(|(k, n)| Some((k.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
            .filter(|&(k, n)| n > 0 && k < n);
        let Some((k, n)) = parsed else {
            bail!("--shard {spec:?} is not K/N with 0 <= K < N: e.g. --shard 0/2 and --shard 1/2");
        };
        all = all
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % n == k)
            .map(|(_, m)| m)
            .collect();
    }
    if a.list {
        for m in &all {
            println!("{}", m.describe());
        }
        println!("{} mutants", all.len());
        return Ok(());
    }
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (arch, gpu_arch) = if a.compile_only {
        (
            Box::leak(a.arch.clone().into_boxed_str()) as &'static str,
            None,
        )
    } else {
        let gpu = Gpu::new().context(
            "tallyho mutants runs the verify groups on a GPU (--list and --compile-only need none)",
        )?;
        (gpu.arch(), Some(gpu.name()))
    };
    eprintln!("mutants: {} planted in {} (at most {} a file, seed {}); compiling each for {arch} on {threads} threads", all.len(), a.cuda.display(), a.per_file, a.seed);
    let (viable, mut outcomes) = mt::sort_viable(&tree, all, arch, threads);
    eprintln!(
        "  {} viable, {} refused by NVRTC",
        viable.len(),
        outcomes.len()
    );
    if let Some(device) = gpu_arch {
        let ptx_cache = std::env::temp_dir().join("tallyho-ptx-cache");
        std::fs::create_dir_all(&ptx_cache)
            .with_context(|| format!("creating {}", ptx_cache.display()))?;
        let exe = std::env::current_exe().context("finding this program to run each mutant")?;
        let mut run = RunOptions {
            exe: &exe,
            args: vec![
                "--cases".into(),
                a.cases.to_string(),
                "--steps".into(),
                a.steps.to_string(),
                "--seed".into(),
                a.seed.to_string(),
                "--cuda".into(),
                a.cuda.display().to_string(),
                "--fixtures".into(),
                a.fixtures.display().to_string(),
            ],
            jobs: a.jobs,
            timeout: std::time::Duration::from_secs(a.timeout.unwrap_or(3600)),
            ptx_cache,
            budget: a.budget.map(std::time::Duration::from_secs),
        };
        eprintln!("  baseline: the unmutated kernels through every group on {device}");
        let base = mt::baseline(&run)?;
        let timeout = a.timeout.unwrap_or(((base * 10.0) as u64).max(60));
        run.timeout = std::time::Duration::from_secs(timeout);
        eprintln!("  baseline passed in {base:.1} s; each mutant's process is killed (caught) after {timeout} s; {} at once", a.jobs);
        let total = viable.len();
        let ran = mt::run_all(&run, &viable, &|i, o| {
            eprintln!(
                "  [{}/{total}] {:>5.1} s  {}  {}",
                i + 1,
                o.seconds,
                match &o.verdict {
                    mt::Verdict::Missed => "MISSED".to_string(),
                    mt::Verdict::Caught(why) => format!("caught ({why})"),
                    mt::Verdict::Unviable(why) => format!("unviable ({why})"),
                },
                o.mutant.describe()
            );
        })?;
        if ran.len() < total {
            eprintln!(
                "  the --budget ran out: {} of {total} viable mutants tested, {} left untested (run them with --shard or a larger budget)",
                ran.len(),
                total - ran.len()
            );
        }
        outcomes.extend(ran);
        eprintln!(
            "  baseline again (a device that broke midway would make every later verdict 'caught')"
        );
        mt::baseline(&run)?;
    } else {
        println!(
            "{} mutants compile for {arch}; {} refused (unviable)",
            viable.len(),
            outcomes.len()
        );
        if let Some(p) = &a.json {
            write(p, &serde_json::to_string_pretty(&viable)?)?;
        }
        return Ok(());
    }
    outcomes.sort_by(|x, y| {
        (&x.mutant.file, x.mutant.line, x.mutant.col).cmp(&(
            &y.mutant.file,
            y.mutant.line,
            y.mutant.col,
        ))
    });
    let summary = mt::summarize(&outcomes);
    if let Some(p) = &a.json {
        write(
            p,
            &serde_json::to_string_pretty(
                &serde_json::json!({"summary": summary, "outcomes": outcomes}),
            )?,
        )?;
    }
    print!("{}", mt::table(&summary));
    if summary.score < a.min_score {
        bail!("{:.1}% of viable mutants caught, below --min-score {:.1}%: strengthen the rows the survivors above reveal", 100.0 * summary.score, 100.0 * a.min_score);
    }
    Ok(())
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train(args) => train(args)?,
        Command::Eval {
            checkpoint,
            data,
            json,
        } => {
            let opts = tallyho::eval::EvalOptions {
                checkpoint,
                data,
                json,
            };
            let (c, report) = tallyho::eval::run(&opts)?;
            println!(
                "{} (step {}, trained on {}):\n{}",
                c.path.display(),
                c.header.step,
                c.header.market.source,
                report.table()
            );
            if let Some(p) = &opts.json {
                println!("report: {}", p.display());
            }
        }
        Command::Market { data } => market_summary(data.as_deref())?,
        Command::Report { dir } => {
            for path in tallyho::report::report(&dir)?.paths() {
                println!("wrote {}", path.display());
            }
        }
        Command::Verify {
            cases,
            steps,
            only,
            list,
            plant,
            seed,
            fixtures: dir,
            json,
            markdown,
        } => {
            use tallyho::harness::verify;
            if cases == 0 {
                bail!("--cases 0 checks nothing: give at least 1");
            }
            if steps == 0 {
                bail!("--steps 0 checks nothing: give at least 1");
            }
            let groups = verify::select(&only)?;
            if list {
                for g in groups {
                    println!("{:<22} {}", g.name, g.covers().join(", "));
                }
                return Ok(());
            }
            let gpu = Gpu::new().context("tallyho verify runs the kernels on a GPU")?;
            eprintln!(
                "verify on {} (driver {}, {}), {cases} cases per kernel, {steps} training steps, seed {seed}, groups: {}",
                gpu.name(),
                gpu.driver_version(),
                gpu.arch(),
                groups.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
            );
            let fault = match &plant {
                Some(spec) => Some(parse_fault(spec, 1.0)?.0),
                None => None,
            };
            let opts = verify::Options {
                cases,
                steps,
                seed,
                fixture_dir: dir,
                only,
                fault,
                fail_fast: false,
            };
            let report = verify::run(&gpu, &opts, |what| eprintln!("  checking {what}"))?;
            if let Some(p) = json {
                write(&p, &serde_json::to_string_pretty(&report)?)?;
            }
            if let Some(p) = markdown {
                write(&p, &verify::markdown(&report))?;
            }
            print!("{}", verify::text_table(&report));
            let failed = report.rows.iter().filter(|r| !r.passed).count();
            if failed > 0 {
                bail!(
                    "{failed} of {} kernel outputs failed parity",
                    report.rows.len()
                );
            }
            println!("all {} kernel outputs within tolerance", report.rows.len());
        }
        Command::Bench { what } => {
            use tallyho::harness::bench::{self, BenchOptions, BenchRow};
            type Bench = fn(&Gpu, &BenchOptions) -> tallyho::Result<Vec<BenchRow>>;
            let (name, args, run): (&str, BenchArgs, Bench) = match what {
                BenchWhat::Replay(a) => ("replay", a, bench::bench_replay),
                BenchWhat::Env(a) => ("env", a, bench::bench_env),
                BenchWhat::Reward(a) => ("reward", a, bench::bench_reward),
                BenchWhat::Qnet(a) => ("qnet", a, bench::bench_qnet),
                BenchWhat::Train(a) => ("train", a, tallyho::harness::bench_train::bench_train),
            };
            let BenchArgs {
                reps,
                warmup,
                quick,
                json,
            } = args;
            let gpu = Gpu::new().context("tallyho bench runs on a GPU")?;
            eprintln!(
                "bench {name} on {} (driver {}), {reps} reps, {warmup} warm-up",
                gpu.name(),
                gpu.driver_version()
            );
            let rows = run(
                &gpu,
                &BenchOptions {
                    reps,
                    warmup,
                    quick,
                },
            )?;
            if let Some(p) = json {
                write(&p, &serde_json::to_string_pretty(&rows)?)?;
            }
            print!("{}", bench::format_table(&rows));
        }
        Command::Fixtures {
            action: FixturesAction::Record { dir },
        } => {
            let gpu = Gpu::new().context("recording fixtures runs the kernels on a GPU")?;
            let m = fixtures::record(&gpu, &dir)?;
            println!(
                "recorded {} kernels on {} (driver {}) into {}",
                m.kernels.len(),
                m.device,
                m.driver,
                dir.display()
            );
            let pairs = fixtures::check(&dir, Replayer::Oracle)?;
            report_fixture_check(&pairs)?;
        }
        Command::Fixtures {
            action: FixturesAction::Check { dir, gpu },
        } => {
            let pairs = if gpu {
                let g = Gpu::new().context("fixtures check --gpu runs the kernels")?;
                fixtures::check(&dir, Replayer::Gpu(&g))?
            } else {
                fixtures::check(&dir, Replayer::Oracle)?
            };
            report_fixture_check(&pairs)?;
        }
        Command::Kernels { arch, ptx } => {
            let arch: &'static str = Box::leak(arch.into_boxed_str());
            if let Some(dir) = &ptx {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating the PTX folder {}", dir.display()))?;
            }
            for k in tallyho::runtime::KERNELS {
                let code = tallyho::runtime::compile(k, arch)?;
                println!(
                    "compiled cuda/{}.cu for {arch} (source {}): {}",
                    k.name,
                    &k.sha256[..16],
                    k.entry_points.join(", ")
                );
                if let Some(dir) = &ptx {
                    let path = dir.join(format!("{}.ptx", k.name));
                    std::fs::write(&path, code.to_src())
                        .with_context(|| format!("writing {}", path.display()))?;
                }
            }
        }
        Command::Mutants(args) => mutants(args)?,
        Command::Diverge(args) => diverge(args)?,
        Command::Info => {
            println!(
                "CUDA driver library: {}",
                if tallyho::runtime::driver_present() {
                    "found"
                } else {
                    "not found"
                }
            );
            println!(
                "NVRTC library:       {}",
                if tallyho::runtime::nvrtc_present() {
                    "found"
                } else {
                    "not found"
                }
            );
            match Gpu::new() {
                Ok(g) => println!(
                    "device 0:            {} ({}, driver {})",
                    g.name(),
                    g.arch(),
                    g.driver_version()
                ),
                Err(e) => println!("device:              none ({e})"),
            }
        }
    }
    Ok(())
}

fn report_fixture_check(pairs: &[(String, tallyho_oracle::Comparison)]) -> Result<()> {
    let failed: Vec<String> = pairs
        .iter()
        .filter_map(|(k, c)| c.check().err().map(|e| format!("{k}: {e}")))
        .collect();
    let kernels: std::collections::BTreeSet<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    for k in &kernels {
        let n = pairs.iter().filter(|(kk, _)| kk == k).count();
        let bad = pairs
            .iter()
            .filter(|(kk, c)| kk == k && !c.passed())
            .count();
        println!(
            "{k:<24} {n:>3} outputs  {}",
            if bad == 0 {
                "pass".to_string()
            } else {
                format!("{bad} FAIL")
            }
        );
    }
    if !failed.is_empty() {
        bail!(
            "{} fixture outputs out of tolerance:\n{}",
            failed.len(),
            failed.join("\n")
        );
    }
    println!(
        "fixtures: {} outputs of {} kernels reproduce the recorded GPU results",
        pairs.len(),
        kernels.len()
    );
    Ok(())
}
