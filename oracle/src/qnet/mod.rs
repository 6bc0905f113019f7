//! The Q-network: the spec of the `qnet_*` kernels in cuda/ and their launchers. Everything
//! here is computed in f64 from f32 inputs; every f32 constant of the config enters the math
//! widened exactly to f64 (`f64::from`), which is the value the GPU's f32 holds.
//!
//! **Network.** A shared trunk, a value head and one advantage head per action branch
//! (action branching, Tavakoli et al. 2018, "Action Branching Architectures for Deep
//! Reinforcement Learning"), combined per branch by the dueling rule (Wang et al. 2016,
//! "Dueling Network Architectures for Deep Reinforcement Learning"). Each head outputs NA
//! atoms per action: NA > 1 is a categorical distribution over a fixed support (C51,
//! Bellemare et al. 2017, "A Distributional Perspective on Reinforcement Learning"); NA = 1
//! is a scalar Q trained with the Huber loss. A layer is `y = x W + b` on row vectors, W
//! row-major `[in, out]`; `relu(z) = z if z > 0 else 0`, whose derivative is taken as
//! `1 if relu(z) > 0 else 0` (0 at the kink).
//!
//! The parts, in the order one update runs them: [`config`] (sizes and constants),
//! [`layout`](mod@layout) (the flat parameter buffer and its initialisation), [`forward`](mod@forward), [`loss`](mod@loss),
//! [`backward`](mod@backward), and [`update`] (one full update). The optimizer (gradient clipping, Adam,
//! target sync) is [`crate::optimizer`].

pub mod backward;
pub mod config;
pub mod forward;
pub mod layout;
pub mod loss;
pub mod update;

pub use backward::{backward, backward_from_head_grad, head_grad};
pub use config::QNetConfig;
pub use forward::{
    branch_rows, forward, head, head_outputs, head_q, head_q_f32, head_rows, support, Forward,
};
pub use layout::{
    hidden_width, init_params, layout, output_offsets, output_width, param_count, tensor,
    TensorView,
};
pub use loss::{c51_project, huber, huber_grad, loss, loss_with_next_actions, next_actions, Loss};
pub use update::{check_batch, update_step, update_step_at, QNetError, Update};
