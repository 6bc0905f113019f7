//! `tallyho bench replay`: the prioritized replay's device cost, in microseconds.
//!
//! What is measured, for capacities C in {2^17, 2^20} (state width 32):
//! - `sample`: one `replay_sample` launch for B in {256, 1024}: stratified thresholds, the
//!   sum-tree descents and the importance weights, all in that one kernel;
//! - `sample+gather+update`: `replay_sample`, `replay_gather`, `replay_update_priorities`, the
//!   update-side replay step, for the same B;
//! - `insert`: `replay_insert` of N = 256 transitions already in device memory (the `batch`
//!   column holds N).
//!
//! Each buffer is first filled to capacity with random transitions and its priorities made
//! non-uniform (random indices updated with random |td|), so the descents take realistic
//! paths. Every operation runs in two modes: `eager` launches the kernels directly, `graph`
//! captures the same calls once into a CUDA graph and times `cuGraphLaunch` of it. Graph
//! replays still draw new indices and write new slots: the sample step and the cursor live
//! in device memory.
//!
//! Method: after `warmup` untimed calls (at least one), each of `reps` repetitions records a
//! CUDA event, enqueues the work, records a second event and waits for it; the sample is the
//! time between the two events. The device is idle when each repetition starts, so a sample
//! includes the host-side launch cost of the work (that is the eager / graph difference) but
//! no queueing behind earlier repetitions. Reported: median, 10th and 90th percentile.

use crate::error::{Error, Result};
use crate::graph::{Binding, GraphSlot};
use crate::replay::{DeviceTransitions, ReplayBuffer};
use crate::runtime::Gpu;
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaSlice;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt::Write as _;
use tallyho_oracle::action::BRANCH_COUNT;
use tallyho_oracle::replay::Transitions;
use tallyho_oracle::ReplayConfig;

/// Capacities and batches of the full run, and of a quick (smoke) run.
const CAPACITIES: [usize; 2] = [1 << 17, 1 << 20];
const BATCHES: [usize; 2] = [256, 1024];
const QUICK_CAPACITIES: [usize; 1] = [1 << 17];
const QUICK_BATCHES: [usize; 1] = [256];
/// Repetitions are capped at this in a quick run.
const QUICK_REPS: usize = 20;
/// Transitions per insert in the `insert` benchmark.
const INSERT_N: usize = 256;
/// State width of the benchmark buffers.
const STATE_DIM: usize = 32;
/// Staging rows of each buffer: the chunk size of the initial fill.
const MAX_INSERT: usize = 4096;
const SEED: u64 = 0x000b_e9c4_5eed;

pub struct BenchOptions {
    /// Timed repetitions per (op, capacity, batch, mode).
    pub reps: usize,
    /// Untimed calls before timing (at least one is made).
    pub warmup: usize,
    /// Smoke run: C = 2^17 and B = 256 only, at most 20 repetitions.
    pub quick: bool,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    pub op: String,
    pub capacity: usize,
    pub batch: usize,
    /// "eager" or "graph".
    pub mode: String,
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    pub reps: usize,
    /// Env transitions per second at the median (experience benchmarks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transitions_per_s: Option<f64>,
    /// Device memory the measured object holds, MiB (training benchmark only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_mib: Option<f64>,
}

/// Run the prioritized replay benchmark on `gpu`; one row per (op, capacity, batch, mode).
pub fn bench_replay(gpu: &Gpu, opts: &BenchOptions) -> Result<Vec<BenchRow>> {
    let timing = Timing::of(opts)?;
    let (capacities, batches): (&[usize], &[usize]) = if opts.quick {
        (&QUICK_CAPACITIES, &QUICK_BATCHES)
    } else {
        (&CAPACITIES, &BATCHES)
    };
    let mut rows = Vec::new();
    for &capacity in capacities {
        for &batch in batches {
            let mut rng =
                ChaCha8Rng::seed_from_u64(SEED ^ ((capacity as u64) << 20) ^ batch as u64);
            let cfg = ReplayConfig {
                capacity,
                batch,
                state_dim: STATE_DIM,
                ..ReplayConfig::default()
            };
            let mut per = ReplayBuffer::new(gpu, &cfg, MAX_INSERT)?;
            let td = gpu.stream.clone_htod(&random_td(&mut rng, batch))?;
            fill_and_skew(&mut per, &td, &mut rng)?;

            rows.extend(
                timing.both_modes(gpu, &mut per, "sample", capacity, batch, |p| p.sample())?,
            );
            rows.extend(timing.both_modes(
                gpu,
                &mut per,
                "sample+gather+update",
                capacity,
                batch,
                |p| {
                    p.sample()?;
                    p.gather()?;
                    p.update_priorities(&td)
                },
            )?);
            if batch == INSERT_N {
                let mut new_rows = DeviceTransitions::alloc(&gpu.stream, INSERT_N, STATE_DIM)?;
                new_rows.upload(
                    &gpu.stream,
                    &random_transitions(&mut rng, INSERT_N),
                    STATE_DIM,
                )?;
                rows.extend(timing.both_modes(
                    gpu,
                    &mut per,
                    "insert",
                    capacity,
                    INSERT_N,
                    |p| p.insert(&new_rows, INSERT_N),
                )?);
            }
            gpu.synchronize()?;
        }
    }
    Ok(rows)
}

