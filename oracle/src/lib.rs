//! tallyho-oracle: the CPU reference of every tallyho kernel, and so its specification.
//!
//! Each public function named after a stage (`replay_sample`, `env_step`, ...) documents the
//! math of that stage; the CUDA kernel of the same name in cuda/ must reproduce it within
//! the tolerance declared in [`tolerance`]. This crate never depends on CUDA or on the GPU
//! crate: it is the independent side of every comparison.

pub mod action;
pub mod backtest;
pub mod compare;
pub mod config;
pub mod env;
pub mod evaluate;
pub mod features;
pub mod figures;
pub mod gemm;
pub mod kat;
pub mod market;
pub mod optimizer;
pub mod philox;
pub mod qnet;
pub mod replay;
pub mod reward;
pub mod schedule;
pub mod shared_data;
pub mod tolerance;
pub mod train_config;
pub mod trainer;
pub mod transition;

pub use backtest::{backtest_report, BacktestError, EvalReport};
pub use compare::{
    compare_bitwise, compare_exact, compare_f32, compare_f64, compare_rel_norm, Comparison,
};
pub use config::ConfigError;
pub use features::{FeatureConfig, Market};
pub use figures::Figures;
pub use market::{Bars, MarketError, SyntheticConfig};
pub use replay::ReplayConfig;
pub use tolerance::Tolerance;
pub use train_config::{RunConfig, TrainConfig};
