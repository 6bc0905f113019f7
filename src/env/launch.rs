//! The env's launchers: `state_gather`, `action_select`, `fill_step`, `barriers`, `env_step`
//! (the last three in one launch).

use super::*;

impl Env {
    /// `state_gather`: states and the Q-forward's input from the bars and portfolios.
    pub fn state_gather(&mut self) -> Result<()> {
        let elems = self.cfg.envs * self.state_dim();
        let mut l = self.stream.launch_builder(&self.k.state_gather);
        l.arg(&self.market.features)
            .arg(&self.market.close)
            .arg(&self.params)
            .arg(&self.ptrs)
            .arg(&mut self.states)
            .arg(&mut self.x);
        // SAFETY: state_gather(const float* features [bars x F], const float* close [bars],
        // EnvParams, EnvState (pointers into self.st, N each), float* states [N x S],
        // float* x [N x (S + 1)]): sizes from new(); every bar index lies in the split
        // (upload_state, barriers' resets), which lies inside the market.
        unsafe { l.launch(grid_stride(elems)) }?;
        Ok(())
    }

    /// `action_select` on Q-values `q` `[N x sum n_k]`.
    pub fn action_select(&mut self, q: &CudaSlice<f32>) -> Result<()> {
        let width = self.branches.width();
        if q.len() != self.cfg.envs * width {
            return Err(Error::Shape(format!(
                "Q-values of {} floats for {} envs x {width} actions",
                q.len(),
                self.cfg.envs
            )));
        }
        let envs = self.params.envs;
        let mut l = self.stream.launch_builder(&self.k.action_select);
        l.arg(q)
            .arg(&self.branches)
            .arg(self.epsilon.value())
            .arg(&self.st.clock)
            .arg(&envs)
            .arg(&self.params.key0)
            .arg(&self.params.key1)
            .arg(&mut self.actions);
        // SAFETY: action_select(const float* q [N x A], ActionBranches, const float* epsilon
        // [1], const u32* clock [N], u32 N, u32 key0, u32 key1, int* actions [N x K]): q's
        // length checked above, K = 3 branches (EnvConfig::validate).
        unsafe { l.launch(grid_stride(self.cfg.envs)) }?;
        Ok(())
    }

    /// `fill_step`: each env's order against its bar's quote.
    pub fn fill_step(&mut self) -> Result<()> {
        let mut l = self.stream.launch_builder(&self.k.fill_step);
        l.arg(&self.market.bid)
            .arg(&self.market.ask)
            .arg(&self.market.volatility)
            .arg(&self.params)
            .arg(&self.ptrs)
            .arg(&self.actions)
            .arg(&mut self.filled)
            .arg(&mut self.fill_price)
            .arg(&mut self.net_before);
        // SAFETY: fill_step(const float* bid, ask, volatility [bars], EnvParams, EnvState,
        // const int* actions [N x 3], int* filled [N], float* fill_price [N], float*
        // net_before [N]); bars in range
        // as for state_gather; actions within their branches (action_select or checked
        // uploads: an out-of-range size only changes the clipped quantity).
        unsafe { l.launch(grid_stride(self.cfg.envs)) }?;
        Ok(())
    }

    /// `barriers`: next bar, exits, mark, the step's PnL (against `net_before`, the fill
    /// step's), s', done, auto-reset.
    pub fn barriers(&mut self) -> Result<()> {
        let mut l = self.stream.launch_builder(&self.k.barriers);
        l.arg(&self.market.features)
            .arg(&self.market.close)
            .arg(&self.market.bid)
            .arg(&self.market.ask)
            .arg(&self.market.high)
            .arg(&self.market.low)
            .arg(&self.params)
            .arg(&self.ptrs)
            .arg(&self.net_before)
            .arg(&mut self.pnl)
            .arg(&mut self.next_states)
            .arg(&mut self.done)
            .arg(&mut self.reason);
        // SAFETY: barriers(const float* features [bars x F], close, bid, ask, high, low
        // [bars], EnvParams, EnvState, const float* net_before [N], float* pnl [N], float*
        // next_states [N x S], float* done [N], int* reason [N]); sizes from new(); it reads
        // bar + 1 <= hi - 1 (starts lie in [lo, hi - 2] and an env at hi - 2 is done), inside
        // the market.
        unsafe { l.launch(grid_stride(self.cfg.envs)) }?;
        Ok(())
    }

    /// `env_step`: [`Env::action_select`] on `q`, [`Env::fill_step`] and [`Env::barriers`]
    /// as one launch (each env's three steps in one thread), the same outputs bit for bit.
    pub fn env_step(&mut self, q: &CudaSlice<f32>) -> Result<()> {
        let width = self.branches.width();
        if q.len() != self.cfg.envs * width {
            return Err(Error::Shape(format!(
                "Q-values of {} floats for {} envs x {width} actions",
                q.len(),
                self.cfg.envs
            )));
        }
        let m = &self.market;
        // Launched programmatically: its launch overlaps the Q-forward's tail (env_step
        // waits for it before its first read).
        let mut l = Programmatic::new(&self.stream, &self.k.env_step);
        l.input(q)
            .value(&self.branches)
            .input(self.epsilon.value())
            .input(&m.features)
            .input(&m.close)
            .input(&m.bid)
            .input(&m.ask)
            .input(&m.volatility)
            .input(&m.high)
            .input(&m.low)
            .value(&self.params)
            .value(&self.ptrs)
            .output(&mut self.actions)
            .output(&mut self.filled)
            .output(&mut self.fill_price)
            .output(&mut self.net_before)
            .output(&mut self.pnl)
            .output(&mut self.next_states)
            .output(&mut self.done)
            .output(&mut self.reason);
        // SAFETY: env_step(const float* q [N x A], ActionBranches, const float* epsilon [1],
        // const float* features [bars x F], close, bid, ask, volatility, high, low [bars],
        // EnvParams, EnvState, int* actions [N x 3], int* filled [N], float* fill_price [N],
        // float* net_before [N], float* pnl [N], float* next_states [N x S], float* done [N],
        // int* reason [N]): q's length checked above, the rest as for
        // action_select, fill_step and barriers, whose bodies it runs; it calls
        // grid_wait_for_prior before anything else.
        unsafe { l.launch(grid_stride(self.cfg.envs)) }
    }
}
