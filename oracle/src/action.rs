//! The action space, defined once: three branches (action branching, Tavakoli et al. 2018),
//! direction {hold, buy, sell}, size {1, ..., 5} contracts (action j trades j + 1), order
//! type {market, IOC, limit}. An action is one index per branch, stored as i32 in branch
//! order; the Q-network has one advantage head per branch ([`crate::qnet::QNetConfig::branches`]),
//! the replay stores [`BRANCH_COUNT`] actions per transition, and `fill_step`
//! ([`crate::env::fill_step`]) reads them by the branch indices below.

/// Number of action branches K: direction, size, order type.
pub const BRANCH_COUNT: usize = 3;

/// Actions per branch n_k, in branch order: direction 3, size 5, order type 3.
pub const ACTION_BRANCHES: [usize; BRANCH_COUNT] = [3, 5, 3];

/// Branch indices: direction, size, order type.
pub const BRANCH_DIRECTION: usize = 0;
pub const BRANCH_SIZE: usize = 1;
pub const BRANCH_ORDER_TYPE: usize = 2;

/// Direction actions.
pub const HOLD: i32 = 0;
pub const BUY: i32 = 1;
pub const SELL: i32 = 2;

/// Order types.
pub const MARKET: i32 = 0;
pub const IOC: i32 = 1;
pub const LIMIT: i32 = 2;
