//! GPU-vs-oracle checks of n-step transition assembly (spec: tallyho_oracle::transition):
//! random steps of N envs with episode ends of every reason, `transition_assemble` launched
//! once a step against the oracle's ring, every output and the whole ring bitwise (the same
//! float operations in the same order on both sides).

use super::merge_step;
use super::replay::compare_transitions;
use crate::error::{Error, Result};
use crate::graph::{Binding, GraphSlot};
use crate::runtime::Gpu;
use crate::transition::{poison_rows, DeviceStep, TransitionAssembler};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::action::{ACTION_BRANCHES, BRANCH_COUNT};
use tallyho_oracle::replay::Transitions;
use tallyho_oracle::tolerance::TRANSITION;
use tallyho_oracle::transition::{
    transition_assemble, StepInputs, TransitionConfig, TransitionRing,
};
use tallyho_oracle::{compare_bitwise, compare_exact, Comparison};

/// Sizes, seed and episode-end rate of one assembly case.
#[derive(Clone, Debug, PartialEq)]
pub struct TransitionCase {
    pub envs: usize,
    pub state_dim: usize,
    pub n: usize,
    pub gamma: f32,
    /// Steps pushed.
    pub steps: usize,
    /// Probability that a step ends its episode (each of the four reasons equally likely).
    pub end_rate: f64,
    pub seed: u64,
}

impl TransitionCase {
    pub fn config(&self) -> TransitionConfig {
        TransitionConfig {
            n: self.n,
            gamma: self.gamma,
        }
    }

    /// A random case: N 1..=300 (not a multiple of the block), S 1..=12, n 1..=6, gamma in
    /// [0.5, 1], 1..=40 steps, an episode end every 2 to 20 steps on average.
    pub fn random(rng: &mut impl Rng) -> TransitionCase {
        TransitionCase {
            envs: rng.gen_range(1..=300),
            state_dim: rng.gen_range(1..=12),
            n: rng.gen_range(1..=6),
            gamma: rng.gen_range(0.5..=1.0),
            steps: rng.gen_range(1..=40),
            end_rate: rng.gen_range(0.05..0.5),
            seed: rng.gen(),
        }
    }
}

/// One step of every env, on the host: what [`StepInputs`] borrows.
#[derive(Clone, Debug, PartialEq)]
pub struct HostStep {
    pub states: Vec<f32>,
    pub actions: Vec<i32>,
    pub rewards: Vec<f32>,
    pub next_states: Vec<f32>,
    pub reasons: Vec<i32>,
}

impl HostStep {
    pub fn inputs(&self) -> StepInputs<'_> {
        StepInputs {
            states: &self.states,
            actions: &self.actions,
            rewards: &self.rewards,
            next_states: &self.next_states,
            reasons: &self.reasons,
        }
    }
}

/// A random step of `envs` envs: states in [-2, 2), actions in their branch ranges, rewards
/// in [-1, 1), a reason 1..=4 with probability `end_rate` (uniform over the four), else 0.
pub fn random_step(rng: &mut impl Rng, envs: usize, state_dim: usize, end_rate: f64) -> HostStep {
    let mut uniform = |n: usize, lo: f32, hi: f32| -> Vec<f32> {
        (0..n).map(|_| rng.gen_range(lo..hi)).collect()
    };
    let states = uniform(envs * state_dim, -2.0, 2.0);
    let next_states = uniform(envs * state_dim, -2.0, 2.0);
    let rewards = uniform(envs, -1.0, 1.0);
    let actions = (0..envs * BRANCH_COUNT)
        .map(|k| rng.gen_range(0..ACTION_BRANCHES[k % BRANCH_COUNT] as i32))
        .collect();
    let reasons = (0..envs)
        .map(|_| {
            if rng.gen_bool(end_rate) {
                rng.gen_range(1..=4)
            } else {
                0
            }
        })
        .collect();
    HostStep {
        states,
        actions,
        rewards,
        next_states,
        reasons,
    }
}

/// The steps of a case, in order.
pub fn case_steps(case: &TransitionCase) -> Vec<HostStep> {
    let mut rng = ChaCha8Rng::seed_from_u64(case.seed);
    (0..case.steps)
        .map(|_| random_step(&mut rng, case.envs, case.state_dim, case.end_rate))
        .collect()
}

