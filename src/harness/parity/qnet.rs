//! GPU-vs-oracle checks of the Q-network (spec: tallyho_oracle::qnet): the forward, the
//! acting forward on each of its paths, the loss, the backward and whole updates.

use super::replay::random_transitions;
use crate::error::Result;
use crate::qnet::Products;
use crate::runtime::Gpu;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tallyho_oracle::qnet::branch_rows;
use tallyho_oracle::replay::Transitions;
use tallyho_oracle::{compare_exact, compare_f32, Comparison};

/// The batch sizes the Q-network is checked at: one row, a few, a partial block, a full
/// default batch and an odd large one.
pub const QNET_BATCHES: [usize; 5] = [1, 3, 50, 256, 783];

/// One Q-network case: the default network with `atoms` and `state_dim`, a batch, a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct QNetCase {
    pub atoms: usize,
    pub state_dim: usize,
    pub batch: usize,
    pub seed: u64,
}

impl QNetCase {
    pub fn config(&self) -> tallyho_oracle::qnet::QNetConfig {
        tallyho_oracle::qnet::QNetConfig {
            atoms: self.atoms,
            state_dim: self.state_dim,
            seed: self.seed,
            ..Default::default()
        }
    }
}

/// Everything a Q-network check starts from: config, online and target parameters (two
/// seeds), a batch with importance weights in (0, 1], and the network on the device with the
/// batch uploaded.
pub struct QNetSetup {
    pub cfg: tallyho_oracle::qnet::QNetConfig,
    pub online: Vec<f32>,
    pub target: Vec<f32>,
    pub batch: Transitions,
    pub weights: Vec<f32>,
    pub net: crate::qnet::QNet,
    pub device_batch: crate::replay::DeviceTransitions,
    pub device_weights: cudarc::driver::CudaSlice<f32>,
}

impl QNetSetup {
    pub fn new(gpu: &Gpu, case: &QNetCase) -> Result<Self> {
        Self::of(gpu, case.config(), case.batch)
    }

    /// The setup of any network `cfg` (its seed seeds the batch too) on `batch` transitions.
    pub fn of(gpu: &Gpu, cfg: tallyho_oracle::qnet::QNetConfig, batch: usize) -> Result<Self> {
        use tallyho_oracle::qnet::{init_params, QNetConfig};
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x51e7);
        let online = init_params(&cfg);
        let target = init_params(&QNetConfig {
            seed: cfg.seed.wrapping_add(1),
            ..cfg.clone()
        });
        let transitions = random_transitions(&mut rng, batch, cfg.state_dim);
        let weights: Vec<f32> = (0..batch).map(|_| rng.gen_range(0.05f32..=1.0)).collect();
        let mut net = crate::qnet::QNet::new(gpu, &cfg, batch)?;
        net.set_params(&online, &target)?;
        let mut device_batch =
            crate::replay::DeviceTransitions::alloc(&gpu.stream, batch, cfg.state_dim)?;
        device_batch.upload(&gpu.stream, &transitions, cfg.state_dim)?;
        let batch = transitions;
        let device_weights = gpu.stream.clone_htod(&weights)?;
        Ok(QNetSetup {
            cfg,
            online,
            target,
            batch,
            weights,
            net,
            device_batch,
            device_weights,
        })
    }

    /// The states then the next states: the 2B rows every forward runs on.
    pub fn stacked_states(&self) -> Vec<f32> {
        [
            self.batch.states.as_slice(),
            self.batch.next_states.as_slice(),
        ]
        .concat()
    }

    pub fn forward(&mut self) -> Result<()> {
        self.net
            .forward(&self.device_batch.states, &self.device_batch.next_states)
    }
}

/// The inverse of `qnet::branch_rows` for the GPU's rows `range`, widened.
fn split_branches(
    cfg: &tallyho_oracle::qnet::QNetConfig,
    all: &[f32],
    range: std::ops::Range<usize>,
    per_action: usize,
) -> Vec<Vec<f64>> {
    let width: usize = cfg.branches.iter().sum::<usize>() * per_action;
    let mut out: Vec<Vec<f64>> = cfg.branches.iter().map(|_| Vec::new()).collect();
    if all.len() < range.end * width {
        return out; // not read back: empty
    }
    for i in range {
        let mut col = i * width;
        for (k, &n) in cfg.branches.iter().enumerate() {
            out[k].extend(all[col..col + n * per_action].iter().map(|&v| f64::from(v)));
            col += n * per_action;
        }
    }
    out
}

fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

