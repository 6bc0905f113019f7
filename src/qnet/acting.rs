//! Acting: the online network's forward on the experience step's N states, into buffers of
//! its own ([`Acting`]), in one launch (`qnet_act`, [`super::act`]) where its blocks fill the
//! GPU, else layer by layer as the update's forward runs it (the verification path that
//! checks the one launch, and the path of small N).

use super::*;
use cudarc::driver::CudaFunction;

/// The online network's forward for acting on N states (the experience step's Q-forward):
/// its own activations, so acting never touches the update's buffers.
pub struct Acting {
    pub(super) rows: usize,
    /// Keep the head-output rows in `y` (tests, verify); [`Acting::q_only`] leaves them out of
    /// the one-launch forward, which then writes Q only.
    pub(super) outputs: bool,
    pub(super) a1: CudaSlice<f32>,
    pub(super) a2: CudaSlice<f32>,
    pub(super) ah: CudaSlice<f32>,
    pub(super) y: CudaSlice<f32>,
    /// `[N x sum n_k]`: the Q-values (expected value over atoms) that `action_select` reads.
    pub q: CudaSlice<f32>,
}

impl Acting {
    /// The device addresses of its buffers (for a graph binding).
    pub fn addresses(&self, stream: &Arc<CudaStream>) -> [u64; 5] {
        [
            address(stream, &self.a1),
            address(stream, &self.a2),
            address(stream, &self.ah),
            address(stream, &self.y),
            address(stream, &self.q),
        ]
    }