/// Batches of the Q-network benchmark (full run; a quick run takes the first).
const QNET_BATCHES: [usize; 2] = [256, 1024];

/// `tallyho bench qnet`: one full update of the default network (C51, 51 atoms; three
/// forwards over two networks, loss, backward, clip, Adam, priorities) at B in {256, 1024},
/// eager and graph-replayed, and its parts: `forward`, `loss`, `backward`, `optimizer`, and
/// `update (tf32)`, the update with TF32 tensor-core GEMMs. The `capacity` column is 0
/// (no replay).
pub fn bench_qnet(gpu: &Gpu, opts: &BenchOptions) -> Result<Vec<BenchRow>> {
    let timing = Timing::of(opts)?;
    let batches = if opts.quick {
        &QNET_BATCHES[..1]
    } else {
        &QNET_BATCHES[..]
    };
    let mut rows = Vec::new();
    for &batch in batches {
        let case = crate::harness::parity::qnet::QNetCase {
            atoms: 51,
            state_dim: 32,
            batch,
            seed: SEED,
        };
        let mut st = crate::harness::parity::qnet::QNetSetup::new(gpu, &case)?;
        let mut these = Vec::new();
        these.extend(timing.both_modes(gpu, &mut st, "update", 0, batch, |st| {
            st.net.update(&st.device_batch, &st.device_weights)
        })?);
        these.extend(timing.both_modes(gpu, &mut st, "forward", 0, batch, |st| st.forward())?);
        these.extend(timing.both_modes(gpu, &mut st, "loss", 0, batch, |st| {
            st.net.loss(&st.device_batch, &st.device_weights)
        })?);
        these
            .extend(timing.both_modes(gpu, &mut st, "backward", 0, batch, |st| st.net.backward())?);
        these.extend(
            timing.both_modes(gpu, &mut st, "optimizer", 0, batch, |st| st.net.optimize())?,
        );
        // The TF32 option, beside the fp32 default.
        st.net.set_tf32(true);
        these.extend(
            timing.both_modes(gpu, &mut st, "update (tf32)", 0, batch, |st| {
                st.net.update(&st.device_batch, &st.device_weights)
            })?,
        );
        st.net.set_tf32(false);
        rows.extend(these);
        gpu.synchronize()?;
    }
    Ok(rows)
}

/// Env counts of the experience benchmark (full run; a quick run takes the first).
const ENV_COUNTS: [usize; 2] = [256, 4096];

/// Experience-step rows with env transitions/s = N / median.
fn with_transitions_per_s(mut rows: [BenchRow; 2], n: usize) -> [BenchRow; 2] {
    for r in rows.iter_mut() {
        r.transitions_per_s = Some(n as f64 / (r.median_us * 1e-6));
    }
    rows
}

