//! A planted fault in the CUDA trainer, for tests of `tallyho diverge` only: from step k on,
//! the first element of one stage's output buffer is moved right after the stage's launches
//! ([`Fault`]: the stages are the oracle trainer's). The element is read and written from
//! the host between launches, so a trainer with a fault runs its steps eagerly; no run of
//! `tallyho train` plants one.

use super::CudaTrainer;
use crate::error::{Error, Result};
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;
use tallyho_oracle::trainer::trace::Fault;

/// Add `delta` to `buf[0]` through `stream` (the device idle before and after).
fn nudge(stream: &Arc<CudaStream>, buf: &mut CudaSlice<f32>, delta: f32) -> Result<()> {
    let mut v = stream.clone_dtoh(&buf.slice(0..1))?;
    v[0] += delta;
    stream.memcpy_htod(&v, &mut buf.slice_mut(0..1))?;
    Ok(stream.synchronize()?)
}

impl CudaTrainer {
    /// Plant `fault` (None: take it away). A trainer with a fault steps eagerly.
    pub fn plant_fault(&mut self, fault: Option<Fault>) -> Result<()> {
        if fault.is_some() {
            self.graphs = false;
        }
        self.fault = fault;
        Ok(())
    }

    /// After `stage`'s launches: move its output where the planted fault is due.
    pub(super) fn planted(&mut self, stage: &str) -> Result<()> {
        let Some(f) = self.fault.clone() else {
            return Ok(());
        };
        // step_kind counted this step before running it.
        let t = self.steps.saturating_sub(1);
        if f.stage != stage || t < f.from_step {
            return Ok(());
        }
        self.learner.synchronize()?;
        self.main.synchronize()?;
        let s = self.main.clone();
        match stage {
            "state_gather" => nudge(&s, &mut self.env.states, f.delta),
            "acting" => nudge(&s, &mut self.acting.q, f.delta),
            "env_step" => nudge(&s, &mut self.env.pnl, f.delta),
            "reward" => nudge(&s, &mut self.reward.reward, f.delta),
            "replay_sample" => nudge(&s, &mut self.replay.weights, f.delta),
            "qnet_loss" => nudge(&s, &mut self.net.priorities, f.delta),
            "optimizer" | "target_sync" => {
                let (mut online, mut target) = self.net.params()?;
                let moved = if stage == "optimizer" {
                    &mut online
                } else {
                    &mut target
                };
                if let Some(x) = moved.first_mut() {
                    *x += f.delta;
                }
                self.net.set_params(&online, &target)?;
                self.learner.synchronize()?;
                Ok(self.main.synchronize()?)
            }
            other => Err(Error::Train(format!(
                "no fault can be planted in stage {other:?}: give one of {}",
                Fault::STAGES.join(", ")
            ))),
        }
    }
}
