//! The Q-network's optimizer on the device: global gradient norm (deterministic two-stage
//! reduction in one launch), clipping, Adam with bias correction, and the target sync. Spec:
//! tallyho_oracle::optimizer (`grad_norm`, `clip_grads`, `adam_step`, `target_sync`,
//! `target_sync_every`). The step counter, the norm, the clip scale and the step's bias
//! corrections live in a device control block, so an update that ends in `step` can be
//! captured in a graph and replayed.

use crate::error::{Error, Result};
use crate::runtime::{entry, grid_stride, Gpu};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchConfig, PushKernelArg,
};
use std::sync::Arc;
use tallyho_oracle::qnet::QNetConfig;

/// Blocks of the first reduction stage: a fixed count, so the summation order is fixed.
pub const GRAD_NORM_BLOCKS: usize = 256;

/// The host view of `struct OptCtl` (cuda/common/optimizer.cuh).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OptCtl {
    /// Adam updates applied so far.
    pub step: u32,
    /// Global gradient norm of the last update.
    pub norm: f32,
    /// Clip scale of the last update.
    pub scale: f64,
    /// Adam's bias corrections of `step`: `1 - beta1^step`, `1 - beta2^step`.
    pub bias1: f64,
    pub bias2: f64,
}

// The device block is OptCtl::WORDS u32 words (cuda/common/optimizer.cuh static_asserts the
// same 32 bytes).
const _: () = assert!(std::mem::size_of::<[u32; OptCtl::WORDS]>() == 32);

impl OptCtl {
    /// Words of the control block as the device holds it (`struct OptCtl`, 32 bytes:
    /// cuda/common/optimizer.cuh static_asserts the size).
    pub const WORDS: usize = 8;

    /// The block after `step` updates, before the next one's norm (`set_state`).
    pub fn at_step(step: u32, beta1: f32, beta2: f32) -> OptCtl {
        let t = f64::from(step);
        let (bias1, bias2) = (
            1.0 - f64::from(beta1).powf(t),
            1.0 - f64::from(beta2).powf(t),
        );
        OptCtl {
            step,
            norm: 0.0,
            scale: 1.0,
            bias1,
            bias2,
        }
    }

    pub fn to_words(&self) -> [u32; Self::WORDS] {
        let [s, b1, b2] = [self.scale, self.bias1, self.bias2].map(f64::to_bits);
        [
            self.step,
            self.norm.to_bits(),
            s as u32,
            (s >> 32) as u32,
            b1 as u32,
            (b1 >> 32) as u32,
            b2 as u32,
            (b2 >> 32) as u32,
        ]
    }

    pub fn of_words(w: &[u32]) -> Result<OptCtl> {
        if w.len() != Self::WORDS {
            return Err(Error::Fixture(format!(
                "an optimizer control block has {} words, this one has {}: record the fixture again with this version",
                Self::WORDS,
                w.len()
            )));
        }
        let f = |lo: usize| f64::from_bits(u64::from(w[lo]) | (u64::from(w[lo + 1]) << 32));
        Ok(OptCtl {
            step: w[0],
            norm: f32::from_bits(w[1]),
            scale: f(2),
            bias1: f(4),
            bias2: f(6),
        })
    }
}

/// Parameters Adam also writes elsewhere: parameter `from + e` to `to[index[e]]` (the
/// network's dense head matrix, built from the compact head parameters).
pub struct Mirror<'a> {
    pub from: usize,
    pub index: &'a CudaSlice<u32>,
    pub to: CudaViewMut<'a, f32>,
}

pub struct Optimizer {
    stream: Arc<CudaStream>,
    grad_norm_k: CudaFunction,
    adam_k: CudaFunction,
    polyak_k: CudaFunction,
    every_k: CudaFunction,
    n: usize,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    max_norm: f32,
    partial: CudaSlice<f64>,
    /// The last-block counter of `optimizer_grad_norm` (zero between launches).
    done: CudaSlice<u32>,
    ctl: CudaSlice<u32>,
    pub m: CudaSlice<f32>,
    pub v: CudaSlice<f32>,
}