/// `tallyho bench env`: one experience timestep of N envs on the embedded synthetic market
/// (state gather, the online Q-forward of the default C51 network, action select at
/// epsilon 0.1, fill, barriers; no update), eager and graph-replayed, for N in {256, 4096},
/// with env transitions/s = N / median (where acting runs qnet_act, N = 4096, the whole step
/// is one launch, `experience_step`, and `experience step (unfused)` is the same step as
/// `state_gather`, qnet_act and `env_step`; at N = 256 the step is those three with the
/// Q-forward layer by layer); and its parts: `q-forward (acting)` (as the step
/// runs it, Q only), `q-forward (layers)` (layer by layer), `q-forward (qnet_act, R rows a
/// block)` (the one-launch forward at each rows-per-block it fits), `env kernels`
/// (`state_gather` and `env_step`, the environment's launches in the step; `env kernels
/// (unfused)`: `state_gather`, `action_select`, `fill_step`, `barriers`); `experience step
/// (layers)`, the step with its Q-forward layer by layer; and `experience step (tf32)`, with
/// the layer-by-layer products in TF32. The `batch` column holds N.
pub fn bench_env(gpu: &Gpu, opts: &BenchOptions) -> Result<Vec<BenchRow>> {
    use crate::env::{load_market, Env};
    use crate::experience::{Experience, ExperiencePath};
    use crate::harness::parity::env::{acting_config, BRANCHES};
    use tallyho_oracle::env::{EnvConfig, EnvMarket, Split};
    let timing = Timing::of(opts)?;
    let counts = if opts.quick {
        &ENV_COUNTS[..1]
    } else {
        &ENV_COUNTS[..]
    };
    let market = load_market(None)?;
    let (em, split) = (EnvMarket::of(&market), Split::train(&market));
    let qcfg = acting_config(&em, SEED);
    let mut net = crate::qnet::QNet::new(gpu, &qcfg, 1)?;
    struct Run {
        env: Env,
        exp: Experience,
        acting: crate::qnet::Acting,
    }
    let mut rows = Vec::new();
    for &n in counts {
        let cfg = EnvConfig {
            envs: n,
            ..EnvConfig::default()
        };
        let mut env = Env::new(gpu, &cfg, &BRANCHES, &em, split)?;
        env.set_epsilon(0.1)?;
        let exp = Experience::new(gpu, &env, &net)?;
        let mut run = Run {
            env,
            exp,
            acting: net.acting(n)?.q_only(),
        };
        let step = timing.both_modes(gpu, &mut run, "experience step", 0, n, |r| {
            r.exp.step(&mut r.env, &net, &mut r.acting)
        })?;
        rows.extend(with_transitions_per_s(step, n));
        if run.exp.in_one_launch(&run.env, &net) {
            // The same step as the three unfused launches it replaces.
            run.exp.set_path(ExperiencePath::Unfused);
            let chain =
                timing.both_modes(gpu, &mut run, "experience step (unfused)", 0, n, |r| {
                    r.exp.step(&mut r.env, &net, &mut r.acting)
                })?;
            run.exp.set_path(ExperiencePath::Fused);
            rows.extend(with_transitions_per_s(chain, n));
        }
        rows.extend(
            timing.both_modes(gpu, &mut run, "q-forward (acting)", 0, n, |r| {
                net.act(&r.env.x, &mut r.acting)
            })?,
        );
        net.set_act_fused(false);
        rows.extend(
            timing.both_modes(gpu, &mut run, "q-forward (layers)", 0, n, |r| {
                net.act(&r.env.x, &mut r.acting)
            })?,
        );
        let layers = timing.both_modes(gpu, &mut run, "experience step (layers)", 0, n, |r| {
            r.exp.step(&mut r.env, &net, &mut r.acting)
        })?;
        rows.extend(with_transitions_per_s(layers, n));
        net.set_act_fused(true);
        // qnet_act at each rows-per-block it fits.
        for block_rows in net.act_block_rows_available() {
            net.set_act_block_rows(Some(block_rows))?;
            let label = format!("q-forward (qnet_act, {block_rows} rows a block)");
            rows.extend(timing.both_modes(gpu, &mut run, &label, 0, n, |r| {
                net.act(&r.env.x, &mut r.acting)
            })?);
        }
        net.set_act_block_rows(None)?;
        rows.extend(timing.both_modes(gpu, &mut run, "env kernels", 0, n, |r| {
            r.env.state_gather()?;
            r.env.env_step(&r.acting.q)
        })?);
        rows.extend(
            timing.both_modes(gpu, &mut run, "env kernels (unfused)", 0, n, |r| {
                r.env.state_gather()?;
                r.env.action_select(&r.acting.q)?;
                r.env.fill_step()?;
                r.env.barriers()
            })?,
        );
        // The TF32 option for the Q-forward, beside the fp32 default.
        net.set_tf32(true);
        let tf32 = timing.both_modes(gpu, &mut run, "experience step (tf32)", 0, n, |r| {
            r.exp.step(&mut r.env, &net, &mut r.acting)
        })?;
        net.set_tf32(false);
        rows.extend(with_transitions_per_s(tf32, n));
        gpu.synchronize()?;
    }
    Ok(rows)
}

/// Env counts of the reward benchmark (full run; a quick run takes the first two).
const REWARD_COUNTS: [usize; 4] = [16, 256, 1024, 4096];

