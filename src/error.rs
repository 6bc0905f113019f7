//! The GPU crate's error type, one variant per kind of failure: every message names its
//! cause, the value and the fix.

use cudarc::driver::DriverError;
use std::path::PathBuf;
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
    #[error("cuBLASLt (libcublasLt.so.13) could not be loaded: add CUDA 13's lib folder to LD_LIBRARY_PATH")]
    NoBlas,
    #[error("no CUDA device is visible ({0}): check `nvidia-smi`, CUDA_VISIBLE_DEVICES and TALLYHO_DEVICE")]
    NoDevice(String),
    /// A driver call failed (launch, copy, capture, allocation).
    #[error("CUDA driver error: {0}")]
    Driver(#[from] DriverError),
    #[error("out of device memory allocating {what} (~{mib} MiB): {fix}")]
    OutOfMemory {
        what: String,
        mib: usize,
        fix: String,
    },
    #[error("NVRTC could not compile cuda/{kernel}.cu for {arch} (options {options:?}):\n{log}")]
    Compile {
        kernel: String,
        arch: String,
        options: Vec<String>,
        log: String,
    },
    #[error("kernel {0:?} is not in the kernel table: is cuda/{0}.cu present, and does it declare that entry point?")]
    UnknownKernel(String),
    /// A cuBLASLt call failed at run time.
    #[error("cuBLASLt {op}: {detail}")]
    Gemm { op: String, detail: String },
    /// An invalid configuration (the oracle's validation).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A buffer, input or size that does not fit the launcher or the kernels it was given to.
    #[error("{0}")]
    Shape(String),
    #[error("graph {name}: {why}")]
    Graph { name: &'static str, why: String },
    /// Market data that could not be loaded or validated.
    #[error(transparent)]
    Data(#[from] MarketError),
    /// A training run that stopped (a non-finite value, or the CPU backend's refusal).
    #[error("{0}")]
    Train(String),
    /// A config file, a `--set` or a resolved config that is refused.
    #[error("{0}")]
    Settings(String),
    /// The CPU trainer stopped.
    #[error(transparent)]
    Oracle(#[from] tallyho_oracle::trainer::OracleError),
    /// A checkpoint that cannot be read, or is of another run.
    #[error("{0}")]
    Checkpoint(String),
    #[error("fixture {0}")]
    Fixture(String),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    /// `tallyho report` could not read a run folder or draw its figures.
    #[error(transparent)]
    Report(#[from] ReportError),
}

/// Why `tallyho report` (crate::report) could not read a run or draw its figures.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(
        "{} not found: point `tallyho report` at a run folder of `tallyho train` (the --out \
         folder, which holds metrics.jsonl)",
        path.display()
    )]
    NoMetrics { path: PathBuf },
    #[error("reading {}: {err}", path.display())]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{} line {line} is not a metrics window: {err}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        err: serde_json::Error,
    },
    #[error(
        "{} is empty: the run wrote no metrics window (train for at least --metrics-every steps)",
        path.display()
    )]
    EmptyMetrics { path: PathBuf },
    #[error("{}: {why}", path.display())]
    Eval { path: PathBuf, why: String },
    #[error("the embedded DejaVu Sans font is not one plotters can read")]
    Font,
    #[error("drawing {}: {why}", path.display())]
    Draw { path: PathBuf, why: String },
    #[error("writing {}: {err}", path.display())]
    Write { path: PathBuf, err: std::io::Error },
}
