//! The three-state graph slot: step 1 runs the body eagerly (warm-up: modules load, lazy
//! state settles), step 2 captures it into a CUDA graph and launches that, step 3 and on
//! replay the graph. The body must take every per-step value from device memory: a graph
//! freezes kernel arguments.

use crate::error::{Error, Result};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};
use std::sync::Arc;

enum State {
    Warmup,
    Capture,
    Replay(CudaGraph),
}

/// Where a slot is in its life: for reports and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Warmup,
    Capture,
    Replay,
}

pub struct GraphSlot {
    name: &'static str,
    state: State,
    /// Identifies the buffers the body was captured over; a replay over others is refused.
    bound: Option<u64>,
}

impl GraphSlot {
    pub fn new(name: &'static str) -> Self {
        GraphSlot { name, state: State::Warmup, bound: None }
    }

    pub fn phase(&self) -> Phase {
        match self.state {
            State::Warmup => Phase::Warmup,
            State::Capture => Phase::Capture,
            State::Replay(_) => Phase::Replay,
        }
    }

    /// The captured graph's node count (one per kernel launch or copy), once captured.
    pub fn nodes(&self) -> Result<Option<usize>> {
        let State::Replay(graph) = &self.state else { return Ok(None) };
        let mut count = 0usize;
        // SAFETY: the graph is alive while this slot holds it; a null node array asks the
        // driver for the count only.
        unsafe { cudarc::driver::sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut count) }.result()?;
        Ok(Some(count))
    }

    /// Run one step. `binding` names the buffers `body` works on (e.g. device addresses):
    /// a captured graph replays with the addresses it was captured with, so a call with a
    /// different binding is an error rather than a silent read of the old buffers.
    pub fn run(&mut self, stream: &Arc<CudaStream>, binding: u64, body: impl FnOnce() -> Result<()>) -> Result<()> {
        if let Some(b) = self.bound {
            if b != binding {
                return Err(Error::Graph {
                    name: self.name,
                    why: format!("captured over buffers {b:#x}, now called with {binding:#x}: use a new slot for new buffers"),
                });
            }
        }
        match &self.state {
            State::Warmup => {
                body()?;
                self.bound = Some(binding);
                self.state = State::Capture;
            }
            State::Capture => {
                stream.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
                let captured = body();
                let graph = stream.end_capture(CUgraphInstantiate_flags(0));
                captured?;
                let graph = graph?.ok_or_else(|| Error::Graph { name: self.name, why: "capture recorded no work".into() })?;
                graph.launch()?;
                self.state = State::Replay(graph);
            }
            State::Replay(graph) => graph.launch()?,
        }
        Ok(())
    }
}
