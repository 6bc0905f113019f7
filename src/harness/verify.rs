//! `tallyho verify`: the parity matrix on the GPU. Every kernel runs on fresh random
//! inputs against the oracle (the same checks as the property tests, from `parity`), and
//! on the recorded fixtures against their recorded outputs; one row per kernel output.

use crate::error::Result;
use crate::harness::fixtures::{self, Replayer};
use crate::harness::parity::{self, replay::ReplayCase};
use crate::reward::RewardPath;
use crate::runtime::Gpu;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use tallyho_oracle::Comparison;

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub kernel: String,
    pub output: String,
    pub cases: usize,
    pub elements: usize,
    pub max_abs: f64,
    pub max_rel: f64,
    pub max_ulp: u64,
    /// Relative L2 error of the whole output, for outputs under a norm tolerance.
    pub rel_norm: Option<f64>,
    pub tolerance: String,
    pub passed: bool,
    pub first_failure: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub device: String,
    pub driver: String,
    pub seed: u64,
    pub rows: Vec<Row>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.rows.iter().all(|r| r.passed)
    }
}

/// Accumulates comparisons into rows keyed by (kernel, output).
#[derive(Default)]
struct Matrix {
    rows: BTreeMap<(String, String), (usize, Comparison)>,
    order: Vec<(String, String)>,
}

impl Matrix {
    fn add(&mut self, kernel: &str, comparisons: Vec<Comparison>) {
        for c in comparisons {
            let key = (kernel.to_string(), c.output.clone());
            match self.rows.get_mut(&key) {
                Some((n, acc)) => {
                    *n += 1;
                    acc.merge(&c);
                }
                None => {
                    self.order.push(key.clone());
                    self.rows.insert(key, (1, c));
                }
            }
        }
    }

    fn into_rows(mut self) -> Vec<Row> {
        self.order
            .iter()
            .filter_map(|key| self.rows.remove(key).map(|(cases, c)| (key, cases, c)))
            .map(|((kernel, _), cases, c)| Row {
                kernel: kernel.clone(),
                output: c.output.clone(),
                cases,
                elements: c.len,
                max_abs: c.max_abs,
                max_rel: c.max_rel,
                max_ulp: c.max_ulp,
                rel_norm: c.tolerance.norm.then_some(c.rel_norm),
                tolerance: c.tolerance.describe(),
                passed: c.passed(),
                first_failure: c.check().err(),
            })
            .collect()
    }
}