    /// The head-output rows, where these buffers keep them (not [`Acting::q_only`]).
    pub(crate) fn y_if_kept(&mut self) -> Option<&mut CudaSlice<f32>> {
        if self.outputs {
            Some(&mut self.y)
        } else {
            None
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The same activations, acting for Q only: the one-launch forward (`qnet_act`) does not
    /// store the head-output rows (the experience step reads Q only).
    /// [`QNet::read_acting_outputs`] then refuses.
    pub fn q_only(mut self) -> Self {
        self.outputs = false;
        self
    }
}

impl QNet {
    /// Activations for acting on `rows` states at a time.
    pub fn acting(&self, rows: usize) -> Result<Acting> {
        if rows == 0 || rows >= i32::MAX as usize / 4 {
            return Err(Error::Shape(format!(
                "acting on {rows} states: use 1 to 2^29"
            )));
        }
        let (d, s) = (self.d, &self.stream);
        Ok(Acting {
            rows,
            outputs: true,
            a1: s.alloc_zeros(rows * (d.h1 + 1))?,
            a2: s.clone_htod(&with_ones(rows, d.h2, 0.0))?,
            ah: s.clone_htod(&with_ones(rows, d.hw, 0.0))?,
            y: s.alloc_zeros(rows * d.ow)?,
            q: s.alloc_zeros(rows * d.qw)?,
        })
    }

    /// The online network on `x` (`[N x (S + 1)]`: the states with a ones column, as
    /// `state_gather` writes them): the same stages as [`QNet::forward`] on N rows of one
    /// network (oracle `qnet::forward`, `head`), the Q-values left in `a.q`. In one launch
    /// (`qnet_act`, products in 3xTF32) where its blocks fill the GPU and the network fits
    /// one ([`QNet::act_block_rows`]); else layer by layer ([`QNet::act_layers`]).
    pub fn act(&self, x: &CudaSlice<f32>, a: &mut Acting) -> Result<()> {
        let (d, r) = (self.d, a.rows);
        let Some((f, launch)) = self.act_launch(r)? else {
            return self.act_layers(x, a);
        };
        self.check_len("acting input", x.len(), r * (d.s + 1))?;
        let io = act::ActIo {
            x,
            rows: r,
            y: if a.outputs { Some(&mut a.y) } else { None },
            q: &mut a.q,
        };
        act::launch(&self.stream, f, &launch, io)
    }

    /// The one-launch forward over `rows` rows, with `qnet_act`'s entry point for it, where
    /// acting on that many rows runs it ([`QNet::act_block_rows`]); None: layer by layer.
    /// Kernels built on the same forward (`experience_step`) launch through it too.
    pub fn act_launch(
        &self,
        rows: usize,
    ) -> Result<Option<(&CudaFunction, act::ForwardLaunch<'_>)>> {
        if self.act_block_rows(rows).is_none() {
            return Ok(None);
        }
        let d = self.d;
        let online = act::ActParams {
            params: self.params.slice(..d.params),
            heads: self.head_matrix.slice(..(d.hw + 1) * d.ow),
        };
        let head = act::ActHead {
            shape: &self.shape,
            na: d.na as u32,
            v_min: self.cfg.v_min,
            v_max: self.cfg.v_max,
        };
        self.fused.launch_of(rows, online, head)
    }

    /// Load a kernel built on the one-launch forward (its entry point for every rows per
    /// block this network fits), so that it launches with [`QNet::act_launch`]'s network
    /// and shape.
    pub fn load_forward_kernel(
        &self,
        gpu: &Gpu,
        kernel: &act::ForwardEntries,
    ) -> Result<act::ForwardKernel> {
        self.fused.load_kernel(gpu, kernel)
    }

    /// The device addresses of the online parameters and dense head matrix (for a graph
    /// binding).
    pub fn act_addresses(&self) -> (u64, u64) {
        (
            address(&self.stream, &self.params),
            address(&self.stream, &self.head_matrix),
        )
    }

    /// The state width S and the Q-row width (every branch's actions) the network takes.
    pub fn io_widths(&self) -> (usize, usize) {
        (self.d.s, self.d.qw)
    }

    /// The rows per `qnet_act` block that acting on `rows` states runs with, or None when it
    /// runs layer by layer ([`QNet::act`]): qnet_act where it is on ([`QNet::set_act_fused`]),
    /// the products are not TF32, and the rule of 32-row blocks filling the GPU picks it.
    pub fn act_block_rows(&self, rows: usize) -> Option<usize> {
        if self.tf32() || !self.act_fused {
            return None;
        }
        self.fused.block_rows(rows)
    }

    /// The arithmetic of the products that acting on `rows` states runs (which bound the
    /// result is held to).
    pub fn acting_products(&self, rows: usize) -> Products {
        if self.tf32() {
            Products::Tf32
        } else if self.act_block_rows(rows).is_some() {
            Products::Tf32x3
        } else {
            Products::Float32
        }
    }

    /// Acting in one launch (`qnet_act`, on by default) where its rule picks it; `false`:
    /// always layer by layer (the verification path that checks the one launch). Like [`QNet::set_tf32`], applies to launches made after it,
    /// not to a graph already captured. qnet_act reads the online parameters and the dense
    /// head matrix (which set_params and the optimizer step keep with them) as they are at
    /// each launch, so nothing needs rebuilding after either.
    pub fn set_act_fused(&mut self, on: bool) {
        self.act_fused = on;
    }

    /// The rows per `qnet_act` block this network fits (fewest first; empty: too wide for one
    /// block, acting runs layer by layer).
    pub fn act_block_rows_available(&self) -> Vec<usize> {
        self.fused.fitting()
    }

    /// Whether `qnet_act` stages this network's weights by the aligned feed
    /// (`qnet_act_aligned_rows{R}`: every staged row a run of whole 16-byte copies, as in the
    /// default network) rather than the general one (zero-filled 16- or 4-byte copies).
    pub fn act_aligned(&self) -> bool {
        self.fused.aligned()
    }

    /// Verification switch: force `qnet_act`'s rows per block (16 or 32 where they fit), or
    /// (None) let the rule pick. The rule picks one entry point per network and N; the tests
    /// and the fixtures force each in turn so that both are checked (and `bench` times each).
    pub fn set_act_block_rows(&mut self, rows: Option<usize>) -> Result<()> {
        self.fused.force_rows(rows)
    }

    /// The acting forward layer by layer, as the update's forward runs it (its products on
    /// cuBLASLt, TF32 when set): `qnet_first_layer`, trunk 2 and the heads'
    /// hidden layer, the head-output products side by side, `qnet_head_q`.
    pub fn act_layers(&self, x: &CudaSlice<f32>, a: &mut Acting) -> Result<()> {
        let (d, pl, r) = (self.d, Layout::plain, a.rows);
        self.check_len("acting input", x.len(), r * (d.s + 1))?;
        let off = &self.off;
        let st = &self.stream;
        let input = FirstInput {
            s: x,
            s2: x,
            split: r,
            ld: d.s + 1,
            x: None,
        };
        first_layer(
            st,
            &self.k.first_layer,
            input,
            d,
            &self.params.slice(off.w1..),
            1,
            r,
            0,
            &mut a.a1,
        )?;
        hidden_layer(
            &self.gemm,
            1,
            r,
            d.h2,
            d.h1 + 1,
            &a.a1,
            0,
            &self.params.slice(off.w2..),
            0,
            &mut a.a2,
        )?;
        hidden_layer(
            &self.gemm,
            1,
            r,
            d.hw,
            d.h2 + 1,
            &a.a2,
            0,
            &self.params.slice(off.wh..),
            0,
            &mut a.ah,
        )?;
        // The heads' output products side by side: the value head on the main stream, the
        // branches across the lanes (as in forward_heads).
        let side = (self.heads.len() - 1).min(LANES);
        self.fork(0..side)?;
        for (h, &(row, fan_in, col, width)) in self.heads.iter().enumerate() {
            let gemm = if h == 0 {
                &self.gemm
            } else {
                &self.lanes[(h - 1) % LANES].gemm
            };
            #[rustfmt::skip]
            gemm.gemm(r, width, fan_in, 1.0,
                &a.ah.slice(row..), pl(d.hw + 1),
                &self.head_matrix.slice(row * d.ow + col..), pl(d.ow),
                0.0, &mut a.y.slice_mut(col..), d.ow)?;
        }
        self.join(0..side)?;
        self.act_head(a)
    }

    /// The last stage of [`QNet::act`]: `qnet_head_q` on `a`'s head-output rows. Acting reads
    /// the Q-values only, so the head, in float, writes nothing else.
    pub fn act_head(&self, a: &mut Acting) -> Result<()> {
        let out = HeadOutputs {
            dists: None,
            q: &mut a.q,
        };
        launch_head(
            &self.stream,
            &self.k,
            &self.head_matrix,
            &self.shape,
            &self.cfg,
            self.d,
            &self.head,
            1,
            a.rows,
            &a.y,
            out,
        )
    }
}