/// The oracle's `Forward` holding the GPU's outputs for rows `range` of one network: the
/// activations and head outputs the loss and the backward read.
pub fn forward_of_gpu(
    cfg: &tallyho_oracle::qnet::QNetConfig,
    out: &crate::qnet::ForwardOut,
    states: &[f32],
    range: std::ops::Range<usize>,
) -> tallyho_oracle::qnet::Forward {
    use tallyho_oracle::qnet::hidden_width;
    // Outputs a caller did not read back are empty and stay empty.
    let rows = |x: &[f32], w: usize| {
        x.get(range.start * w..range.end * w)
            .map_or_else(Vec::new, widen)
    };
    let na = cfg.atoms;
    let c51 = na > 1;
    tallyho_oracle::qnet::Forward {
        batch: range.len(),
        states: widen(states),
        h1: rows(&out.h1, cfg.h1),
        h2: rows(&out.h2, cfg.h2),
        heads_hidden: rows(&out.heads_hidden, hidden_width(cfg)),
        value: Vec::new(),
        adv: Vec::new(),
        logits: split_branches(cfg, &out.logits, range.clone(), na),
        log_probs: if c51 {
            split_branches(cfg, &out.log_probs, range.clone(), na)
        } else {
            vec![Vec::new(); cfg.num_branches()]
        },
        probs: if c51 {
            split_branches(cfg, &out.probs, range.clone(), na)
        } else {
            vec![Vec::new(); cfg.num_branches()]
        },
        q: split_branches(cfg, &out.q, range, 1),
    }
}

/// The reduction lengths each forward output went through (for `tolerance::gemm_chain`).
pub(crate) fn forward_chain(cfg: &tallyho_oracle::qnet::QNetConfig) -> [Vec<usize>; 4] {
    let head_in = cfg.value_hidden.max(cfg.adv_hidden);
    let n_max = cfg.branches.iter().copied().max().unwrap_or(1);
    let h1 = vec![cfg.state_dim + 1];
    let h2 = [h1.clone(), vec![cfg.h1 + 1]].concat();
    let hh = [h2.clone(), vec![cfg.h2 + 1]].concat();
    // Head outputs: one more GEMM, then the dueling mean over n_k and the softmax over NA.
    let head = [hh.clone(), vec![head_in, n_max, cfg.atoms]].concat();
    [h1, h2, hh, head]
}

/// `qnet_forward` + `qnet_head` for both networks on the stacked rows [s; s'] against the
/// oracle's forward of each network's parameters.
pub fn check_qnet_forward(gpu: &Gpu, case: &QNetCase) -> Result<Vec<Comparison>> {
    use tallyho_oracle::compare_rel_norm;
    use tallyho_oracle::tolerance::gemm_chain;
    let mut st = QNetSetup::new(gpu, case)?;
    st.net.poison_outputs()?;
    st.forward()?;
    let (cfg, x) = (&st.cfg, st.stacked_states());
    let [t1, t2, th, tout] = forward_chain(cfg).map(|l| gemm_chain(&l));
    let mut out = Vec::new();
    for (net, name, params) in [(0, "online", &st.online), (1, "target", &st.target)] {
        let want = tallyho_oracle::qnet::forward(cfg, params, &x);
        let got = st.net.read_forward(net)?;
        let rows = 2 * case.batch;
        out.push(compare_rel_norm(
            &format!("{name} h1"),
            &got.h1,
            &want.h1,
            t1,
        ));
        out.push(compare_rel_norm(
            &format!("{name} h2"),
            &got.h2,
            &want.h2,
            t2,
        ));
        out.push(compare_rel_norm(
            &format!("{name} heads hidden"),
            &got.heads_hidden,
            &want.heads_hidden,
            th,
        ));
        let na = cfg.atoms;
        out.push(compare_rel_norm(
            &format!("{name} logits"),
            &got.logits,
            &branch_rows(cfg, &want.logits, rows, na),
            tout,
        ));
        if na > 1 {
            let lp = branch_rows(cfg, &want.log_probs, rows, na);
            out.push(compare_rel_norm(
                &format!("{name} log_probs"),
                &got.log_probs,
                &lp,
                tout,
            ));
            let p = branch_rows(cfg, &want.probs, rows, na);
            out.push(compare_rel_norm(
                &format!("{name} probs"),
                &got.probs,
                &p,
                tout,
            ));
        }
        out.push(compare_rel_norm(
            &format!("{name} q"),
            &got.q,
            &branch_rows(cfg, &want.q, rows, 1),
            tout,
        ));
    }
    Ok(out)
}