/// `tallyho bench reward`: one step of the reward pipeline for N envs, the unfused chain
/// (`reward chain`, twelve launches) and the fused kernel (`reward fused`, one launch),
/// eager and graph-replayed, on random step PnLs and positions (about 30% of the envs
/// trading). The `batch` column holds N.
pub fn bench_reward(gpu: &Gpu, opts: &BenchOptions) -> Result<Vec<BenchRow>> {
    use crate::reward::{RewardPath, RewardPipeline};
    use tallyho_oracle::reward::RewardConfig;
    let timing = Timing::of(opts)?;
    let counts = if opts.quick {
        &REWARD_COUNTS[..2]
    } else {
        &REWARD_COUNTS[..]
    };
    let mut rows = Vec::new();
    for &n in counts {
        let mut rng = ChaCha8Rng::seed_from_u64(SEED ^ n as u64);
        let pnl: Vec<f32> = (0..n).map(|_| rng.gen_range(-100.0..100.0)).collect();
        let position: Vec<i32> = (0..n)
            .map(|_| {
                if rng.gen_bool(0.3) {
                    rng.gen_range(-3..=3)
                } else {
                    0
                }
            })
            .collect();
        let (dr, dp) = (
            gpu.stream.clone_htod(&pnl)?,
            gpu.stream.clone_htod(&position)?,
        );
        let mut chain = RewardPipeline::new(gpu, &RewardConfig::default(), n)?;
        rows.extend(
            timing.both_modes(gpu, &mut chain, "reward unfused", 0, n, |c| {
                c.step(RewardPath::Unfused, &dr, &dp)
            })?,
        );
        rows.extend(
            timing.both_modes(gpu, &mut chain, "reward fused", 0, n, |c| {
                c.step(RewardPath::Fused, &dr, &dp)
            })?,
        );
        gpu.synchronize()?;
    }
    Ok(rows)
}

pub(crate) struct Timing {
    pub(crate) reps: usize,
    pub(crate) warmup: usize,
}

impl Timing {
    /// The repetitions and warm-up of `opts` (a quick run caps the repetitions; at least
    /// one warm-up call is made).
    pub(crate) fn of(opts: &BenchOptions) -> Result<Self> {
        if opts.reps == 0 {
            return Err(Error::Shape(
                "bench needs at least 1 repetition: raise --reps".into(),
            ));
        }
        let reps = if opts.quick {
            opts.reps.min(QUICK_REPS)
        } else {
            opts.reps
        };
        Ok(Timing {
            reps,
            warmup: opts.warmup.max(1),
        })
    }

    /// Time `work` eagerly, then captured once into a graph and replayed: two rows.
    pub(crate) fn both_modes<T>(
        &self,
        gpu: &Gpu,
        per: &mut T,
        op: &str,
        capacity: usize,
        batch: usize,
        mut work: impl FnMut(&mut T) -> Result<()>,
    ) -> Result<[BenchRow; 2]> {
        let row = |mode: &str, samples: Vec<f64>| BenchRow {
            op: op.to_string(),
            capacity,
            batch,
            mode: mode.to_string(),
            median_us: percentile(&samples, 0.5),
            p10_us: percentile(&samples, 0.1),
            p90_us: percentile(&samples, 0.9),
            reps: samples.len(),
            transitions_per_s: None,
            device_mib: None,
        };
        for _ in 0..self.warmup {
            work(per)?;
        }
        gpu.synchronize()?;
        let eager = time_us(gpu, self.reps, || work(per))?;

        // The one graph mechanism: its warm-up run, its capture, then replays.
        let (mut slot, binding) = (GraphSlot::new("bench"), Binding::of(&[]));
        for _ in 0..2 + self.warmup {
            slot.run(&gpu.stream, binding, || work(per))?;
        }
        gpu.synchronize()?;
        let replayed = time_us(gpu, self.reps, || {
            slot.run(&gpu.stream, binding, || work(per))
        })?;
        Ok([row("eager", eager), row("graph", replayed)])
    }
}

/// `reps` samples of `work` on `gpu.stream`, in microseconds between two CUDA events, sorted.
pub(crate) fn time_us(
    gpu: &Gpu,
    reps: usize,
    mut work: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let start = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = gpu.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        start.record(&gpu.stream)?;
        work()?;
        end.record(&gpu.stream)?;
        end.synchronize()?;
        samples.push(f64::from(start.elapsed_ms(&end)?) * 1e3);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples)
}