/// The declared tolerance of the stage on each comparison (all of them bitwise).
fn declared(c: Vec<Comparison>) -> Vec<Comparison> {
    c.into_iter()
        .map(|c| Comparison {
            tolerance: TRANSITION,
            ..c
        })
        .collect()
}

/// The ring compared bitwise, field by field.
pub fn compare_rings(got: &TransitionRing, want: &TransitionRing) -> Vec<Comparison> {
    declared(vec![
        compare_bitwise("ring states", &got.states, &want.states),
        compare_bitwise("ring next_states", &got.next_states, &want.next_states),
        compare_exact("ring actions", &got.actions, &want.actions),
        compare_bitwise("ring rewards", &got.rewards, &want.rewards),
        compare_exact("ring reasons", &got.reasons, &want.reasons),
        compare_exact("ring counts", &got.counts, &want.counts),
    ])
}

/// Device copies of one step's inputs, allocated once and refilled each step.
struct DeviceInputs {
    states: cudarc::driver::CudaSlice<f32>,
    actions: cudarc::driver::CudaSlice<i32>,
    rewards: cudarc::driver::CudaSlice<f32>,
    next_states: cudarc::driver::CudaSlice<f32>,
    reasons: cudarc::driver::CudaSlice<i32>,
}

impl DeviceInputs {
    fn alloc(gpu: &Gpu, envs: usize, state_dim: usize) -> Result<Self> {
        let s = &gpu.stream;
        Ok(DeviceInputs {
            states: s.alloc_zeros(envs * state_dim)?,
            actions: s.alloc_zeros(envs * BRANCH_COUNT)?,
            rewards: s.alloc_zeros(envs)?,
            next_states: s.alloc_zeros(envs * state_dim)?,
            reasons: s.alloc_zeros(envs)?,
        })
    }

    fn fill(&mut self, gpu: &Gpu, h: &HostStep) -> Result<()> {
        let s = &gpu.stream;
        s.memcpy_htod(&h.states, &mut self.states)?;
        s.memcpy_htod(&h.actions, &mut self.actions)?;
        s.memcpy_htod(&h.rewards, &mut self.rewards)?;
        s.memcpy_htod(&h.next_states, &mut self.next_states)?;
        s.memcpy_htod(&h.reasons, &mut self.reasons)?;
        Ok(())
    }

    fn step(&self) -> DeviceStep<'_> {
        DeviceStep {
            states: &self.states,
            actions: &self.actions,
            rewards: &self.rewards,
            next_states: &self.next_states,
            reasons: &self.reasons,
        }
    }
}

/// What one launch left: its output rows (the poison where it emitted nothing), whether the
/// host expected rows, and the ring after it.
pub struct GpuStep {
    pub emitted: bool,
    pub out: Transitions,
    pub ring: TransitionRing,
}

/// `transition_assemble` on the GPU from `ring`, one launch per step of `steps`, each on
/// poisoned output rows.
pub fn gpu_steps(gpu: &Gpu, ring: &TransitionRing, steps: &[HostStep]) -> Result<Vec<GpuStep>> {
    let mut asm = TransitionAssembler::new(gpu, &ring.cfg, ring.envs, ring.state_dim)?;
    asm.upload_ring(ring)?;
    let mut inputs = DeviceInputs::alloc(gpu, ring.envs, ring.state_dim)?;
    let mut out = Vec::with_capacity(steps.len());
    for h in steps {
        inputs.fill(gpu, h)?;
        asm.poison_out()?;
        let emitted = asm.assemble(&inputs.step())?;
        out.push(GpuStep {
            emitted,
            out: asm.download_out()?,
            ring: asm.download_ring()?,
        });
    }
    Ok(out)
}

/// The oracle's rows (None where it emits nothing) and ring after each of `steps` from `ring`.
pub fn oracle_steps(
    ring: &TransitionRing,
    steps: &[HostStep],
) -> Result<Vec<(Option<Transitions>, TransitionRing)>> {
    let mut r = ring.clone();
    steps
        .iter()
        .map(|h| {
            let rows = transition_assemble(&mut r, &h.inputs())
                .map_err(|e| Error::Shape(e.to_string()))?;
            Ok((rows, r.clone()))
        })
        .collect()
}