/// Run `cases` random cases of every kernel, seeded by `seed`, and the fixtures in `fixture_dir`.
pub fn run(
    gpu: &Gpu,
    cases: usize,
    seed: u64,
    fixture_dir: &Path,
    progress: impl Fn(&str),
) -> Result<Report> {
    gpu.load_all()?;
    let mut m = Matrix::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    progress("philox");
    for (i, n) in [1, 3, 50, 783, 4096, 100_003].into_iter().enumerate() {
        m.add(
            "philox",
            parity::philox::check_philox(gpu, n, seed.wrapping_add(i as u64))?,
        );
    }
    for i in 0..cases {
        progress(&format!("replay case {}/{cases}", i + 1));
        let case = ReplayCase::random(&mut rng);
        m.add(
            "replay_insert",
            parity::replay::check_replay_insert(gpu, &case, case.batch * 3 / 2 + 1)?,
        );
        m.add(
            "replay_sample",
            parity::replay::check_replay_sample(gpu, &case)?,
        );
        m.add(
            "replay_gather",
            parity::replay::check_replay_gather(gpu, &case)?,
        );
        m.add(
            "replay_update_priorities",
            parity::replay::check_replay_update_priorities(gpu, &case)?,
        );
    }
    // Its own stream, so that the other stages' cases stay those of earlier reports.
    let mut transition_rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(400));
    for i in 0..cases {
        progress(&format!("transition case {}/{cases}", i + 1));
        let case = parity::transition::TransitionCase::random(&mut transition_rng);
        m.add(
            "transition_assemble",
            parity::transition::check_transition_assemble(gpu, &case)?,
        );
    }
    progress("schedules");
    for (i, s) in [(0.9, 0.05, 7), (1.0, 0.1, 1000), (0.3, 0.3, 0)]
        .into_iter()
        .enumerate()
    {
        let sched = tallyho_oracle::schedule::EpsilonSchedule {
            start: s.0,
            end: s.1,
            steps: s.2,
        };
        let steps = if i == 1 { 1003 } else { 12 };
        m.add(
            "schedule_epsilon",
            parity::schedule::check_schedule_epsilon(gpu, &sched, steps)?,
        );
    }
    progress("optimizer");
    for (i, (n, scale)) in [(1, 3.0), (783, 20.0), (4096, 0.01), (1_000_003, 0.05)]
        .into_iter()
        .enumerate()
    {
        m.add(
            "optimizer_grad_norm",
            parity::optimizer::check_optimizer_grad_norm(
                gpu,
                n,
                scale,
                seed.wrapping_add(100 + i as u64),
            )?,
        );
    }
    for (i, (n, step, g)) in [(3, 7, 50.0), (783, 0, 0.3), (100_003, 1234, 5.0)]
        .into_iter()
        .enumerate()
    {
        m.add(
            "optimizer_adam",
            parity::optimizer::check_optimizer_adam(
                gpu,
                n,
                step,
                g,
                seed.wrapping_add(200 + i as u64),
            )?,
        );
    }
    m.add(
        "optimizer_target_sync",
        parity::optimizer::check_optimizer_target_sync(gpu, 4099, seed.wrapping_add(300))?,
    );
    for (i, (n, period)) in [(1, 1), (4099, 3), (100_003, 1000)].into_iter().enumerate() {
        m.add(
            "optimizer_target_sync_every",
            parity::optimizer::check_optimizer_target_sync_every(
                gpu,
                n,
                period,
                seed.wrapping_add(310 + i as u64),
            )?,
        );
    }
    progress("training metrics");
    {
        use parity::trainer_metrics::{self as pm, MetricsCase, BRANCHES};
        // Fixed sizes around one block, with and without non-finite inputs, then random
        // cases from a stream of their own.
        let mut metrics_rng = ChaCha8Rng::seed_from_u64(seed.wrapping_add(600));
        let fixed = [1, 255, 257, 4099]
            .into_iter()
            .enumerate()
            .map(|(i, envs)| MetricsCase {
                envs,
                branches: BRANCHES.to_vec(),
                steps: 4,
                updates_per_step: 2,
                special: i % 2 == 1,
                seed: seed.wrapping_add(610 + i as u64),
            });
        let cases: Vec<MetricsCase> = fixed
            .chain((0..cases).map(|_| MetricsCase::random(&mut metrics_rng)))
            .collect();
        for case in &cases {
            m.add(
                "trainer_metrics_step",
                pm::check_trainer_metrics_step(gpu, case)?,
            );
            m.add(
                "trainer_metrics_update",
                pm::check_trainer_metrics_update(gpu, case)?,
            );
        }
    }
    for atoms in [51, 1] {
        for (i, &batch) in parity::qnet::QNET_BATCHES.iter().enumerate() {
            progress(&format!("Q-network, {atoms} atoms, batch {batch}"));
            let case = parity::qnet::QNetCase {
                atoms,
                state_dim: 32,
                batch,
                seed: seed.wrapping_add(400 + i as u64),
            };
            let (trunk, head): (Vec<_>, Vec<_>) = parity::qnet::check_qnet_forward(gpu, &case)?
                .into_iter()
                .partition(|c| c.output.contains(" h"));
            m.add(&format!("qnet_forward (NA {atoms})"), trunk);
            m.add(&format!("qnet_head (NA {atoms})"), head);
            m.add(
                &format!("acting (NA {atoms})"),
                parity::qnet::check_acting(gpu, &case)?,
            );
            m.add(
                &format!("qnet_loss (NA {atoms})"),
                parity::qnet::check_qnet_loss(gpu, &case)?,
            );
            m.add(
                &format!("qnet_backward (NA {atoms})"),
                parity::qnet::check_qnet_backward(gpu, &case)?,
            );
        }
        progress(&format!("Q-network, {atoms} atoms: acting on 4096 states"));
        let case = parity::qnet::QNetCase {
            atoms,
            state_dim: 15,
            batch: 4096,
            seed: seed.wrapping_add(450),
        };
        m.add(
            &format!("qnet_act, acting (NA {atoms})"),
            parity::qnet::check_acting_with(gpu, &case, parity::qnet::ActingPath::Fused(None))?,
        );
        m.add(
            &format!("acting layer by layer (NA {atoms})"),
            parity::qnet::check_acting_with(gpu, &case, parity::qnet::ActingPath::Layers)?,
        );
        m.add(
            &format!("acting, tf32 option (NA {atoms})"),
            parity::qnet::check_acting_with(gpu, &case, parity::qnet::ActingPath::Tf32)?,
        );
        progress(&format!(
            "Q-network, {atoms} atoms: 10 updates against the oracle"
        ));
        let case = parity::qnet::QNetCase {
            atoms,
            state_dim: 32,
            batch: 64,
            seed: seed.wrapping_add(500),
        };
        m.add(
            &format!("qnet update x10 (NA {atoms})"),
            parity::qnet::check_qnet_update(gpu, &case, 10)?,
        );
    }
    for i in 0..cases {
        progress(&format!("environment case {}/{cases}", i + 1));
        let case = parity::env::EnvCase::random(&mut rng);
        m.add("state_gather", parity::env::check_state_gather(gpu, &case)?);
        m.add(
            "action_select",
            parity::env::check_action_select(gpu, &case)?,
        );
        m.add("fill_step", parity::env::check_fill_step(gpu, &case)?);
        m.add("barriers", parity::env::check_barriers(gpu, &case)?);
        m.add("env_step", parity::env::check_env_step(gpu, &case)?);
    }
    progress("experience: 50 steps of 256 envs on the synthetic market, and its graph replay");
    {
        use tallyho_oracle::env::{EnvConfig, EnvMarket, Split};
        let market = crate::env::load_market(None)?;
        let (em, split) = (EnvMarket::of(&market), Split::train(&market));
        let cfg = EnvConfig {
            envs: 256,
            seed,
            ..EnvConfig::default()
        };
        m.add(
            "experience x50",
            parity::env::check_experience(gpu, &cfg, &em, split, 0.2, 50, 10)?.0,
        );
        m.add(
            "experience graph vs eager x10",
            parity::env::check_experience_graph(gpu, &cfg, &em, split, 10, None)?,
        );
        m.add(
            "experience graph vs eager x10, qnet_act",
            parity::env::check_experience_graph(gpu, &cfg, &em, split, 10, Some(32))?,
        );
    }
    progress("reward pipeline");
    {
        use parity::reward::{self as pr, Mix};
        use tallyho_oracle::reward::Stage;
        // The cases alternate between the differential Sharpe ratio option off and on.
        let configs = pr::check_configs();
        for i in 0..cases {
            progress(&format!("reward case {}/{cases}", i + 1));
            let (n, mix, s) = (
                rng.gen_range(1..=9000),
                Mix::ALL[rng.gen_range(0..3)],
                rng.gen::<u64>(),
            );
            let cfg = &configs[i % configs.len()];
            for stage in Stage::ALL {
                m.add(stage.kernel(), pr::check_stage(gpu, cfg, stage, n, mix, s)?);
            }
            m.add(
                "reward_stages (whole steps x6)",
                pr::check_steps(gpu, cfg, RewardPath::Unfused, n, mix, 6, s)?,
            );
            m.add(
                "reward_fused (whole steps x6)",
                pr::check_steps(gpu, cfg, RewardPath::Fused, n, mix, 6, s)?,
            );
            m.add(
                "reward_fused vs reward_stages x6",
                pr::check_fused_vs_unfused(gpu, cfg, n, 6, s)?,
            );
        }
        progress("reward pipeline: graph replay (the DSR option on), and 500 free-running steps");
        let (cfg, with_dsr) = (pr::check_config(), pr::check_config_with_dsr());
        for (path, name) in [
            (RewardPath::Unfused, "reward_stages"),
            (RewardPath::Fused, "reward_fused"),
        ] {
            m.add(
                &format!("{name} graph vs eager x10"),
                pr::check_graph(gpu, &with_dsr, path, 4096, 10, seed)?,
            );
            m.add(
                &format!("{name} EMAs x500 free-running"),
                pr::check_drift(gpu, &cfg, path, 4096, 500, seed)?,
            );
        }
    }
    progress("fixtures");
    match fixtures::check(fixture_dir, Replayer::Gpu(gpu)) {
        Ok(pairs) => {
            for (kernel, c) in pairs {
                m.add(&format!("{kernel} (fixture)"), vec![c]);
            }
        }
        Err(e) => {
            let mut c = tallyho_oracle::compare_exact::<u32>("recorded outputs", &[1], &[0]);
            c.output = format!("fixtures: {e}");
            m.add("fixtures", vec![c]);
        }
    }
    Ok(Report {
        device: gpu.name(),
        driver: gpu.driver_version(),
        seed,
        rows: m.into_rows(),
    })
}

