//! A training step's trace: every buffer a step writes, tagged with the stage that writes it
//! (each stage named after the kernel file that runs it on the device), in the order the
//! step runs the stages. Two paths that should agree (graph and eager, fused and unfused,
//! the GPU and this crate, two builds) are compared trace by trace, and where they part
//! first, the stage of the first buffer that differs is where the fault is: every buffer a
//! stage reads was written by a stage before it ([`first_divergence`]).
//!
//! The trace is taken after the step from the trainer's state and its [`StepRecord`]: one
//! update a step (only the last update's outputs survive a step). A buffer written by two
//! stages is the later one's, save where the earlier one's part can be told apart: the
//! priorities an update wrote are the leaves it sampled that this step's insert did not
//! overwrite.

use super::cpu::{OracleTrainer, StepRecord};
use crate::compare::{
    compare_bitwise, compare_exact, compare_f32, compare_f64, compare_rel_norm, Comparison,
};
use crate::tolerance::{Tolerance, EXACT};

/// The stages of a step in the order it runs them.
pub const STAGES: [&str; 12] = [
    "schedule",
    "state_gather",
    "acting",
    "env_step",
    "reward",
    "transition_assemble",
    "replay_sample",
    "qnet_loss",
    "optimizer",
    "replay_update_priorities",
    "target_sync",
    "replay_insert",
];

/// A planted fault, for tests of the divergence finder: from step `from_step` on, the first
/// element of `stage`'s output is moved by `delta` right after the stage runs, before any
/// later stage reads it. The stages that take one: [`Fault::STAGES`].
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    pub stage: &'static str,
    pub from_step: u64,
    pub delta: f32,
}

impl Fault {
    /// The stages a fault can be planted in, each at the output the next stage reads: the
    /// states, the acting Q-values, the step's PnL, the reward, the importance weights, the
    /// new priorities, the online parameters after Adam, the target after the sync.
    pub const STAGES: [&'static str; 8] = [
        "state_gather",
        "acting",
        "env_step",
        "reward",
        "replay_sample",
        "qnet_loss",
        "optimizer",
        "target_sync",
    ];

    /// A fault of `stage` (one of [`Fault::STAGES`]) from `from_step`, moving by `delta`.
    pub fn new(stage: &str, from_step: u64, delta: f32) -> Result<Fault, String> {
        let stage = Self::STAGES
            .iter()
            .copied()
            .find(|s| *s == stage)
            .ok_or_else(|| {
                format!(
                    "no fault can be planted in stage {stage:?}: give one of {}",
                    Self::STAGES.join(", ")
                )
            })?;
        Ok(Fault {
            stage,
            from_step,
            delta,
        })
    }

    /// Move `out`'s first element where the fault is `stage`'s and due at step `t`.
    pub fn apply(&self, t: u64, stage: &str, out: &mut [f32]) {
        if self.stage == stage && t >= self.from_step {
            if let Some(x) = out.first_mut() {
                *x += self.delta;
            }
        }
    }
}

/// A buffer's values in their own type.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    U32(Vec<u32>),
}

impl Values {
    /// Element `i` as a double (NaN past the end).
    pub fn at(&self, i: usize) -> f64 {
        match self {
            Values::F32(v) => v.get(i).map_or(f64::NAN, |&x| f64::from(x)),
            Values::F64(v) => v.get(i).copied().unwrap_or(f64::NAN),
            Values::I32(v) => v.get(i).map_or(f64::NAN, |&x| f64::from(x)),
            Values::U32(v) => v.get(i).map_or(f64::NAN, |&x| f64::from(x)),
        }
    }
}

/// One buffer of a step's trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Buffer {
    pub stage: &'static str,
    pub name: String,
    pub values: Values,
}

/// A step's buffers in stage order.
pub type Trace = Vec<Buffer>;

