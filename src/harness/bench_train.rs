//! `tallyho bench train`: the whole training step (experience, reward, n-step assembly,
//! insert, one update at B = 256, target sync) of the default network on the embedded
//! synthetic market, for N in {16, 128, 256, 1024, 4096} envs and a replay of 2^20 rows.
//!
//! Rows per N (the `batch` column holds N, `capacity` the replay's rows):
//! - `step`: eager (every launch from the host) and graph (the whole step captured once and
//!   replayed), with the fused reward; `step (unfused reward)`: the same with the reward
//!   pipeline's unfused chain, eager and graph;
//! - the phases, each captured alone: `experience`, `reward` (reward pipeline, n-step
//!   assembly, the step's metrics), `insert`, `update` (sample, gather, forwards, loss,
//!   backward, Adam, priorities), `sync`;
//! - `step (overlap)`: the same step with the update on a stream of its own, the
//!   experience half and the first update's sample..backward as two branches of the graph
//!   (`CudaTrainer::with_overlap`), eager and graph;
//! - `step (back to back)`: the graph replayed `reps` times with no wait between replays,
//!   per step: the device's time per step once launch latency is hidden, against the
//!   isolated replay's (the share of the step's wall time the device is busy);
//! - transitions/s = N / median on the step rows (updates/s = U / median = transitions/s / N
//!   with U = 1); the device memory the trainer holds (free memory before and after
//!   building and running it, every module loaded before the first, so that each N's
//!   figure is its own trainer's buffers and graphs).
//!
//! Method: as the other benchmarks (bench.rs): warm-up calls, then per repetition two CUDA
//! events around the work on an idle device; medians and the 10th / 90th percentiles.
//! Every step first runs the collect steps that fill the replay to its learn threshold, so
//! the timed steps are Learn steps.

use super::bench::{percentile, BenchOptions, BenchRow, Timing};
use crate::env::load_market;
use crate::error::Result;
use crate::reward::RewardPath;
use crate::runtime::Gpu;
use crate::trainer::CudaTrainer;
use cudarc::driver::sys::CUevent_flags;
use tallyho_oracle::features::Market;
use tallyho_oracle::schedule::StepKind;
use tallyho_oracle::TrainConfig;

/// Env counts of the full run (a quick run takes the first two).
pub const TRAIN_ENVS: [usize; 5] = [16, 128, 256, 1024, 4096];
/// Replay rows.
pub const TRAIN_CAPACITY: usize = 1 << 20;

/// The benchmark's config at N envs: the defaults, one update per step of B = 256, a replay
/// of 2^20 rows, updates from the first full batch.
pub fn train_config(envs: usize, feature_dim: usize) -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.env.envs = envs;
    cfg.replay.capacity = TRAIN_CAPACITY;
    cfg.replay.batch = 256;
    cfg.schedule.updates_per_step = 1;
    cfg.schedule.learn_start = 256;
    cfg.resolve(feature_dim)
}

/// Device memory in use (total - free), in bytes.
fn used_bytes() -> Result<usize> {
    let (free, total) = cudarc::driver::result::mem_get_info()?;
    Ok(total - free)
}

fn with_rates(mut rows: [BenchRow; 2], n: usize) -> [BenchRow; 2] {
    for r in rows.iter_mut() {
        r.transitions_per_s = Some(n as f64 / (r.median_us * 1e-6));
    }
    rows
}