/// The acting forward (`QNet::act`: the online network on N states, `qnet_head_q` at its
/// end) on `case.batch` random states against the oracle: see [`acting_comparisons`].
pub fn check_acting(gpu: &Gpu, case: &QNetCase) -> Result<Vec<Comparison>> {
    check_acting_with(gpu, case, ActingPath::Act)
}

/// How an acting check runs the forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActingPath {
    /// What [`crate::qnet::QNet::act`] runs by default: layer by layer.
    Act,
    /// `qnet_act`, one launch, with this many rows per block (None: the rule's choice, which
    /// must be qnet_act). The check fails if the network does not fit a block.
    Fused(Option<usize>),
    /// Layer by layer in float32 (acting on networks too wide for one block).
    Layers,
    /// Layer by layer with TF32 products (the option), held to the TF32 chain's bound.
    Tf32,
}

/// [`check_acting`] on the path `path`.
pub fn check_acting_with(gpu: &Gpu, case: &QNetCase, path: ActingPath) -> Result<Vec<Comparison>> {
    check_acting_net(gpu, case.config(), case.batch, path)
}

/// The acting forward of any network `cfg` on `rows` random states (seeded by the config's
/// seed) on `path`, against the oracle: the head-output rows plus bias and Q
/// ([`acting_comparisons`]).
pub fn check_acting_net(
    gpu: &Gpu,
    cfg: tallyho_oracle::qnet::QNetConfig,
    rows: usize,
    path: ActingPath,
) -> Result<Vec<Comparison>> {
    let mut st = QNetSetup::of(gpu, cfg, rows)?;
    st.net.set_tf32(path == ActingPath::Tf32);
    if let ActingPath::Fused(block_rows) = path {
        st.net.set_act_fused(true);
        st.net.set_act_block_rows(block_rows)?;
        if st.net.act_block_rows(rows).is_none() {
            return Err(crate::error::Error::Shape(
                "acting check: this network does not fit one qnet_act block".into(),
            ));
        }
    }
    let cfg = &st.cfg;
    let states = &st.batch.states;
    let x: Vec<f32> = states
        .chunks_exact(cfg.state_dim)
        .flat_map(|r| r.iter().copied().chain([1.0]))
        .collect();
    let x = gpu.stream.clone_htod(&x)?;
    let mut acting = st.net.acting(rows)?;
    let products = match path {
        ActingPath::Act | ActingPath::Fused(_) => {
            st.net.act(&x, &mut acting)?;
            st.net.acting_products(rows)
        }
        ActingPath::Layers | ActingPath::Tf32 => {
            st.net.act_layers(&x, &mut acting)?;
            if st.net.tf32() {
                Products::Tf32
            } else {
                Products::Float32
            }
        }
    };
    let (y, q) = (
        st.net.read_acting_outputs(&acting)?,
        st.net.read_acting(&acting)?,
    );
    acting_comparisons(cfg, products, &st.online, states, &y, &q)
}

/// An acting forward's outputs against the oracle, stage by stage: the head-output rows
/// plus bias against the oracle's forward of `states` (the GEMM chain's bound for the
/// arithmetic of its `products`), then Q by [`acting_q_comparison`].
pub(crate) fn acting_comparisons(
    cfg: &tallyho_oracle::qnet::QNetConfig,
    products: Products,
    online: &[f32],
    states: &[f32],
    y: &[f32],
    q: &[f32],
) -> Result<Vec<Comparison>> {
    use tallyho_oracle::compare_rel_norm;
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::{gemm_chain, gemm_chain_3xtf32, gemm_chain_tf32};
    let bias = head_bias(cfg, online)?;
    let (yb, _) = rows_plus_bias(y, bias);
    let want_y = spec::head_rows(cfg, &spec::forward(cfg, online, states));
    let [h1, _, hh, _] = forward_chain(cfg);
    let head_in = cfg.value_hidden.max(cfg.adv_hidden);
    // Layer by layer, the first layer is qnet_first_layer's float32 FMA chain either way.
    let later = [&hh[h1.len()..], &[head_in + 1]].concat();
    let chain = match products {
        Products::Float32 => gemm_chain(&[h1, later].concat()),
        Products::Tf32x3 => gemm_chain_3xtf32(&[h1, later].concat()),
        Products::Tf32 => gemm_chain_tf32(&h1, &later),
    };
    Ok(vec![
        compare_rel_norm("acting head outputs", &yb, &want_y, chain),
        acting_q_comparison(cfg, y, bias, q),
    ])
}