/// The trace of the step `o` just ran (module doc); None before its first step.
pub fn step_trace(o: &OracleTrainer) -> Option<Trace> {
    let r: &StepRecord = o.last.as_ref()?;
    let mut t = Trace::new();
    let mut put = |stage: &'static str, name: &str, values: Values| {
        t.push(Buffer {
            stage,
            name: name.to_string(),
            values,
        })
    };
    use Values::{F32, F64, I32, U32};
    put("schedule", "epsilon", F32(vec![r.epsilon]));
    put("schedule", "epsilon step", U32(vec![o.epsilon_step]));
    put("state_gather", "states", F32(r.states.clone()));
    put("acting", "q", F32(r.q.clone()));
    put("env_step", "actions", I32(r.actions.clone()));
    put("env_step", "pnl", F32(r.pnl.clone()));
    put("env_step", "next states", F32(r.next_states.clone()));
    put("env_step", "done", F32(r.done.clone()));
    put("env_step", "reason", I32(r.reason.clone()));
    let e = &o.env;
    put("env_step", "bar", U32(e.bar.clone()));
    put("env_step", "steps", U32(e.steps.clone()));
    put("env_step", "clock", U32(e.clock.clone()));
    put("env_step", "position", I32(e.position.clone()));
    put("env_step", "entry", F32(e.entry.clone()));
    put("env_step", "realized", F32(e.realized.clone()));
    put("env_step", "fees", F32(e.fees.clone()));
    put("env_step", "equity", F32(e.equity.clone()));
    put("reward", "reward", F32(r.reward.reward.clone()));
    put("reward", "trade done", F32(r.reward.done.clone()));
    put("reward", "global", F32(o.reward_global.to_words().to_vec()));
    let re = &o.reward_envs;
    put("reward", "positions", I32(re.prev_position.clone()));
    put(
        "reward",
        "steps since done",
        U32(re.steps_since_done.clone()),
    );
    put("reward", "outcome ema", F32(re.outcome_ema.clone()));
    put("reward", "dsr a", F32(re.dsr_a.clone()));
    put("reward", "dsr b", F32(re.dsr_b.clone()));
    let ring = &o.ring;
    put(
        "transition_assemble",
        "ring states",
        F32(ring.states.clone()),
    );
    put(
        "transition_assemble",
        "ring next states",
        F32(ring.next_states.clone()),
    );
    put(
        "transition_assemble",
        "ring actions",
        I32(ring.actions.clone()),
    );
    put(
        "transition_assemble",
        "ring rewards",
        F32(ring.rewards.clone()),
    );
    put(
        "transition_assemble",
        "ring reasons",
        I32(ring.reasons.clone()),
    );
    put(
        "transition_assemble",
        "ring counts",
        U32(ring.counts.clone()),
    );
    if let Some(x) = &r.emitted {
        put(
            "transition_assemble",
            "emitted states",
            F32(x.states.clone()),
        );
        put(
            "transition_assemble",
            "emitted next states",
            F32(x.next_states.clone()),
        );
        put(
            "transition_assemble",
            "emitted actions",
            I32(x.actions.clone()),
        );
        put(
            "transition_assemble",
            "emitted rewards",
            F32(x.rewards.clone()),
        );
        put(
            "transition_assemble",
            "emitted discounts",
            F32(x.discounts.clone()),
        );
    }
    if let Some(u) = r.updates.last() {
        put("replay_sample", "indices", U32(u.indices.clone()));
        put("replay_sample", "weights", F32(u.weights.clone()));
        put(
            "replay_sample",
            "sample step",
            U32(vec![o.replay.ctl.sample_step]),
        );
        put("qnet_loss", "loss", F64(vec![u.loss]));
        put("qnet_loss", "priorities", F32(u.td_abs.clone()));
        put("qnet_loss", "next actions", I32(u.next_actions.clone()));
        put("optimizer", "grad norm", F64(vec![u.grad_norm]));
        put("optimizer", "online", F32(o.online.clone()));
        put("optimizer", "adam m", F64(o.adam.m.clone()));
        put("optimizer", "adam v", F64(o.adam.v.clone()));
        put("optimizer", "adam step", U32(vec![o.adam.step]));
        let leaves = o.replay.cfg.leaves();
        let inserted = inserted_rows(o, r);
        let kept: Vec<f32> = u
            .indices
            .iter()
            .filter(|&&i| !inserted.contains(&(i as usize)))
            .filter_map(|&i| o.replay.tree.get(leaves + i as usize).copied())
            .collect();
        put("replay_update_priorities", "priorities written", F32(kept));
        put(
            "replay_update_priorities",
            "max priority",
            F32(vec![o.replay.ctl.max_priority]),
        );
        put("target_sync", "target", F32(o.target.clone()));
    }
    let store = &o.replay.store;
    put("replay_insert", "replay states", F32(store.states.clone()));
    put(
        "replay_insert",
        "replay next states",
        F32(store.next_states.clone()),
    );
    put(
        "replay_insert",
        "replay actions",
        I32(store.actions.clone()),
    );
    put(
        "replay_insert",
        "replay rewards",
        F32(store.rewards.clone()),
    );
    put(
        "replay_insert",
        "replay discounts",
        F32(store.discounts.clone()),
    );
    put("replay_insert", "tree", F32(o.replay.tree.clone()));
    put(
        "replay_insert",
        "cursor, size",
        U32(vec![o.replay.ctl.cursor, o.replay.ctl.size]),
    );
    Some(t)
}

