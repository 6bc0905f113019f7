//! The update: the forward of both networks on the batch's s and s', the Double DQN loss,
//! the backward and the optimizer step, eager or through the network's graph slot; and the
//! target sync.

use super::*;

/// Threads of a `qnet_loss` block per action branch (`QNET_LOSS_LANES`).
const LOSS_LANES: usize = 64;

/// What a graph of the update binds to: the device addresses it reads its batch from, the
/// buffers of its own that are public (so replaceable), and the switch that changes its
/// products (TF32).
fn binding(net: &QNet, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Binding {
    let s = &net.stream;
    let a = |b: &CudaSlice<f32>| address(s, b);
    #[rustfmt::skip]
    let words = [a(&t.states), a(&t.next_states), address(s, &t.actions), a(&t.rewards), a(&t.discounts), a(weights),
        a(&net.priorities), a(&net.opt.m), a(&net.opt.v), net.tf32() as u64];
    Binding::of(&words)
}

impl QNet {
    fn check_batch(&self, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Result<()> {
        let (b, s, kk) = (self.d.b, self.d.s, self.d.kk);
        self.check_len("states", t.states.len(), b * s)?;
        self.check_len("next_states", t.next_states.len(), b * s)?;
        self.check_len("actions", t.actions.len(), b * kk)?;
        self.check_len("rewards", t.rewards.len(), b)?;
        self.check_len("discounts", t.discounts.len(), b)?;
        self.check_len("weights", weights.len(), b)
    }

    /// The online network on s and s' and the target network on s' (and, unused, on s):
    /// input staging, 3 hidden layers (GEMM + ReLU), 1 + K head-output GEMMs, `qnet_head`.
    pub fn forward(&mut self, states: &CudaSlice<f32>, next_states: &CudaSlice<f32>) -> Result<()> {
        let d = self.d;
        self.check_len("states", states.len(), d.b * d.s)?;
        self.check_len("next_states", next_states.len(), d.b * d.s)?;
        let (p, r, off) = (d.params, d.rows, &self.off);
        // Hidden layers: a = relu([in | 1] [w; b]) for both networks (x is shared), the first
        // by qnet_first_layer (which stages x = [s | 1; s' | 1] and keeps it for the
        // backward), the others by one product with a ReLU epilogue.
        {
            let input = FirstInput {
                s: states,
                s2: next_states,
                split: d.b,
                ld: d.s,
                x: Some(&mut self.x),
            };
            first_layer(
                &self.stream,
                &self.k.first_layer,
                input,
                d,
                &self.params.slice(off.w1..),
                NETS,
                r,
                p,
                &mut self.a1,
            )?;
        }
        #[rustfmt::skip]
        hidden_layer(&self.gemm, NETS, r, d.h2, d.h1 + 1,
            &self.a1, r * (d.h1 + 1), &self.params.slice(off.w2..), p, &mut self.a2)?;
        #[rustfmt::skip]
        hidden_layer(&self.gemm, NETS, r, d.hw, d.h2 + 1,
            &self.a2, r * (d.h2 + 1), &self.params.slice(off.wh..), p, &mut self.ah)?;
        self.forward_heads()?;
        self.forward_head()
    }

    /// The heads' output layers without their bias (added by `qnet_head`): one GEMM per
    /// head over both networks, each reading its block of the dense head matrix in place.
    pub fn forward_heads(&mut self) -> Result<()> {
        let (d, pl) = (self.d, Layout::plain);
        let r = d.rows;
        let dense = (d.hw + 1) * d.ow;
        let side = (self.heads.len() - 1).min(LANES);
        self.fork(0..side)?;
        for (h, &(row, fan_in, col, width)) in self.heads.iter().enumerate() {
            // Head 0 on the main stream, the others across the lanes.
            let gemm = if h == 0 {
                &self.gemm
            } else {
                &self.lanes[(h - 1) % LANES].gemm
            };
            #[rustfmt::skip]
            gemm.gemm_batched(NETS, r, width, fan_in, 1.0,
                &self.ah.slice(row..), pl(d.hw + 1), r * (d.hw + 1),
                &self.head_matrix.slice(row * d.ow + col..), pl(d.ow), dense,
                0.0, &mut self.y.slice_mut(col..), d.ow, r * d.ow, Epilogue::None)?;
        }
        self.join(0..side)
    }

    /// Lanes `lanes` wait for the work queued so far on the main stream.
    pub(super) fn fork(&self, lanes: std::ops::Range<usize>) -> Result<()> {
        self.forked.record(&self.stream)?;
        for l in &self.lanes[lanes] {
            l.stream.wait(&self.forked)?;
        }
        Ok(())
    }

    /// The main stream waits for the work queued so far on lanes `lanes`.
    pub(super) fn join(&self, lanes: std::ops::Range<usize>) -> Result<()> {
        for l in &self.lanes[lanes] {
            l.done.record(&l.stream)?;
            self.stream.wait(&l.done)?;
        }
        Ok(())
    }

    /// `qnet_head` on the head outputs y of both networks.
    pub fn forward_head(&mut self) -> Result<()> {
        let dists = Dists {
            logits: &mut self.logits,
            log_probs: &mut self.log_probs,
            probs: &mut self.probs,
        };
        let out = HeadOutputs {
            dists: Some(dists),
            q: &mut self.q,
        };
        launch_head(
            &self.stream,
            &self.k,
            &self.head_matrix,
            &self.shape,
            &self.cfg,
            self.d,
            &self.head,
            NETS,
            self.d.rows,
            &self.y,
            out,
        )
    }

    /// `qnet_loss` (ending in the batch loss) on the last forward, for the batch's actions,
    /// rewards, bootstrap discounts and importance weights.
    pub fn loss(&mut self, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Result<()> {
        self.check_batch(t, weights)?;
        let d = self.d;
        let (na, b32) = (d.na as u32, d.b as u32);
        let mut l = self.stream.launch_builder(&self.k.loss);
        l.arg(&self.q)
            .arg(&self.log_probs)
            .arg(&self.probs)
            .arg(&t.actions)
            .arg(&t.rewards)
            .arg(&t.discounts)
            .arg(weights)
            .arg(&self.shape)
            .arg(&na)
            .arg(&b32)
            .arg(&self.cfg.v_min)
            .arg(&self.cfg.v_max)
            .arg(&self.cfg.huber_kappa)
            .arg(&mut self.next_actions)
            .arg(&mut self.sample_loss)
            .arg(&mut self.priorities)
            .arg(&mut self.dy)
            .arg(&mut self.loss_done)
            .arg(&mut self.loss);
        let (kk, na) = (d.kk, d.na);
        let shared = (3 * kk * na + 2 * na) * 8
            + 2 * na * 4
            + (3 * d.qw + if na > 1 { 3 * d.lw } else { 0 }) * 4;
        let cfg = LaunchConfig {
            grid_dim: (b32, 1, 1),
            block_dim: ((LOSS_LANES * kk) as u32, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        // SAFETY: follows qnet_loss's signature: q, log_probs, probs as written by qnet_head
        // for NETS x 2B rows; actions B x K (each in [0, n_k): the caller's batch, checked by
        // the oracle's check_batch where it is built), rewards, discounts, weights B; outputs
        // next_actions B x K, sample_loss and priorities B, dy B x ow; loss_done a zero word
        // (zeroed at creation, returned to zero by each launch's last block), loss 1 double;
        // QNET_LOSS_LANES threads per branch, the dynamic shared memory the kernel lays out.
        unsafe { l.launch(cfg) }?;
        Ok(())
    }

    /// The gradient of the loss into `grads` from the loss's head-output gradient: 6 + K GEMMs (10 for 3 branches)
    /// (each writes its block with beta 0, so nothing needs zeroing), the head gradient
    /// gather and 3 ReLU backwards, on the online network's rows of s.
    pub fn backward(&mut self) -> Result<()> {
        let d = self.d;
        let (b, off, pl, tr) = (d.b, self.off, Layout::plain, Layout::transposed);
        // The data gradients run on the main stream, one after the other; each weight
        // gradient forks onto a lane as soon as its inputs exist, and all join at the end.
        // Heads' output layer: d[W_heads; bo] = [hh | 1]^T dy (dense), gathered into the
        // compact wv2, wa2_k, bo (lane 0); d hh = dy W_heads^T per head (below).
        self.fork(0..1)?;
        #[rustfmt::skip]
        self.lanes[0].gemm.gemm(d.hw + 1, d.ow, b, 1.0, &self.ah, tr(d.hw + 1), &self.dy, pl(d.ow),
            0.0, &mut self.head_matrix_grad, d.ow)?;
        {
            let count = self.head_matrix_index.len();
            let count32 = count as u32;
            let mut l = self.lanes[0]
                .stream
                .launch_builder(&self.k.head_matrix_gather);
            l.arg(&self.head_matrix_grad)
                .arg(&self.head_matrix_index)
                .arg(&count32);
            let mut compact = self.grads.slice_mut(off.wv2..);
            l.arg(&mut compact);
            // SAFETY: qnet_head_matrix_gather(const float* dense [(H + 1) O], const u32* index [count],
            // u32 count, float* compact): writes `count` floats from wv2's offset, which is
            // where wv2, wa2_k and bo end the flat buffer (Offsets::of). Ordered after the
            // GEMM that writes head_matrix_grad on the same lane.
            unsafe { l.launch(grid_stride(count)) }?;
        }
        // d hh = dy W_heads^T as one product per head, each with its block of the dense
        // matrix (the dense product multiplied the zero blocks too: 26 us under ncu at
        // B = 256, K = 612 walked by 128 tiles), side by side: the value head on the main
        // stream, the branches on lanes 1.., joined before the ReLU.
        let side = (self.heads.len() - 1).min(LANES - 1);
        self.fork(1..1 + side)?;
        for (h, &(row, fan_in, col, width)) in self.heads.iter().enumerate() {
            let gemm = if h == 0 {
                &self.gemm
            } else {
                &self.lanes[1 + (h - 1) % (LANES - 1)].gemm
            };
            #[rustfmt::skip]
            gemm.gemm(b, fan_in, width, 1.0, &self.dy.slice(col..), pl(d.ow), &self.head_matrix.slice(row * d.ow + col..), tr(d.ow),
                0.0, &mut self.dhh.slice_mut(row..), d.hw)?;
        }
        self.join(1..1 + side)?;
        relu_backward(
            &self.stream,
            &self.k.relu_backward,
            &mut self.dhh,
            &self.ah,
            b,
            d.hw,
        )?;
        // [wh; bh] (lane 1) and dh2.
        self.fork(1..2)?;
        #[rustfmt::skip]
        self.lanes[1].gemm.gemm(d.h2 + 1, d.hw, b, 1.0, &self.a2, tr(d.h2 + 1), &self.dhh, pl(d.hw),
            0.0, &mut self.grads.slice_mut(off.wh..off.wh + (d.h2 + 1) * d.hw), d.hw)?;
        #[rustfmt::skip]
        self.gemm.gemm(b, d.h2, d.hw, 1.0, &self.dhh, pl(d.hw), &self.params.slice(off.wh..off.wh + d.h2 * d.hw), tr(d.hw),
            0.0, &mut self.dh2, d.h2)?;
        relu_backward(
            &self.stream,
            &self.k.relu_backward,
            &mut self.dh2,
            &self.a2,
            b,
            d.h2,
        )?;
        // [w2; b2] (lane 2) and dh1.
        self.fork(2..3)?;
        #[rustfmt::skip]
        self.lanes[2].gemm.gemm(d.h1 + 1, d.h2, b, 1.0, &self.a1, tr(d.h1 + 1), &self.dh2, pl(d.h2),
            0.0, &mut self.grads.slice_mut(off.w2..off.w2 + (d.h1 + 1) * d.h2), d.h2)?;
        #[rustfmt::skip]
        self.gemm.gemm(b, d.h1, d.h2, 1.0, &self.dh2, pl(d.h2), &self.params.slice(off.w2..off.w2 + d.h1 * d.h2), tr(d.h2),
            0.0, &mut self.dh1, d.h1)?;
        relu_backward(
            &self.stream,
            &self.k.relu_backward,
            &mut self.dh1,
            &self.a1,
            b,
            d.h1,
        )?;
        // [w1; b1].
        #[rustfmt::skip]
        self.gemm.gemm(d.s + 1, d.h1, b, 1.0, &self.x, tr(d.s + 1), &self.dh1, pl(d.h1),
            0.0, &mut self.grads.slice_mut(off.w1..off.w1 + (d.s + 1) * d.h1), d.h1)?;
        self.join(0..LANES)
    }

    /// Grad norm, clip and Adam on the online parameters; Adam also writes the new head
    /// parameters into the online dense head matrix (so it needs no rebuild).
    pub fn optimize(&mut self) -> Result<()> {
        let p = self.d.params;
        let dense = self.head_matrix.slice_mut(..(self.d.hw + 1) * self.d.ow);
        let mirror = Mirror {
            from: self.off.wv2,
            index: &self.head_matrix_index,
            to: dense,
        };
        self.opt.step(
            &mut self.params.slice_mut(..p),
            &self.grads.as_view(),
            Some(mirror),
        )
    }

    /// One whole update, eagerly: [`QNet::gradients`], then [`QNet::optimize`]. The new
    /// priorities are in [`QNet::priorities`].
    pub fn update(&mut self, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Result<()> {
        self.gradients(t, weights)?;
        self.optimize()
    }

    /// The update up to the gradients: forward, loss (and the new priorities), backward. It
    /// reads the parameters and writes only the update's own buffers, so it may run beside
    /// acting on the same parameters; [`QNet::optimize`] then writes them.
    pub fn gradients(&mut self, t: &DeviceTransitions, weights: &CudaSlice<f32>) -> Result<()> {
        self.check_batch(t, weights)?;
        self.forward(&t.states, &t.next_states)?;
        self.loss(t, weights)?;
        self.backward()
    }

    /// [`QNet::update`] through the network's graph slot: eager once, then captured, then
    /// replayed. The batch and weights must stay the same buffers (refilled in place).
    pub fn update_graphed(
        &mut self,
        t: &DeviceTransitions,
        weights: &CudaSlice<f32>,
    ) -> Result<()> {
        self.check_batch(t, weights)?;
        let stream = self.stream.clone();
        let binding = binding(self, t, weights);
        GraphSlot::run_on(
            self,
            |q| &mut q.graph,
            &stream,
            binding,
            |q| q.update(t, weights),
        )
    }

    pub fn graph_phase(&self) -> Phase {
        self.graph.phase()
    }

    /// The training step's target sync after an update: the Polyak average where the config
    /// has one, else the copy when the update count (on the device) is a multiple of
    /// `period`. No host read: a captured step replays it.
    pub fn target_sync_due(&mut self, period: u32) -> Result<()> {
        let p = self.d.params;
        let (online, mut target) = self.params.split_at_mut(p);
        match self.cfg.polyak_tau {
            Some(tau) => self
                .opt
                .target_sync(&online.as_view(), &mut target, Some(tau))?,
            None => self
                .opt
                .target_sync_every(&online.as_view(), &mut target, period)?,
        }
        self.scatter_head_matrix(NETS)
    }

    /// The last update's batch loss (one f64 on the device).
    pub fn loss_buffer(&self) -> &CudaSlice<f64> {
        &self.loss
    }

    /// Target sync: a copy of the online parameters, or the Polyak average (config).
    pub fn target_sync(&mut self) -> Result<()> {
        let p = self.d.params;
        let (online, mut target) = self.params.split_at_mut(p);
        self.opt
            .target_sync(&online.as_view(), &mut target, self.cfg.polyak_tau)?;
        self.scatter_head_matrix(NETS)
    }
}