/// `qnet_head_q`'s Q (`q`) against the oracle's head in f64 on the same head-output rows `y`
/// plus `bias`, by the FlashAttention rule (`tolerance::reduction_rule`) with
/// `qnet::head_q_f32`, the float reference: the acting head computes in float, so its error
/// is a few float ulps of sum_z p_z |z_z|, which a relative bound on Q itself (near 0 where
/// the distribution is centred) cannot express.
pub(crate) fn acting_q_comparison(
    cfg: &tallyho_oracle::qnet::QNetConfig,
    y: &[f32],
    bias: &[f32],
    q: &[f32],
) -> Comparison {
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::reduction_rule;
    let (yb32, yb64) = rows_plus_bias(y, bias);
    let want = spec::head_q(cfg, &yb64);
    compare_f32(
        "acting q",
        q,
        &want,
        reduction_rule(&spec::head_q_f32(cfg, &yb32), &want),
    )
}

/// The head-output bias `bo` of a network's parameters (row H of its dense head matrix).
pub(crate) fn head_bias<'a>(
    cfg: &tallyho_oracle::qnet::QNetConfig,
    params: &'a [f32],
) -> Result<&'a [f32]> {
    let bo = tallyho_oracle::qnet::tensor(cfg, "bo")
        .ok_or_else(|| crate::error::Error::Shape("the layout has no bo".into()))?;
    Ok(&params[bo.range()])
}

/// Head-output rows `y` plus the bias of each column: in float (the kernels' sum) and exactly.
pub(crate) fn rows_plus_bias(y: &[f32], bias: &[f32]) -> (Vec<f32>, Vec<f64>) {
    let width = bias.len().max(1);
    let f32s = y
        .chunks_exact(width)
        .flat_map(|r| r.iter().zip(bias).map(|(&v, &b)| v + b))
        .collect();
    let exact = y
        .chunks_exact(width)
        .flat_map(|r| {
            r.iter()
                .zip(bias)
                .map(|(&v, &b)| f64::from(v) + f64::from(b))
        })
        .collect();
    (f32s, exact)
}

/// `qnet_loss` (its batch loss included) against the oracle's loss evaluated on the GPU's own
/// forward outputs: the Double DQN actions exactly, then the loss at those actions.
pub fn check_qnet_loss(gpu: &Gpu, case: &QNetCase) -> Result<Vec<Comparison>> {
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::QNET_LOSS;
    let mut st = QNetSetup::new(gpu, case)?;
    st.net.poison_outputs()?;
    st.forward()?;
    st.net.loss(&st.device_batch, &st.device_weights)?;
    let (cfg, b, t) = (&st.cfg, case.batch, &st.batch);
    let (on, tg) = (st.net.read_forward(0)?, st.net.read_forward(1)?);
    let on_s = forward_of_gpu(cfg, &on, &t.states, 0..b);
    let on_s2 = forward_of_gpu(cfg, &on, &t.next_states, b..2 * b);
    let tg_s2 = forward_of_gpu(cfg, &tg, &t.next_states, b..2 * b);
    let got = st.net.read_loss()?;
    let want_next = spec::next_actions(cfg, &on_s2);
    let want = spec::loss_with_next_actions(
        cfg,
        &on_s,
        &tg_s2,
        &want_next,
        &t.actions,
        &t.rewards,
        &t.discounts,
        &st.weights,
    );
    let sample_loss: Vec<f32> = got.sample_loss.iter().map(|&v| v as f32).collect();
    Ok(vec![
        compare_exact("next actions", &got.next_actions, &want_next),
        compare_f32("loss", &[got.loss as f32], &[want.loss], QNET_LOSS),
        compare_f32(
            "sample loss",
            &sample_loss,
            &want.replay_sample_loss,
            QNET_LOSS,
        ),
        compare_f32(
            "priorities",
            &got.priorities,
            &want.replay_sample_priority,
            QNET_LOSS,
        ),
        compare_f32(
            "head gradient",
            &got.head_grad,
            &spec::head_grad(cfg, &want.dlogits, b),
            QNET_LOSS,
        ),
    ])
}