impl Optimizer {
    /// Moments for `n` parameters, zero; step 0.
    pub fn new(gpu: &Gpu, cfg: &QNetConfig, n: usize) -> Result<Self> {
        if n == 0 {
            return Err(Error::Shape(
                "optimizer over 0 parameters: the network has none".into(),
            ));
        }
        let s = &gpu.stream;
        Ok(Optimizer {
            stream: s.clone(),
            grad_norm_k: gpu.function(entry::optimizer_grad_norm::OPTIMIZER_GRAD_NORM)?,
            adam_k: gpu.function(entry::optimizer_adam::OPTIMIZER_ADAM)?,
            polyak_k: gpu.function(entry::optimizer_target_sync::OPTIMIZER_TARGET_SYNC_POLYAK)?,
            every_k: gpu.function(entry::optimizer_target_sync::OPTIMIZER_TARGET_SYNC_EVERY)?,
            n,
            lr: cfg.lr,
            beta1: cfg.adam_beta1,
            beta2: cfg.adam_beta2,
            eps: cfg.adam_eps,
            max_norm: cfg.grad_clip,
            partial: s.alloc_zeros(GRAD_NORM_BLOCKS)?,
            done: s.alloc_zeros(1)?,
            ctl: s.clone_htod(&OptCtl::at_step(0, cfg.adam_beta1, cfg.adam_beta2).to_words())?,
            m: s.alloc_zeros(n)?,
            v: s.alloc_zeros(n)?,
        })
    }

    fn check(&self, what: &str, len: usize) -> Result<()> {
        if len != self.n {
            return Err(Error::Shape(format!("{what} has {len} values, the optimizer was made for {} parameters: pass the network's whole buffer", self.n)));
        }
        Ok(())
    }

