//! The Q-network's sizes and constants, for its layers, its loss and its optimizer.

use serde::{Deserialize, Serialize};

use crate::action::ACTION_BRANCHES;
use crate::config::{require, ConfigError};
use crate::transition::MAX_N_STEP;

/// The largest layer width, atom count or state width a config may ask for: far above any
/// network trained here, and low enough that the parameter count cannot overflow.
pub const MAX_WIDTH: usize = 1 << 16;

/// Sizes and constants of the Q-network, its loss and its optimizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QNetConfig {
    /// State width S (floats per state), the input of the trunk.
    pub state_dim: usize,
    /// Width of the first trunk layer.
    pub h1: usize,
    /// Width of the second trunk layer, the input of every head.
    pub h2: usize,
    /// Hidden width of the value head.
    pub value_hidden: usize,
    /// Hidden width of each advantage head.
    pub adv_hidden: usize,
    /// Action count n_k of each branch (default: the action space, [`ACTION_BRANCHES`]).
    pub branches: Vec<usize>,
    /// Atoms NA per action: NA > 1 is C51 over `[v_min, v_max]`, NA = 1 is scalar Q with Huber.
    pub atoms: usize,
    /// Lowest atom of the C51 support (unused when NA = 1).
    pub v_min: f32,
    /// Highest atom of the C51 support (unused when NA = 1).
    pub v_max: f32,
    /// Discount per step, in (0, 1]: the n-step returns' gamma (the transition stage's). The
    /// loss does not read it: each replay row carries its own bootstrap discount (gamma^k, or
    /// 0 after a terminal).
    pub gamma: f32,
    /// Steps n of the n-step returns the transition stage assembles (1..=256); the loss reads
    /// each row's discount instead.
    pub n_step: u32,
    /// Huber threshold kappa (NA = 1 only).
    pub huber_kappa: f32,
    /// Adam learning rate.
    pub lr: f32,
    /// Adam first-moment decay beta1.
    pub adam_beta1: f32,
    /// Adam second-moment decay beta2.
    pub adam_beta2: f32,
    /// Adam denominator offset eps (added after the square root, as PyTorch does).
    pub adam_eps: f32,
    /// Maximum global L2 norm of the gradient.
    pub grad_clip: f32,
    /// Polyak rate tau of the target network; None: hard copy at each sync.
    pub polyak_tau: Option<f32>,
    /// Seed of the parameter initialisation.
    pub seed: u64,
}

impl Default for QNetConfig {
    fn default() -> Self {
        QNetConfig {
            state_dim: 32,
            h1: 256,
            h2: 256,
            value_hidden: 128,
            adv_hidden: 128,
            branches: ACTION_BRANCHES.to_vec(),
            atoms: 51,
            v_min: -10.0,
            v_max: 10.0,
            gamma: 0.99,
            n_step: 1,
            huber_kappa: 1.0,
            lr: 1e-4,
            adam_beta1: 0.9,
            adam_beta2: 0.999,
            adam_eps: 1e-8,
            grad_clip: 10.0,
            polyak_tau: None,
            seed: 0x7a11_1b0,
        }
    }
}

impl QNetConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let sizes = [
            ("state_dim", self.state_dim),
            ("h1", self.h1),
            ("h2", self.h2),
            ("value_hidden", self.value_hidden),
            ("adv_hidden", self.adv_hidden),
            ("atoms", self.atoms),
            ("n_step", self.n_step as usize),
            (
                "the number of action branches (branches.len())",
                self.branches.len(),
            ),
        ];
        for (name, v) in sizes {
            if v == 0 {
                return Err(ConfigError::Zero { name });
            }
        }
        let widths = [
            ("state_dim", self.state_dim),
            ("h1", self.h1),
            ("h2", self.h2),
            ("value_hidden", self.value_hidden),
            ("adv_hidden", self.adv_hidden),
            ("atoms", self.atoms),
        ];
        for (name, v) in widths {
            require(
                v <= MAX_WIDTH,
                name,
                v as f64,
                "[1, 65536]",
                "use a width of at most 65536 (the defaults are 256 wide, 51 atoms)",
            )?;
        }
        if self.branches.contains(&0) {
            return Err(ConfigError::Zero {
                name: "an action count in branches",
            });
        }
        if self.atoms > 1 {
            require(
                self.v_min.is_finite(),
                "v_min",
                self.v_min,
                "finite values",
                "give the support a finite lower end such as -10",
            )?;
            require(
                self.v_max.is_finite() && self.v_max > self.v_min,
                "v_max",
                self.v_max,
                "(v_min, +inf), finite",
                "set v_max above v_min: the C51 support [v_min, v_max] needs a positive width",
            )?;
        }
        #[rustfmt::skip]
        require(self.n_step as usize <= MAX_N_STEP, "n_step", self.n_step, "[1, 256]", "use a window of at most 256 steps (n-step returns use a few, e.g. 3)")?;
        let (g, k, lr) = (self.gamma, self.huber_kappa, self.lr);
        require(
            g > 0.0 && g <= 1.0,
            "gamma",
            g,
            "(0, 1]",
            "use a discount such as 0.99",
        )?;
        require(
            k > 0.0 && k.is_finite(),
            "huber_kappa",
            k,
            "(0, +inf)",
            "use a threshold such as 1.0",
        )?;
        require(
            lr > 0.0 && lr.is_finite(),
            "lr",
            lr,
            "(0, +inf)",
            "use a learning rate such as 1e-4",
        )?;
        let b1 = self.adam_beta1;
        require(
            (0.0..1.0).contains(&b1),
            "adam_beta1",
            b1,
            "[0, 1)",
            "use PyTorch's 0.9",
        )?;
        let b2 = self.adam_beta2;
        require(
            (0.0..1.0).contains(&b2),
            "adam_beta2",
            b2,
            "[0, 1)",
            "use PyTorch's 0.999",
        )?;
        let e = self.adam_eps;
        require(
            e > 0.0 && e.is_finite(),
            "adam_eps",
            e,
            "(0, +inf)",
            "use PyTorch's 1e-8",
        )?;
        let c = self.grad_clip;
        require(
            c > 0.0 && c.is_finite(),
            "grad_clip",
            c,
            "(0, +inf)",
            "use a max norm such as 10",
        )?;
        if let Some(t) = self.polyak_tau {
            require(
                t > 0.0 && t <= 1.0,
                "polyak_tau",
                t,
                "(0, 1]",
                "use a rate such as 0.005, or None for a hard copy",
            )?;
        }
        Ok(())
    }

    /// Number of action branches K.
    pub fn num_branches(&self) -> usize {
        self.branches.len()
    }
}