/// One launch's outputs against the oracle's: the rows bitwise where the oracle emitted (and
/// the host said so), the poison untouched where it did not; the ring bitwise.
pub fn compare_step(
    got: &GpuStep,
    want: &(Option<Transitions>, TransitionRing),
) -> Vec<Comparison> {
    let mut c = vec![compare_exact(
        "emitted",
        &[u32::from(got.emitted)],
        &[u32::from(want.0.is_some())],
    )];
    match &want.0 {
        Some(rows) => c.extend(compare_transitions(&got.out, rows)),
        None => {
            let poison = poison_rows(got.ring.envs, got.ring.state_dim);
            c.extend(
                compare_transitions(&got.out, &poison)
                    .into_iter()
                    .map(|mut x| {
                        x.output = format!("{} (unwritten before step n - 1)", x.output);
                        x
                    }),
            );
        }
    }
    c.extend(compare_rings(&got.ring, &want.1));
    declared(c)
}

/// `transition_assemble` from `ring` over `steps` against the oracle, every step: one row
/// per output across the steps, a failing one named with its first failing step.
pub fn check_transition_assemble_on(
    gpu: &Gpu,
    ring: &TransitionRing,
    steps: &[HostStep],
) -> Result<Vec<Comparison>> {
    let got = gpu_steps(gpu, ring, steps)?;
    let want = oracle_steps(ring, steps)?;
    let mut out = Vec::new();
    for (t, (g, w)) in got.iter().zip(&want).enumerate() {
        merge_step(&mut out, t, compare_step(g, w));
    }
    Ok(out)
}

/// A case from an empty ring.
pub fn check_transition_assemble(gpu: &Gpu, case: &TransitionCase) -> Result<Vec<Comparison>> {
    let ring = TransitionRing::new(case.envs, case.state_dim, case.n, case.gamma)?;
    check_transition_assemble_on(gpu, &ring, &case_steps(case))
}

/// `transition_assemble` through a [`GraphSlot`] (eager, captured, then replayed: no launch
/// argument changes from step to step) against eager launches on the same inputs: the rows
/// and the ring bitwise equal at every step, and the eager side against the oracle.
pub fn check_transition_graph(gpu: &Gpu, case: &TransitionCase) -> Result<Vec<Comparison>> {
    let ring = TransitionRing::new(case.envs, case.state_dim, case.n, case.gamma)?;
    let steps = case_steps(case);
    let cfg = case.config();
    let mut eager = TransitionAssembler::new(gpu, &cfg, case.envs, case.state_dim)?;
    let mut graphed = TransitionAssembler::new(gpu, &cfg, case.envs, case.state_dim)?;
    let mut inputs = DeviceInputs::alloc(gpu, case.envs, case.state_dim)?;
    let mut slot = GraphSlot::new("transition_assemble");
    let want = oracle_steps(&ring, &steps)?;
    let mut out = Vec::new();
    for (t, (h, w)) in steps.iter().zip(&want).enumerate() {
        inputs.fill(gpu, h)?;
        let emitted = eager.assemble(&inputs.step())?;
        let s = &gpu.stream;
        let step = inputs.step();
        let mut words = graphed.addresses().to_vec();
        words.extend([
            crate::graph::address(s, step.states),
            crate::graph::address(s, step.actions),
            crate::graph::address(s, step.rewards),
            crate::graph::address(s, step.next_states),
            crate::graph::address(s, step.reasons),
        ]);
        slot.run(s, Binding::of(&words), || {
            graphed.assemble(&step).map(|_| ())
        })?;
        let (e_out, g_out) = (eager.download_out()?, graphed.download_out()?);
        let (e_ring, g_ring) = (eager.download_ring()?, graphed.download_ring()?);
        let mut c: Vec<Comparison> = compare_transitions(&g_out, &e_out)
            .into_iter()
            .map(|mut x| {
                x.output = format!("{} (graph vs eager)", x.output);
                x
            })
            .collect();
        c.extend(compare_rings(&g_ring, &e_ring).into_iter().map(|mut x| {
            x.output = format!("{} (graph vs eager)", x.output);
            x
        }));
        if w.0.is_some() {
            c.extend(compare_step(
                &GpuStep {
                    emitted,
                    out: e_out,
                    ring: e_ring,
                },
                w,
            ));
        } else {
            c.extend(compare_rings(&e_ring, &w.1));
        }
        merge_step(&mut out, t, c);
    }
    let replayed = slot.phase() == crate::graph::Phase::Replay || steps.len() < 3;
    out.push(compare_exact(
        "graph replayed from step 2 on",
        &[u32::from(replayed)],
        &[1],
    ));
    Ok(out)
}