/// One row per (op, N, mode); see the module doc.
pub fn bench_train(gpu: &Gpu, opts: &BenchOptions) -> Result<Vec<BenchRow>> {
    let timing = Timing::of(opts)?;
    let counts = if opts.quick {
        &TRAIN_ENVS[..2]
    } else {
        &TRAIN_ENVS[..]
    };
    let market = load_market(None)?;
    // Modules and library state first, so that no N's memory figure includes them.
    gpu.load_all()?;
    drop(CudaTrainer::new(
        gpu,
        &train_config(counts[0], market.feature_dim),
        &market,
    )?);
    let learn = |t: &mut CudaTrainer| t.step_eager(StepKind::Learn);
    let mut rows = Vec::new();
    for &n in counts {
        gpu.synchronize()?;
        let before = used_bytes()?;
        let cfg = train_config(n, market.feature_dim);
        let mut t = prefilled(gpu, &cfg, &market, false)?;
        rows.extend(with_rates(
            timing.both_modes(gpu, &mut t, "step", TRAIN_CAPACITY, n, learn)?,
            n,
        ));
        t.set_reward_path(RewardPath::Unfused);
        rows.extend(with_rates(
            timing.both_modes(
                gpu,
                &mut t,
                "step (unfused reward)",
                TRAIN_CAPACITY,
                n,
                learn,
            )?,
            n,
        ));
        t.set_reward_path(RewardPath::Fused);
        type Phase = fn(&mut CudaTrainer) -> Result<()>;
        let phases: [(&str, Phase); 5] = [
            ("experience", CudaTrainer::phase_experience),
            ("reward", CudaTrainer::phase_reward),
            ("insert", CudaTrainer::phase_insert),
            ("update", CudaTrainer::phase_update),
            ("sync", CudaTrainer::phase_sync),
        ];
        for (name, phase) in phases {
            let [_, graph] = timing.both_modes(gpu, &mut t, name, TRAIN_CAPACITY, n, phase)?;
            rows.push(graph);
        }
        rows.push(back_to_back(gpu, &timing, &mut t, n)?);
        gpu.synchronize()?;
        let used = used_bytes()?.saturating_sub(before);
        for r in rows
            .iter_mut()
            .filter(|r| r.batch == n && r.device_mib.is_none())
        {
            r.device_mib = Some(used as f64 / (1u64 << 20) as f64);
        }
        drop(t);
        let mut t = prefilled(gpu, &cfg, &market, true)?;
        rows.extend(with_rates(
            timing.both_modes(gpu, &mut t, "step (overlap)", TRAIN_CAPACITY, n, learn)?,
            n,
        ));
        drop(t);
    }
    Ok(rows)
}

/// A trainer of `cfg` whose replay is filled to its learn threshold by eager collect steps,
/// so that its next step is a Learn step.
fn prefilled(gpu: &Gpu, cfg: &TrainConfig, market: &Market, overlap: bool) -> Result<CudaTrainer> {
    let n = cfg.env.envs;
    let mut t = CudaTrainer::with_overlap(gpu, cfg, market, overlap)?;
    t.set_graphs(false);
    let mut step = 0u64;
    loop {
        let kind = cfg
            .schedule
            .kind(step, n, cfg.qnet.n_step, cfg.replay.capacity);
        if kind == StepKind::Learn {
            return Ok(t);
        }
        t.step_kind(kind)?;
        step += 1;
    }
}

/// The whole step's graph replayed `reps` times back to back, timed as one span: the
/// device's time per step with the launch latency hidden.
fn back_to_back(gpu: &Gpu, timing: &Timing, t: &mut CudaTrainer, n: usize) -> Result<BenchRow> {
    t.set_graphs(true);
    for _ in 0..3 + timing.warmup {
        t.step_kind(StepKind::Learn)?;
    }
    gpu.synchronize()?;
    let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut per_step = Vec::with_capacity(5);
    for _ in 0..5 {
        start.record(&gpu.stream)?;
        for _ in 0..timing.reps {
            t.step_kind(StepKind::Learn)?;
        }
        end.record(&gpu.stream)?;
        end.synchronize()?;
        per_step.push(f64::from(start.elapsed_ms(&end)?) * 1e3 / timing.reps as f64);
    }
    per_step.sort_by(f64::total_cmp);
    let median = percentile(&per_step, 0.5);
    Ok(BenchRow {
        op: "step (back to back)".into(),
        capacity: TRAIN_CAPACITY,
        batch: n,
        mode: "graph".into(),
        median_us: median,
        p10_us: percentile(&per_step, 0.1),
        p90_us: percentile(&per_step, 0.9),
        reps: timing.reps * per_step.len(),
        transitions_per_s: Some(n as f64 / (median * 1e-6)),
        device_mib: None,
    })
}