/// The backward GEMMs and `qnet_backward` against the oracle's backward from the GPU's own
/// activations and head-output gradient (so the ReLU masks are the same), tensor by tensor.
pub fn check_qnet_backward(gpu: &Gpu, case: &QNetCase) -> Result<Vec<Comparison>> {
    use tallyho_oracle::compare_rel_norm;
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::gemm_chain;
    let mut st = QNetSetup::new(gpu, case)?;
    st.net.poison_outputs()?;
    st.forward()?;
    st.net.loss(&st.device_batch, &st.device_weights)?;
    st.net.backward()?;
    let (cfg, b) = (&st.cfg, case.batch);
    let fwd = forward_of_gpu(cfg, &st.net.read_forward(0)?, &st.batch.states, 0..b);
    let dy = widen(&st.net.read_loss()?.head_grad);
    let want = spec::backward_from_head_grad(cfg, &st.online, &fwd, &dy);
    let got = st.net.grads()?;
    // The deepest gradient (w1) went through every backward product: dy w2^T (fan-out of a
    // head, at most n_max NA), dhh wh^T (H), dh2 w2^T (h2), then x^T dh1 over the batch.
    let n_max = cfg.branches.iter().copied().max().unwrap_or(1);
    let tol = gemm_chain(&[
        n_max * cfg.atoms,
        spec::hidden_width(cfg),
        cfg.h2,
        cfg.h1,
        b,
    ]);
    Ok(spec::layout(cfg)
        .into_iter()
        .map(|v| {
            compare_rel_norm(
                &format!("grad {}", v.name),
                &got[v.range()],
                &want[v.range()],
                tol,
            )
        })
        .collect())
}

/// `steps` full updates (forward, loss, backward, clip, Adam) of the GPU network and of the
/// oracle's `update_step` from the same parameters on the same batch. Per step: the
/// parameter displacement (`tolerance::QNET_TRAJECTORY`), the loss, the gradient norm and
/// the priorities. Each output's comparisons are merged over the steps; the output's name
/// says the first step that failed.
pub fn check_qnet_update(gpu: &Gpu, case: &QNetCase, steps: u32) -> Result<Vec<Comparison>> {
    use tallyho_oracle::compare_rel_norm;
    use tallyho_oracle::optimizer::AdamState;
    use tallyho_oracle::qnet as spec;
    use tallyho_oracle::tolerance::{gemm_chain, QNET_TRAJECTORY};
    let mut st = QNetSetup::new(gpu, case)?;
    let cfg = st.cfg.clone();
    let mut online = st.online.clone();
    let p0 = widen(&online);
    let mut adam = AdamState::new(online.len());
    let [.., fwd_chain] = forward_chain(&cfg);
    let n_max = cfg.branches.iter().copied().max().unwrap_or(1);
    let bwd_chain = [
        fwd_chain.clone(),
        vec![
            n_max * cfg.atoms,
            spec::hidden_width(&cfg),
            cfg.h2,
            cfg.h1,
            case.batch,
        ],
    ]
    .concat();
    let (loss_tol, grad_tol) = (gemm_chain(&fwd_chain), gemm_chain(&bwd_chain));
    let mut merged: Vec<Comparison> = Vec::new();
    for step in 1..=steps {
        st.net.update(&st.device_batch, &st.device_weights)?;
        let want = spec::update_step(
            &cfg,
            &mut online,
            &st.target,
            &mut adam,
            &st.batch,
            &st.weights,
        )
        .map_err(|e| crate::Error::Shape(format!("oracle update: {e}")))?;
        let got = st.net.read_loss()?;
        let (got_p, _) = st.net.params()?;
        let disp = |p: &[f32]| -> Vec<f64> {
            p.iter()
                .zip(&p0)
                .map(|(&x, &x0)| f64::from(x) - x0)
                .collect()
        };
        let got_disp: Vec<f32> = disp(&got_p).iter().map(|&v| v as f32).collect();
        let ctl = st.net.opt.ctl()?;
        let now = vec![
            compare_rel_norm(
                "parameter displacement",
                &got_disp,
                &disp(&online),
                QNET_TRAJECTORY,
            ),
            compare_rel_norm("loss", &[got.loss as f32], &[want.loss], loss_tol),
            compare_rel_norm("priorities", &got.priorities, &want.priorities, loss_tol),
            compare_rel_norm("gradient norm", &[ctl.norm], &[want.grad_norm], grad_tol),
            compare_exact("adam step", &[ctl.step], &[adam.step]),
        ];
        if merged.is_empty() {
            merged = now;
        } else {
            for (m, c) in merged.iter_mut().zip(&now) {
                if m.passed() && !c.passed() {
                    m.output = format!("{} (first failed at step {step})", m.output);
                }
                m.merge(c);
            }
        }
    }
    Ok(merged)
}
