//! Verification read-back and uploads: the env's state and outputs to and from the host
//! (tests and fixtures; each call copies and synchronises, never on the hot path).

use super::*;

impl Env {
    /// Overwrite the portfolios (tests, fixtures); bars must lie inside the split.
    pub fn upload_state(&mut self, st: &EnvState) -> Result<()> {
        let n = self.cfg.envs;
        let lens = st.field_lens();
        if lens.iter().any(|&l| l != n) {
            return Err(Error::Shape(format!(
                "an env state with field lengths {lens:?} for an Env of {n} envs"
            )));
        }
        if let Some(b) = st
            .bar
            .iter()
            .find(|&&b| b < self.split.lo || b + 1 >= self.split.hi)
        {
            return Err(Error::Shape(format!(
                "env bar {b} is outside the split's start range [{}, {}): it needs a next bar",
                self.split.lo,
                self.split.hi - 1
            )));
        }
        let (s, d) = (&self.stream, &mut self.st);
        s.memcpy_htod(&st.bar, &mut d.bar)?;
        s.memcpy_htod(&st.steps, &mut d.steps)?;
        s.memcpy_htod(&st.clock, &mut d.clock)?;
        s.memcpy_htod(&st.position, &mut d.position)?;
        s.memcpy_htod(&st.entry, &mut d.entry)?;
        s.memcpy_htod(&st.realized, &mut d.realized)?;
        s.memcpy_htod(&st.fees, &mut d.fees)?;
        s.memcpy_htod(&st.equity, &mut d.equity)?;
        Ok(())
    }

    pub fn download_state(&self) -> Result<EnvState> {
        let (s, d) = (&self.stream, &self.st);
        Ok(EnvState {
            bar: s.clone_dtoh(&d.bar)?,
            steps: s.clone_dtoh(&d.steps)?,
            clock: s.clone_dtoh(&d.clock)?,
            position: s.clone_dtoh(&d.position)?,
            entry: s.clone_dtoh(&d.entry)?,
            realized: s.clone_dtoh(&d.realized)?,
            fees: s.clone_dtoh(&d.fees)?,
            equity: s.clone_dtoh(&d.equity)?,
        })
    }

    /// Upload actions `[N x 3]` (tests, fixtures: `fill_step` on chosen actions).
    pub fn upload_actions(&mut self, actions: &[i32]) -> Result<()> {
        if actions.len() != self.cfg.envs * 3 {
            return Err(Error::Shape(format!(
                "{} actions for {} envs x 3 branches",
                actions.len(),
                self.cfg.envs
            )));
        }
        Ok(self.stream.memcpy_htod(actions, &mut self.actions)?)
    }

    /// Upload each env's net realized PnL before its fill `[N]` (tests, fixtures: `barriers`
    /// alone measures the step's PnL from it).
    pub fn upload_net_before(&mut self, net_before: &[f32]) -> Result<()> {
        if net_before.len() != self.cfg.envs {
            return Err(Error::Shape(format!(
                "{} net_before values for {} envs: give one per env",
                net_before.len(),
                self.cfg.envs
            )));
        }
        Ok(self.stream.memcpy_htod(net_before, &mut self.net_before)?)
    }

    pub fn read_states(&self) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&self.states)?)
    }

    pub fn read_x(&self) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&self.x)?)
    }

    pub fn read_actions(&self) -> Result<Vec<i32>> {
        Ok(self.stream.clone_dtoh(&self.actions)?)
    }

    pub fn read_fills(&self) -> Result<Fills> {
        let s = &self.stream;
        Ok(Fills {
            filled: s.clone_dtoh(&self.filled)?,
            price: s.clone_dtoh(&self.fill_price)?,
            net_before: s.clone_dtoh(&self.net_before)?,
        })
    }

    pub fn read_outcome(&self) -> Result<Outcome> {
        let s = &self.stream;
        Ok(Outcome {
            pnl: s.clone_dtoh(&self.pnl)?,
            next_states: s.clone_dtoh(&self.next_states)?,
            done: s.clone_dtoh(&self.done)?,
            reason: s.clone_dtoh(&self.reason)?,
        })
    }

    /// Fill every output with a poison value, so that a test sees any element not written.
    pub fn poison_outputs(&mut self) -> Result<()> {
        let s = &self.stream;
        let nan = |b: &mut CudaSlice<f32>| -> Result<()> {
            Ok(s.memcpy_htod(&vec![f32::NAN; b.len()], b)?)
        };
        nan(&mut self.states)?;
        nan(&mut self.x)?;
        nan(&mut self.fill_price)?;
        nan(&mut self.net_before)?;
        nan(&mut self.pnl)?;
        nan(&mut self.next_states)?;
        nan(&mut self.done)?;
        let bad =
            |b: &mut CudaSlice<i32>| -> Result<()> { Ok(s.memcpy_htod(&vec![-7; b.len()], b)?) };
        bad(&mut self.actions)?;
        bad(&mut self.filled)?;
        bad(&mut self.reason)
    }
}