fn table(report: &Report, markdown: bool) -> String {
    let head = [
        "kernel",
        "output",
        "cases",
        "elements",
        "max abs",
        "max rel",
        "max ULP",
        "rel L2",
        "tolerance",
        "verdict",
    ];
    let body: Vec<[String; 10]> = report
        .rows
        .iter()
        .map(|r| {
            [
                r.kernel.clone(),
                r.output.clone(),
                r.cases.to_string(),
                r.elements.to_string(),
                format!("{:.2e}", r.max_abs),
                format!("{:.2e}", r.max_rel),
                r.max_ulp.to_string(),
                r.rel_norm.map_or("-".into(), |v| format!("{v:.2e}")),
                r.tolerance.clone(),
                if r.passed {
                    "pass".into()
                } else {
                    "FAIL".into()
                },
            ]
        })
        .collect();
    let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &body {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, &w)| format!("{c:<w$}"))
            .collect();
        if markdown {
            format!("| {} |\n", padded.join(" | "))
        } else {
            format!("{}\n", padded.join("  ").trim_end())
        }
    };
    let mut s = line(head.to_vec());
    if markdown {
        s += &line(
            widths
                .iter()
                .map(|&w| "-".repeat(w))
                .collect::<Vec<_>>()
                .iter()
                .map(|x| x.as_str())
                .collect(),
        );
    }
    for row in &body {
        s += &line(row.iter().map(|c| c.as_str()).collect());
    }
    s
}

pub fn text_table(report: &Report) -> String {
    let mut s = table(report, false);
    for r in report.rows.iter().filter(|r| !r.passed) {
        s += &format!(
            "FAIL {} {}: {}\n",
            r.kernel,
            r.output,
            r.first_failure.as_deref().unwrap_or("")
        );
    }
    s
}

pub fn markdown(report: &Report) -> String {
    format!(
        "# tallyho verify\n\nDevice: {} (driver {}), seed {}\n\n{}",
        report.device,
        report.driver,
        report.seed,
        table(report, true)
    )
}
