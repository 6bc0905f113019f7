//! The one graph mechanism: a three-state slot. Step 1 runs the body eagerly (warm-up:
//! modules load, cuBLASLt plans are made, lazy state settles), step 2 captures it into a
//! CUDA graph and launches that, step 3 and on replay the graph. Every stage's graphed path
//! and the trainer's whole step go through [`GraphSlot::run`] (or [`GraphSlot::run_on`] for
//! a slot its owner holds).
//!
//! **Bound to device addresses.** A graph freezes kernel arguments, so a body must take
//! every per-step value from device memory, and a replay reads the buffers the capture saw.
//! A slot records the [`Binding`] (a fold of the device addresses the body reads and writes)
//! of its first run and refuses a later run over another: no host address enters it, so an
//! owner may move, and two owners of the same buffers bind the same.
//!
//! **Nestable.** When the stream is already capturing (an enclosing slot is capturing the
//! whole training step), a slot runs its body into that capture and keeps its own state: the
//! enclosing graph holds the work once, and nothing is captured twice.
//!
//! **A clean capture is the proof.** Captures use the thread-local mode, in which the calls
//! that would synchronise or copy to host memory fail inside the capture; an allocation
//! (cudarc allocates stream-ordered, `cuMemAllocAsync`, where the device supports it) would
//! instead become a memory node of the graph, so every captured graph is checked: one that
//! holds an allocation, a free or a host callback is refused, naming them.

use crate::error::{Error, Result};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode, CUstreamCaptureStatus};
use cudarc::driver::{CudaGraph, CudaStream, DevicePtr};
use std::sync::Arc;

/// The device addresses a body works on, folded into one word (FNV-1a).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding(u64);

impl Binding {
    /// The binding of `addresses` (device pointers, in a fixed order; flags may be folded in
    /// too, e.g. which path the body takes).
    pub fn of(addresses: &[u64]) -> Binding {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for &a in addresses {
            h = (h ^ a).wrapping_mul(0x0100_0000_01b3);
        }
        Binding(h)
    }
}

/// The device address of a buffer, for a [`Binding`].
pub fn address<T>(stream: &Arc<CudaStream>, buf: &impl DevicePtr<T>) -> u64 {
    buf.device_ptr(stream).0
}

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
    bound: Option<Binding>,
}

impl Default for GraphSlot {
    fn default() -> Self {
        GraphSlot::new("graph")
    }
}

impl GraphSlot {
    pub fn new(name: &'static str) -> Self {
        GraphSlot {
            name,
            state: State::Warmup,
            bound: None,
        }
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
        let State::Replay(graph) = &self.state else {
            return Ok(None);
        };
        let mut count = 0usize;
        // SAFETY: the graph is alive while this slot holds it; a null node array asks the
        // driver for the count only.
        unsafe {
            cudarc::driver::sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut count)
        }
        .result()?;
        Ok(Some(count))
    }

    /// Run one step of `body` on `stream` (see the module doc). `binding` names the device
    /// buffers `body` works on: a run with another binding than the first is an error rather
    /// than a silent replay over the old buffers.
    pub fn run(
        &mut self,
        stream: &Arc<CudaStream>,
        binding: Binding,
        body: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if let Some(b) = self.bound {
            if b != binding {
                return Err(Error::Graph {
                    name: self.name,
                    why: format!("captured over buffers {:#x}, now run over {:#x}: use a new slot for new buffers", b.0, binding.0),
                });
            }
        }
        if stream.capture_status()? != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            // Inside an enclosing capture: the body becomes part of that graph.
            return body();
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
                let graph = graph?.ok_or_else(|| Error::Graph {
                    name: self.name,
                    why: "capture recorded no work".into(),
                })?;
                refuse_host_work(self.name, &graph)?;
                graph.launch()?;
                self.state = State::Replay(graph);
            }
            State::Replay(graph) => graph.launch()?,
        }
        Ok(())
    }

    /// [`GraphSlot::run`] through the slot that `owner` holds at `slot(owner)`, with a body
    /// that works on `owner`: the one place that lends the slot out of its owner for the
    /// duration of the step (the body borrows the owner mutably).
    pub fn run_on<T>(
        owner: &mut T,
        slot: fn(&mut T) -> &mut GraphSlot,
        stream: &Arc<CudaStream>,
        binding: Binding,
        body: impl FnOnce(&mut T) -> Result<()>,
    ) -> Result<()> {
        let mut taken = std::mem::take(slot(owner));
        let r = taken.run(stream, binding, || body(owner));
        *slot(owner) = taken;
        r
    }
}

/// Refuse a captured graph that allocates, frees or calls back to the host: the work a step
/// must not do (its nodes are counted by type; the listing is made once, at capture).
fn refuse_host_work(name: &'static str, graph: &CudaGraph) -> Result<()> {
    use cudarc::driver::sys::{self, CUgraphNodeType};
    let mut count = 0usize;
    // SAFETY: the graph is alive (owned by the caller); a null array asks for the count.
    unsafe { sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut count) }.result()?;
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` holds `count` slots, as the driver was told.
    unsafe { sys::cuGraphGetNodes(graph.cu_graph(), nodes.as_mut_ptr(), &mut count) }.result()?;
    let (mut allocs, mut frees, mut host) = (0, 0, 0);
    for &node in &nodes[..count] {
        let mut kind = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `node` is one of the graph's nodes, listed just above.
        unsafe { sys::cuGraphNodeGetType(node, &mut kind) }.result()?;
        match kind {
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_ALLOC => allocs += 1,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_MEM_FREE => frees += 1,
            CUgraphNodeType::CU_GRAPH_NODE_TYPE_HOST => host += 1,
            _ => {}
        }
    }
    if allocs + frees + host > 0 {
        return Err(Error::Graph {
            name,
            why: format!(
                "the captured step holds {allocs} allocation(s), {frees} free(s) and {host} host callback(s): \
                 allocate every buffer before the first run and keep host work outside the step"
            ),
        });
    }
    Ok(())
}
