//! Verification only: the GPU-vs-oracle parity checks (`parity`), the recorded fixtures
//! (`fixtures`), `tallyho verify` (`verify`) and `tallyho bench` (`bench`). No stage module
//! depends on it.

pub mod bench;
pub mod bench_train;
pub mod diverge;
pub mod fixtures;
pub mod mutants;
pub mod parity;
pub mod verify;
