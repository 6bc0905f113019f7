//! The experience step: for N envs, state gather, the online network's acting forward, then
//! each env's action select, fill and barriers (with auto-reset). It sits above both the env
//! and the Q-network, and owns what joins them: the one-launch `experience_step` kernel
//! (cuda/experience_step.cu: a block gathers its envs' states, runs the acting forward of
//! cuda/common/qnet_act.cuh on them and steps them), and the verification path it must
//! equal bit for bit, the three unfused launches `state_gather` -> [`QNet::act`] ->
//! `env_step`. Spec: tallyho_oracle::env `state_gather`, qnet `forward` and `head_q`, env
//! `env_step`, in a row.
//!
//! Nothing here allocates after [`Experience::new`]; every per-step value (each env's clock,
//! epsilon) lives in device memory, so [`Experience::step_graphed`] captures the step once.

use crate::env::{ActEnv, Env};
use crate::error::{Error, Result};
use crate::graph::{Binding, GraphSlot, Phase};
use crate::qnet::act::{ForwardEntries, ForwardKernel};
use crate::qnet::{Acting, QNet};
use crate::runtime::{entry, Gpu, Programmatic};
use cudarc::driver::{CudaEvent, CudaStream};
use std::sync::Arc;

/// `experience_step`'s entry points, one per feed and rows per block (as qnet_act's).
const EXPERIENCE_STEP: ForwardEntries = ForwardEntries {
    rows16: entry::experience_step::EXPERIENCE_STEP_ROWS16,
    rows32: entry::experience_step::EXPERIENCE_STEP_ROWS32,
    aligned_rows16: entry::experience_step::EXPERIENCE_STEP_ALIGNED_ROWS16,
    aligned_rows32: entry::experience_step::EXPERIENCE_STEP_ALIGNED_ROWS32,
};

/// Which launches make the experience step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExperiencePath {
    /// `experience_step` where the network acts on N rows by `qnet_act`; else the unfused launches.
    Fused,
    /// Always the three unfused launches (`state_gather`, [`QNet::act`], `env_step`): the
    /// verification path that checks the one launch, stage by stage.
    Unfused,
}

/// The experience step of one env set and one network: the one-launch kernel's entry points
/// (loaded for the network's plans), the path, and the step's graph slot.
pub struct Experience {
    kernel: ForwardKernel,
    /// Hand-overs between the env's stream and the network's, where they differ (the
    /// unfused path's layer-by-layer acting runs on the network's stream).
    to_net: CudaEvent,
    to_env: CudaEvent,
    /// The pair it was made for: the env's states address, the network's parameter and
    /// head-matrix addresses, and whether its weights take the aligned feed (the entry
    /// points loaded and the widths checked hold for that pair only).
    made_for: [u64; 4],
    path: ExperiencePath,
    graph: GraphSlot,
}

/// What an [`Experience`] checks a step's env (as `act_env`) and network against.
fn pair_of(act_env: &ActEnv, net: &QNet) -> [u64; 4] {
    let (params, heads) = net.act_addresses();
    [
        act_env.states_address(),
        params,
        heads,
        u64::from(net.act_aligned()),
    ]
}

/// `to` waits for the work queued on `from` so far (nothing where they are one stream).
fn hand_over(event: &CudaEvent, from: &Arc<CudaStream>, to: &Arc<CudaStream>) -> Result<()> {
    if !Arc::ptr_eq(from, to) {
        event.record(from)?;
        to.wait(event)?;
    }
    Ok(())
}

impl Experience {
    /// The experience step of `env`'s envs acting by `net`: the env's state width and
    /// actions must be the network's.
    pub fn new(gpu: &Gpu, env: &Env, net: &QNet) -> Result<Experience> {
        let (s, a) = net.io_widths();
        let e = env.act_env();
        if e.state_dim() != s || e.actions() != a {
            return Err(Error::Shape(format!(
                "envs of state width {} and {} actions for a network of {s} inputs and {a} actions: build the network from the env's state width and branches",
                e.state_dim(),
                e.actions(),
            )));
        }
        Ok(Experience {
            kernel: net.load_forward_kernel(gpu, &EXPERIENCE_STEP)?,
            to_net: gpu.ctx.new_event(None)?,
            to_env: gpu.ctx.new_event(None)?,
            made_for: pair_of(&e, net),
            path: ExperiencePath::Fused,
            graph: GraphSlot::new("experience_step"),
        })
    }

