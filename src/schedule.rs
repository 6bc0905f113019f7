//! Schedules advanced on the device (cuda/schedule.cu; spec: tallyho_oracle::schedule): the
//! exploration rate that `action_select`, `env_step` and `experience_step` read from device
//! memory, constant or annealed by `schedule_epsilon` from a device step counter, so a
//! captured step anneals it under replay with no host write and no kernel argument that
//! changes.

use crate::error::{Error, Result};
use crate::graph::address;
use crate::runtime::{entry, Gpu};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;
use tallyho_oracle::schedule::EpsilonSchedule;

/// `struct EpsilonSchedule` of cuda/schedule.cu, a kernel argument.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct EpsilonParams {
    start: f32,
    end: f32,
    steps: u32,
}

// SAFETY: plain old data of 4-byte fields, laid out as the kernel's struct (repr(C)).
unsafe impl cudarc::driver::DeviceRepr for EpsilonParams {}
// The size of `struct EpsilonSchedule` (cuda/schedule.cu static_asserts the same).
const _: () = assert!(std::mem::size_of::<EpsilonParams>() == 12);

/// The exploration rate in device memory, and its schedule.
pub struct Epsilon {
    stream: Arc<CudaStream>,
    kernel: CudaFunction,
    /// The rate of the coming step (one float), what the env kernels read.
    value: CudaSlice<f32>,
    /// The schedule's step counter (device memory: it advances under graph replay).
    step: CudaSlice<u32>,
    /// The schedule; None: the rate is a constant, and [`Epsilon::advance`] launches nothing.
    schedule: Option<EpsilonParams>,
}

fn check(name: &str, v: f32) -> Result<()> {
    if !(0.0..=1.0).contains(&v) {
        return Err(Error::Shape(format!(
            "{name} {v} is outside [0, 1]: use a probability"
        )));
    }
    Ok(())
}

impl Epsilon {
    /// A constant rate `epsilon`.
    pub fn new(gpu: &Gpu, epsilon: f32) -> Result<Self> {
        check("epsilon", epsilon)?;
        let s = &gpu.stream;
        Ok(Epsilon {
            stream: s.clone(),
            kernel: gpu.function(entry::schedule::SCHEDULE_EPSILON)?,
            value: s.clone_htod(&[epsilon])?,
            step: s.alloc_zeros(1)?,
            schedule: None,
        })
    }

    /// The device buffer the env kernels read.
    pub fn value(&self) -> &CudaSlice<f32> {
        &self.value
    }

    /// Set a constant rate (a host write between steps: not inside a capture), replacing any
    /// schedule.
    pub fn set_constant(&mut self, epsilon: f32) -> Result<()> {
        check("epsilon", epsilon)?;
        self.schedule = None;
        Ok(self.stream.memcpy_htod(&[epsilon], &mut self.value)?)
    }

    /// Anneal the rate by `s` from its step 0: each [`Epsilon::advance`] sets the coming
    /// step's rate and advances the counter. A host write (not inside a capture).
    pub fn set_schedule(&mut self, s: &EpsilonSchedule) -> Result<()> {
        check("epsilon start", s.start)?;
        check("epsilon end", s.end)?;
        self.schedule = Some(EpsilonParams {
            start: s.start,
            end: s.end,
            steps: s.steps,
        });
        self.stream.memcpy_htod(&[0u32], &mut self.step)?;
        Ok(self.stream.memcpy_htod(&[s.start], &mut self.value)?)
    }

    /// Whether a schedule anneals the rate (then [`Epsilon::advance`] launches).
    pub fn scheduled(&self) -> bool {
        self.schedule.is_some()
    }

    /// `schedule_epsilon`: the coming step's rate from the device counter, and the counter's
    /// advance (one thread); nothing where the rate is constant.
    pub fn advance(&mut self) -> Result<()> {
        let Some(params) = self.schedule else {
            return Ok(());
        };
        let mut l = self.stream.launch_builder(&self.kernel);
        l.arg(&params).arg(&mut self.step).arg(&mut self.value);
        let one = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (1, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: schedule_epsilon(EpsilonSchedule by value, u32* step [1], float* epsilon
        // [1]): both buffers hold one value (new); one thread, as the kernel takes.
        unsafe { l.launch(one) }?;
        Ok(())
    }

    /// What a graph over this rate binds to: the device addresses of the rate and counter,
    /// and the schedule (a captured `schedule_epsilon` holds it as a frozen argument).
    pub fn binding_words(&self) -> [u64; 4] {
        let p = self.schedule.unwrap_or(EpsilonParams {
            start: f32::NAN,
            end: f32::NAN,
            steps: 0,
        });
        let s = &self.stream;
        let schedule = u64::from(p.start.to_bits()) | (u64::from(p.end.to_bits()) << 32);
        [
            address(s, &self.value),
            address(s, &self.step),
            schedule,
            u64::from(p.steps) | (u64::from(self.schedule.is_some()) << 32),
        ]
    }

    /// The schedule's step counter in device memory (synchronizes; comparisons, checkpoints).
    pub fn read_step(&self) -> Result<u32> {
        Ok(self.stream.clone_dtoh(&self.step)?[0])
    }

    /// Set the schedule's step counter (a restore; the next advance computes the rate from it).
    pub fn write_step(&mut self, step: u32) -> Result<()> {
        Ok(self.stream.memcpy_htod(&[step], &mut self.step)?)
    }

    /// The rate in device memory (synchronizes; tests and fixtures).
    pub fn read(&self) -> Result<f32> {
        Ok(self.stream.clone_dtoh(&self.value)?[0])
    }
}
