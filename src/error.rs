//! The GPU crate's error type: every failure names its cause and the fix.

use cudarc::driver::DriverError;
use tallyho_oracle::market::MarketError;
use tallyho_oracle::ConfigError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "no CUDA driver (libcuda.so) could be loaded: run on a machine with an NVIDIA GPU and driver; \
         without one, `tallyho fixtures check` replays the recorded GPU results through the oracle"
    )]
    NoDriver,
    #[error(
        "NVRTC (libnvrtc.so.13) could not be loaded: add CUDA 13's lib folder to LD_LIBRARY_PATH \
         (on a CPU machine: `.ci/setup-nvrtc`, then LD_LIBRARY_PATH=$PWD/.nvrtc/nvidia/cu13/lib)"
    )]
    NoNvrtc,
    #[error("no CUDA device is visible ({0}): check `nvidia-smi` and CUDA_VISIBLE_DEVICES")]
    NoDevice(String),
    #[error("CUDA driver error: {0}")]
    Driver(#[from] DriverError),
    #[error("NVRTC could not compile cuda/{kernel}.cu for {arch} (options {options:?}):\n{log}")]
    Compile { kernel: String, arch: String, options: Vec<String>, log: String },
    #[error("kernel {0:?} is not in the kernel table: is cuda/{0}.cu present, and does it declare that entry point?")]
    UnknownKernel(String),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Market(#[from] MarketError),
    #[error("{0}")]
    Usage(String),
    #[error("graph {name}: {why}")]
    Graph { name: &'static str, why: String },
    #[error("fixture {0}")]
    Fixture(String),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
}
