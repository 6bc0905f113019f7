//! The CUDA trainer's state read back into the oracle trainer's fields (comparisons: the
//! oracle steps from the GPU's state; checkpoints). Host reads: never inside a step.

use super::CudaTrainer;
use crate::error::Result;
use tallyho_oracle::optimizer::AdamState;
use tallyho_oracle::trainer::OracleTrainer;

impl CudaTrainer {
    /// Overwrite `o`'s training state (envs, reward state, n-step ring, replay, both
    /// networks, Adam, the epsilon counter) with the device's; its config, market and
    /// metric sums are left alone. Synchronizes.
    pub fn download_into(&self, o: &mut OracleTrainer) -> Result<()> {
        self.synchronize()?;
        o.env = self.env.download_state()?;
        (o.reward_envs, o.reward_global) = self.reward.download_state()?;
        o.ring = self.transition.download_ring()?;
        o.replay = self.replay.download_state()?;
        (o.online, o.target) = self.net.params()?;
        let s = &self.net.opt;
        let stream = self.env.stream();
        let widen = |v: Vec<f32>| v.into_iter().map(f64::from).collect::<Vec<f64>>();
        o.adam = AdamState {
            m: widen(stream.clone_dtoh(&s.m)?),
            v: widen(stream.clone_dtoh(&s.v)?),
            step: s.ctl()?.step,
        };
        o.epsilon_step = self.env.epsilon.read_step()?;
        Ok(())
    }
}