/// Linear interpolation between the closest ranks of sorted, non-empty `sorted`.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Fill `per` to capacity with random transitions, then give about 63% of the slots a random
/// priority (C / B random batches updated with `td`), so the sum tree is far from uniform.
fn fill_and_skew(per: &mut ReplayBuffer, td: &CudaSlice<f32>, rng: &mut ChaCha8Rng) -> Result<()> {
    let (capacity, batch) = (per.config().capacity, per.config().batch);
    let mut filled = 0;
    while filled < capacity {
        let n = MAX_INSERT.min(capacity - filled);
        per.insert_host(&random_transitions(rng, n))?;
        filled += n;
    }
    let c32 = capacity as u32;
    let mut indices = vec![0u32; batch];
    for _ in 0..capacity / batch {
        indices.iter_mut().for_each(|i| *i = rng.gen_range(0..c32));
        per.set_indices(&indices)?;
        per.update_priorities(td)?;
    }
    Ok(())
}

/// `n` transitions of random, non-zero content (discount 0 for about 5% of them, else gamma^k).
fn random_transitions(rng: &mut ChaCha8Rng, n: usize) -> Transitions {
    let mut t = Transitions::zeros(n, STATE_DIM);
    t.states
        .iter_mut()
        .chain(t.next_states.iter_mut())
        .for_each(|x| *x = rng.gen_range(-1.0..1.0));
    t.actions
        .iter_mut()
        .for_each(|a| *a = rng.gen_range(0..BRANCH_COUNT as i32));
    t.rewards
        .iter_mut()
        .for_each(|r| *r = rng.gen_range(-1.0..1.0));
    t.discounts
        .iter_mut()
        .for_each(|d| *d = crate::harness::parity::replay::random_discount(rng, 0.99, 3, 0.05));
    t
}

/// `n` random positive |td| values spanning four orders of magnitude.
fn random_td(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| 10f32.powf(rng.gen_range(-3.0..1.0)))
        .collect()
}

/// An aligned text table: one line per row, after a header.
pub fn format_table(rows: &[BenchRow]) -> String {
    let header = [
        "op",
        "capacity",
        "batch",
        "mode",
        "median_us",
        "p10_us",
        "p90_us",
        "reps",
        "trans/s",
        "dev_MiB",
    ];
    let cells: Vec<[String; 10]> = rows
        .iter()
        .map(|r| {
            [
                r.op.clone(),
                r.capacity.to_string(),
                r.batch.to_string(),
                r.mode.clone(),
                format!("{:.2}", r.median_us),
                format!("{:.2}", r.p10_us),
                format!("{:.2}", r.p90_us),
                r.reps.to_string(),
                r.transitions_per_s
                    .map_or("-".to_string(), |t| format!("{t:.3e}")),
                r.device_mib.map_or("-".to_string(), |m| format!("{m:.0}")),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let mut out = String::new();
    let mut line = |row: &[&str]| {
        let mut text = String::new();
        for (i, (c, w)) in row.iter().zip(widths).enumerate() {
            // Text columns (op, mode) left-aligned, numbers right-aligned.
            let sep = if i == 0 { "" } else { "  " };
            if i == 0 || i == 3 {
                let _ = write!(text, "{sep}{c:<w$}");
            } else {
                let _ = write!(text, "{sep}{c:>w$}");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &cells {
        line(&row.each_ref().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&s, 0.5), 2.5);
        assert_eq!(percentile(&s, 0.0), 1.0);
        assert_eq!(percentile(&s, 1.0), 4.0);
        assert!((percentile(&s, 0.1) - 1.3).abs() < 1e-12);
        assert_eq!(percentile(&[7.0], 0.9), 7.0);
    }

    #[test]
    fn table_has_a_header_and_one_aligned_line_per_row() {
        let row = |op: &str, mode: &str, median_us| BenchRow {
            op: op.into(),
            capacity: 1 << 20,
            batch: 1024,
            mode: mode.into(),
            median_us,
            p10_us: 1.0,
            p90_us: 123.456,
            reps: 100,
            transitions_per_s: None,
            device_mib: None,
        };
        let t = format_table(&[
            row("sample", "eager", 12.5),
            row("sample+gather+update", "graph", 3.25),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("op"));
        assert!(lines[2].starts_with("sample+gather+update   1048576"));
        assert_eq!(lines[1].len(), lines[2].len());
        assert!(lines[1].contains("12.50") && lines[2].contains("123.46"));
    }
}