    /// `optimizer_grad_norm`: norm, clip scale, step advance and its bias corrections into the
    /// control block (one launch).
    pub fn grad_norm(&mut self, grads: &CudaView<f32>) -> Result<()> {
        self.check("gradient", grads.len())?;
        let n = self.n as u64;
        let cfg = LaunchConfig {
            grid_dim: (GRAD_NORM_BLOCKS as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(&self.grad_norm_k);
        b.arg(grads)
            .arg(&n)
            .arg(&mut self.partial)
            .arg(&mut self.done)
            .arg(&self.max_norm)
            .arg(&self.beta1)
            .arg(&self.beta2)
            .arg(&mut self.ctl);
        // SAFETY: optimizer_grad_norm(const float* g [n], u64 n, double* partial [blocks], u32* done
        // (zero between launches: zeroed at creation, reset by each launch's last block),
        // float, float, float, OptCtl* ctl): ctl is OptCtl::WORDS u32 words = struct OptCtl
        // {u32, f32, f64, f64, f64}; 256-thread blocks as its block_sum_fixed(.., 256) needs,
        // `blocks` = partial's length.
        unsafe { b.launch(cfg) }?;
        Ok(())
    }

    /// `optimizer_adam` with the step and clip scale of the last `grad_norm`; with a `mirror`,
    /// also writing its parameters to their places in its copy.
    pub fn adam(
        &mut self,
        params: &mut CudaViewMut<f32>,
        grads: &CudaView<f32>,
        mut mirror: Option<Mirror>,
    ) -> Result<()> {
        self.check("parameters", params.len())?;
        self.check("gradient", grads.len())?;
        let n = self.n as u64;
        let (null, zero) = (0u64, 0u64);
        let (mirror_from, mirror_count) = match &mirror {
            Some(m) => {
                let count = m.index.len();
                if m.from + count > self.n {
                    return Err(Error::Shape(format!(
                        "an Adam mirror of {count} parameters from {} over {} parameters: it must lie inside them",
                        m.from, self.n
                    )));
                }
                (m.from as u64, count as u64)
            }
            None => (0, 0),
        };
        let mut b = self.stream.launch_builder(&self.adam_k);
        b.arg(params)
            .arg(grads)
            .arg(&mut self.m)
            .arg(&mut self.v)
            .arg(&n)
            .arg(&self.ctl)
            .arg(&self.lr)
            .arg(&self.beta1)
            .arg(&self.beta2)
            .arg(&self.eps);
        match mirror.as_mut() {
            Some(m) => b
                .arg(m.index)
                .arg(&mirror_from)
                .arg(&mirror_count)
                .arg(&mut m.to),
            None => b.arg(&null).arg(&zero).arg(&zero).arg(&null),
        };
        // SAFETY: follows optimizer_adam's signature; p, g, m, v all hold n floats (checked); the
        // mirror's index holds mirror_count positions inside `to` (its owner builds both:
        // QNet's head_matrix_index and dense head matrix), or the pointers are null with count 0.
        unsafe { b.launch(grid_stride(self.n)) }?;
        Ok(())
    }

    /// Norm, clip and Adam (with its `mirror`): the optimizer half of an update (two launches).
    pub fn step(
        &mut self,
        params: &mut CudaViewMut<f32>,
        grads: &CudaView<f32>,
        mirror: Option<Mirror>,
    ) -> Result<()> {
        self.grad_norm(grads)?;
        self.adam(params, grads, mirror)
    }

    /// `optimizer_target_sync`: one device-to-device copy, or the Polyak average with `tau`.
    pub fn target_sync(
        &self,
        online: &CudaView<f32>,
        target: &mut CudaViewMut<f32>,
        tau: Option<f32>,
    ) -> Result<()> {
        self.check("online parameters", online.len())?;
        self.check("target parameters", target.len())?;
        match tau {
            None => self.stream.memcpy_dtod(online, target)?,
            Some(tau) => {
                let n = self.n as u64;
                let mut b = self.stream.launch_builder(&self.polyak_k);
                b.arg(online).arg(target).arg(&n).arg(&tau);
                // SAFETY: optimizer_target_sync_polyak(const float* [n], float* [n], u64 n, float).
                unsafe { b.launch(grid_stride(self.n)) }?;
            }
        }
        Ok(())
    }

    /// `optimizer_target_sync_every`: the copy where the update count in the control block
    /// is a multiple of `period` (the training step's hard sync, decided on the device).
    pub fn target_sync_every(
        &self,
        online: &CudaView<f32>,
        target: &mut CudaViewMut<f32>,
        period: u32,
    ) -> Result<()> {
        self.check("online parameters", online.len())?;
        self.check("target parameters", target.len())?;
        if period == 0 {
            return Err(Error::Shape(
                "target sync period 0: sync every 1 or more updates".into(),
            ));
        }
        let n = self.n as u64;
        let mut b = self.stream.launch_builder(&self.every_k);
        b.arg(&self.ctl)
            .arg(&period)
            .arg(online)
            .arg(target)
            .arg(&n);
        // SAFETY: optimizer_target_sync_every(const OptCtl* (the 32-byte block), u32 period > 0,
        // const float* [n], float* [n], u64 n): both views hold n values (checked above).
        unsafe { b.launch(grid_stride(self.n)) }?;
        Ok(())
    }

    /// The control block (its device address feeds the training metrics).
    pub fn ctl_buffer(&self) -> &CudaSlice<u32> {
        &self.ctl
    }

    pub fn ctl(&self) -> Result<OptCtl> {
        OptCtl::of_words(&self.stream.clone_dtoh(&self.ctl)?)
    }

    /// Set the moments and step (tests, checkpoint resume).
    pub fn set_state(&mut self, m: &[f32], v: &[f32], step: u32) -> Result<()> {
        self.check("m", m.len())?;
        self.check("v", v.len())?;
        self.stream.memcpy_htod(m, &mut self.m)?;
        self.stream.memcpy_htod(v, &mut self.v)?;
        self.stream.memcpy_htod(
            &OptCtl::at_step(step, self.beta1, self.beta2).to_words(),
            &mut self.ctl,
        )?;
        Ok(())
    }
}