/// The replay rows this step's insert wrote (none where it inserted nothing).
fn inserted_rows(o: &OracleTrainer, r: &StepRecord) -> std::collections::BTreeSet<usize> {
    let rows = r.emitted.as_ref().map_or(0, |t| t.rewards.len());
    let cap = o.replay.cfg.capacity;
    if rows == 0 || cap == 0 {
        return Default::default();
    }
    let end = o.replay.ctl.cursor as usize;
    (0..rows.min(cap))
        .map(|k| (end + cap - 1 - k) % cap)
        .collect()
}

/// Where two traces of one step first part: the stage, the buffer, the first element out
/// of its bound, both values and the bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Divergence {
    pub step: u64,
    pub stage: &'static str,
    pub buffer: String,
    pub element: usize,
    pub a: f64,
    pub b: f64,
    pub error: f64,
    pub bound: f64,
    pub tolerance: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {}, stage {}, buffer {:?}, element {}: {:e} against {:e}, error {:e} > bound {:e} ({})",
            self.step, self.stage, self.buffer, self.element, self.a, self.b, self.error, self.bound, self.tolerance
        )
    }
}

/// Compare two traces of step `step` buffer by buffer in stage order, each under the
/// tolerance `bound` gives it (None: bitwise for floats, exact for integers), and return
/// where they first part. A buffer in one trace only, or of another type, parts at element 0.
pub fn first_divergence(
    step: u64,
    a: &[Buffer],
    b: &[Buffer],
    bound: impl Fn(&Buffer) -> Option<Tolerance>,
) -> Option<Divergence> {
    let mut order: Vec<&Buffer> = a.iter().collect();
    order.sort_by_key(|x| {
        STAGES
            .iter()
            .position(|s| *s == x.stage)
            .unwrap_or(STAGES.len())
    });
    for x in order {
        let Some(y) = b.iter().find(|y| y.stage == x.stage && y.name == x.name) else {
            return Some(missing(step, x, "the other trace has no such buffer"));
        };
        let tol = bound(x);
        let c = compare_buffers(x, y, tol);
        if let Some((element, got, want, error, bound)) = c.first_failure {
            // A bitwise comparison reports the bits: give the values instead.
            let (a, b) = match tol {
                None => (x.values.at(element), y.values.at(element)),
                Some(_) => (got, want),
            };
            return Some(Divergence {
                step,
                stage: x.stage,
                buffer: x.name.clone(),
                element,
                a,
                b,
                error: if tol.is_none() { (a - b).abs() } else { error },
                bound,
                tolerance: c.tolerance.describe(),
            });
        }
    }
    b.iter()
        .find(|y| !a.iter().any(|x| x.stage == y.stage && x.name == y.name))
        .map(|y| missing(step, y, "the first trace has no such buffer"))
}