    /// Choose the path of the steps that follow (not of a graph already captured).
    pub fn set_path(&mut self, path: ExperiencePath) {
        self.path = path;
    }

    /// Whether a step of `env` by `net` is the one launch `experience_step`.
    pub fn in_one_launch(&self, env: &Env, net: &QNet) -> bool {
        self.path == ExperiencePath::Fused && net.act_block_rows(env.config().envs).is_some()
    }

    /// One experience timestep, eagerly: epsilon's schedule where one anneals it
    /// (`schedule_epsilon`), then the one launch where [`Experience::in_one_launch`], else the
    /// three unfused launches, with the same outputs bit for bit. No allocation, no host copy.
    pub fn step(&self, env: &mut Env, net: &QNet, acting: &mut Acting) -> Result<()> {
        let envs = env.config().envs;
        if acting.rows() != envs {
            return Err(Error::Shape(format!(
                "acting buffers of {} rows for {envs} envs: make them with QNet::acting({envs})",
                acting.rows()
            )));
        }
        let act_env = env.act_env();
        if pair_of(&act_env, net) != self.made_for {
            return Err(Error::Shape(
                "an Experience steps the env and network it was made with (its widths are checked and its entry points loaded for them): make one per pair with Experience::new".into(),
            ));
        }
        env.epsilon.advance()?;
        if self.path == ExperiencePath::Fused {
            if let Some((_, launch)) = net.act_launch(envs)? {
                let mut l = Programmatic::new(env.stream(), launch.entry(&self.kernel)?);
                l.value(&act_env);
                launch.push_network(&mut l);
                match acting.y_if_kept() {
                    Some(y) => l.output(y),
                    None => l.null(),
                };
                l.output(&mut acting.q);
                // SAFETY: follows experience_step_{aligned_,}rows{R}'s signature (ActEnv by
                // value, the network's arguments of push_network, y [envs x ow] or null, q
                // [envs x A]): `act_env` holds the device addresses of env's market,
                // portfolios and outputs, sized for its envs; new() checked that the
                // network's state width and actions are the env's, for this very pair
                // (made_for, checked above); acting's buffers hold
                // envs rows (checked above); the entry point was loaded for this plan's rows
                // per block with its shared memory (QNet::load_forward_kernel); it calls
                // grid_wait_for_prior before it touches global memory.
                return unsafe { l.launch(launch.config()) };
            }
        }
        env.state_gather()?;
        hand_over(&self.to_net, env.stream(), net.stream())?;
        net.act(&env.x, acting)?;
        hand_over(&self.to_env, net.stream(), env.stream())?;
        env.env_step(&acting.q)
    }

    /// [`Experience::step`] through the step's graph slot: eager once, then captured, then
    /// replayed. The env, network and acting buffers must stay the same (the binding holds
    /// their device addresses).
    pub fn step_graphed(&mut self, env: &mut Env, net: &QNet, acting: &mut Acting) -> Result<()> {
        let stream: Arc<_> = env.stream().clone();
        let (e, (params, heads)) = (env.act_env(), net.act_addresses());
        // Everything the captured launches read or write, and every switch that changes
        // which launches they are: a replay over anything else is refused.
        let path = [
            self.in_one_launch(env, net) as u64,
            net.act_block_rows(e.envs()).unwrap_or(0) as u64,
            net.tf32() as u64,
        ];
        let mut words = [0u64; 26 + 4 + 2 + 5 + 3];
        let parts: [&[u64]; 5] = [
            &e.addresses(),
            &env.epsilon.binding_words(),
            &[params, heads],
            &acting.addresses(&stream),
            &path,
        ];
        for (w, v) in words.iter_mut().zip(parts.into_iter().flatten()) {
            *w = *v;
        }
        GraphSlot::run_on(
            self,
            |x| &mut x.graph,
            &stream,
            Binding::of(&words),
            |x| x.step(env, net, acting),
        )
    }

    pub fn graph_phase(&self) -> Phase {
        self.graph.phase()
    }
}
