//! The training metrics on the device: `trainer_metrics_step` after each step's reward,
//! `trainer_metrics_update` after each update, into one block of
//! [`MetricTotals::WORDS`] doubles that the host reads (and zeroes) every K steps.

use crate::error::{Error, Result};
use crate::runtime::{entry, Gpu};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::trainer::MetricTotals;

/// Threads of `trainer_metrics_step`'s one block (cuda/trainer_metrics.cu).
const THREADS: u32 = 256;
const MAX_BRANCHES: usize = 4;

/// `struct MetricBranches` (cuda/trainer_metrics.cu), field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct MetricBranches {
    count: u32,
    n: [u32; MAX_BRANCHES],
}
const _: () = assert!(std::mem::size_of::<MetricBranches>() == 20);
// SAFETY: repr(C) plain integers, mirrored by the kernel's struct (size asserted on both sides).
unsafe impl cudarc::driver::DeviceRepr for MetricBranches {}

/// What one step's metrics read (device buffers of the step's stages).
pub struct StepInputs<'a> {
    pub reward: &'a CudaSlice<f32>,
    pub pnl: &'a CudaSlice<f32>,
    pub trade_done: &'a CudaSlice<f32>,
    pub episode_done: &'a CudaSlice<f32>,
    pub q: &'a CudaSlice<f32>,
    pub epsilon: &'a CudaSlice<f32>,
}

pub struct DeviceMetrics {
    stream: Arc<CudaStream>,
    /// Where the updates' launches go (the stream of the update, the same by default).
    update_stream: Arc<CudaStream>,
    totals: CudaSlice<f64>,
    branches: MetricBranches,
    envs: usize,
    step_k: CudaFunction,
    update_k: CudaFunction,
}

impl DeviceMetrics {
    pub fn new(gpu: &Gpu, envs: usize, branches: &[usize]) -> Result<Self> {
        if branches.is_empty() || branches.len() > MAX_BRANCHES {
            return Err(Error::Shape(format!(
                "{} action branches: the metrics take 1 to {MAX_BRANCHES}",
                branches.len()
            )));
        }
        let mut n = [0u32; MAX_BRANCHES];
        for (d, &b) in n.iter_mut().zip(branches) {
            *d = b as u32;
        }
        Ok(DeviceMetrics {
            stream: gpu.stream.clone(),
            update_stream: gpu.stream.clone(),
            totals: gpu.stream.alloc_zeros(MetricTotals::WORDS)?,
            branches: MetricBranches {
                count: branches.len() as u32,
                n,
            },
            envs,
            step_k: gpu.function(entry::trainer_metrics::TRAINER_METRICS_STEP)?,
            update_k: gpu.function(entry::trainer_metrics::TRAINER_METRICS_UPDATE)?,
        })
    }

    /// `trainer_metrics_step`: one step's sums over the envs.
    pub fn step(&mut self, x: &StepInputs) -> Result<()> {
        let n = self.envs;
        let width: usize = self.branches.n.iter().map(|&v| v as usize).sum();
        for (name, len, want) in [
            ("reward", x.reward.len(), n),
            ("pnl", x.pnl.len(), n),
            ("trade_done", x.trade_done.len(), n),
            ("episode_done", x.episode_done.len(), n),
            ("q", x.q.len(), n * width),
            ("epsilon", x.epsilon.len(), 1),
        ] {
            if len < want {
                return Err(Error::Shape(format!(
                    "metrics input {name} has {len} values, needs {want} ({n} envs)"
                )));
            }
        }
        let envs = n as u32;
        let mut b = self.stream.launch_builder(&self.step_k);
        b.arg(&mut self.totals)
            .arg(x.reward)
            .arg(x.pnl)
            .arg(x.trade_done)
            .arg(x.episode_done)
            .arg(x.q)
            .arg(&self.branches)
            .arg(x.epsilon)
            .arg(&envs);
        // SAFETY: trainer_metrics_step(double* [11], const float* reward [N], pnl [N],
        // trade_done [N], episode_done [N], q [N x sum n_k], MetricBranches by value, const
        // float* epsilon [1], u32 N): lengths checked above; one block of THREADS threads, as
        // the kernel's fixed reduction tree requires.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            })
        }?;
        Ok(())
    }

    /// Launch [`DeviceMetrics::update`] on `stream`, where the updates run (it must be
    /// ordered after the step's [`DeviceMetrics::step`] by the caller).
    pub fn set_update_stream(&mut self, stream: Arc<CudaStream>) {
        self.update_stream = stream;
    }

    /// `trainer_metrics_update`: one update's loss and gradient norm.
    pub fn update(&mut self, loss: &CudaSlice<f64>, opt_ctl: &CudaSlice<u32>) -> Result<()> {
        if loss.is_empty() || opt_ctl.len() < 8 {
            return Err(Error::Shape("metrics of an update read the loss (1 f64) and the optimizer's control block (8 words)".into()));
        }
        let mut b = self.update_stream.launch_builder(&self.update_k);
        b.arg(&mut self.totals).arg(loss).arg(opt_ctl);
        // SAFETY: trainer_metrics_update(double* [11], const double* loss [1], const OptCtl*):
        // the control block is the optimizer's 32 bytes (checked above). One thread.
        unsafe {
            b.launch(LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            })
        }?;
        Ok(())
    }

    /// The sums since the last take, then zeroed (a host read: outside any capture).
    pub fn take(&mut self) -> Result<MetricTotals> {
        let w = self.stream.clone_dtoh(&self.totals)?;
        let words: [f64; MetricTotals::WORDS] = w.try_into().map_err(|_| {
            Error::Shape("the metrics block is not MetricTotals::WORDS doubles".into())
        })?;
        self.stream.memset_zeros(&mut self.totals)?;
        Ok(MetricTotals::of_words(&words))
    }

    pub fn totals(&self) -> &CudaSlice<f64> {
        &self.totals
    }
}
