//! tallyho: a GPU-resident DQN trainer for market-data backtests, whose every CUDA kernel
//! has a CPU reference in `tallyho-oracle` and is checked against it.

pub mod checkpoint;
pub mod config;
pub mod env;
pub mod error;
pub mod eval;
pub mod experience;
pub mod gemm;
pub mod graph;
pub mod harness;
pub mod kernel_inline;
pub mod optimizer;
pub mod philox;
pub mod qnet;
pub mod replay;
pub mod report;
pub mod reward;
pub mod runtime;
pub mod schedule;
pub mod tensor_file;
pub mod train;
pub mod trainer;
pub mod transition;

pub use error::{Error, Result};
pub use runtime::Gpu;
pub use tallyho_oracle as oracle;