fn missing(step: u64, x: &Buffer, why: &str) -> Divergence {
    Divergence {
        step,
        stage: x.stage,
        buffer: format!("{} ({why})", x.name),
        element: 0,
        a: f64::NAN,
        b: f64::NAN,
        error: f64::INFINITY,
        bound: 0.0,
        tolerance: "present in both".into(),
    }
}

/// One buffer of two traces compared: floats under `tol` (None: bitwise), integers exactly.
pub fn compare_buffers(x: &Buffer, y: &Buffer, tol: Option<Tolerance>) -> Comparison {
    use Values::*;
    let name = format!("{}: {}", x.stage, x.name);
    let wide = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
    match (&x.values, &y.values, tol) {
        (F32(a), F32(b), None) => compare_bitwise(&name, a, b),
        (F32(a), F32(b), Some(t)) if t.norm => compare_rel_norm(&name, a, &wide(b), t),
        (F32(a), F32(b), Some(t)) => compare_f32(&name, a, &wide(b), t),
        (F64(a), F64(b), None) => compare_f64(&name, a, b, EXACT),
        (F64(a), F64(b), Some(t)) if t.norm => {
            let narrow: Vec<f32> = a.iter().map(|&v| v as f32).collect();
            compare_rel_norm(&name, &narrow, b, t)
        }
        (F64(a), F64(b), Some(t)) => compare_f64(&name, a, b, t),
        (I32(a), I32(b), _) => compare_exact(&name, a, b),
        (U32(a), U32(b), _) => compare_exact(&name, a, b),
        _ => compare_exact(&format!("{name} (of another type)"), &[1u32], &[0u32]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(stage: &'static str, name: &str, values: Values) -> Buffer {
        Buffer {
            stage,
            name: name.into(),
            values,
        }
    }

    #[test]
    fn the_first_divergence_is_the_earliest_stage_s_first_element_out_of_bound() {
        let a = vec![
            buffer("reward", "reward", Values::F32(vec![1.0, 2.0, 3.0])),
            buffer("acting", "q", Values::F32(vec![0.5, 0.25])),
            buffer("replay_sample", "indices", Values::U32(vec![7, 9])),
        ];
        assert_eq!(first_divergence(3, &a, &a, |_| None), None);
        // Two buffers differ; the acting stage runs first, whatever the traces' order.
        let mut b = a.clone();
        b[0].values = Values::F32(vec![1.0, 2.5, 3.0]);
        b[1].values = Values::F32(vec![0.5, 0.75]);
        let d = first_divergence(3, &a, &b, |_| None).unwrap();
        assert_eq!(
            (d.step, d.stage, d.buffer.as_str(), d.element),
            (3, "acting", "q", 1)
        );
        assert_eq!((d.a, d.b, d.error), (0.25, 0.75, 0.5));
        // Within a tolerance the acting difference is no divergence; the reward's is.
        let loose = crate::tolerance::Tolerance {
            atol: 1.0,
            rtol: 0.0,
            exact: false,
            norm: false,
            reason: "test",
        };
        let d = first_divergence(3, &a, &b, |x| (x.stage == "acting").then_some(loose)).unwrap();
        assert_eq!((d.stage, d.element, d.a, d.b), ("reward", 1, 2.0, 2.5));
        // An integer buffer differs exactly; a buffer one trace lacks parts too.
        let mut c = a.clone();
        c[2].values = Values::U32(vec![7, 8]);
        let d = first_divergence(0, &a, &c, |_| None).unwrap();
        assert_eq!(
            (d.stage, d.element, d.a, d.b),
            ("replay_sample", 1, 9.0, 8.0)
        );
        let d = first_divergence(0, &a, &a[..2], |_| None).unwrap();
        assert_eq!(d.stage, "replay_sample");
        assert!(
            d.buffer.contains("the other trace has no such buffer"),
            "{}",
            d.buffer
        );
    }
}
