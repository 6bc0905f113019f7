//! The unfused reward chain (cuda/reward_chain.cu) against the oracle's reward_chain, step
//! by step: per-env outputs and state bitwise, the global statistics within
//! REWARD_REDUCTION (the oracle then continues from the GPU's global, so each step is
//! checked on its own), at N in {1, 3, 31, 256, 1000, 4096, 8192} with no dones, all
//! dones and mixed.

mod common;

mod gpu {
    use super::common::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use tallyho::reward::RewardChain;
    use tallyho_oracle::reward::{reward_chain, RewardConfig, RewardEnvs, RewardGlobal};
    use tallyho_oracle::tolerance::{reward_dispersion, REWARD_REDUCTION};
    use tallyho_oracle::{compare_bitwise, compare_exact, compare_f32, Comparison};

    #[derive(Clone, Copy, Debug)]
    enum Mix {
        NoDones,
        AllDones,
        Mixed,
    }

    fn check(n: usize, mix: Mix, steps: usize, seed: u64, fused: bool) -> Vec<Comparison> {
        let gpu = gpu();
        let cfg = RewardConfig { ema_rate: 0.2, scale_gain: 0.2, hold_gain: 0.2, ..RewardConfig::default() };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut chain = RewardChain::new(&gpu, &cfg, n).unwrap();
        let mut envs = RewardEnvs::new(n);
        let mut global = RewardGlobal::new(&cfg);
        let (mut realized, mut position) = (vec![0.0f32; n], vec![0i32; n]);
        let mut out = Vec::new();
        for t in 0..steps {
            for i in 0..n {
                let before = position[i];
                position[i] = match mix {
                    Mix::NoDones => 1,
                    // Open at even steps, close at odd ones: every env closes every other step.
                    Mix::AllDones => (t % 2 == 0) as i32 * if i % 2 == 0 { 2 } else { -3 },
                    Mix::Mixed => {
                        if rng.gen_bool(0.3) {
                            rng.gen_range(-3..=3)
                        } else {
                            before
                        }
                    }
                };
                if position[i] != before {
                    realized[i] += rng.gen_range(-50i32..50) as f32 * 0.25;
                }
            }
            let dr = gpu.stream.clone_htod(&realized).unwrap();
            let dp = gpu.stream.clone_htod(&position).unwrap();
            if fused {
                let poison = vec![f32::NAN; n];
                gpu.stream.memcpy_htod(&poison, chain.work()).unwrap();
                chain.run_fused(&dr, &dp).unwrap();
                // The chain's working buffer is untouched: the fused kernel alone ran.
                assert!(gpu.stream.clone_dtoh(chain.work()).unwrap().iter().all(|x| x.is_nan()));
            } else {
                chain.run(&dr, &dp).unwrap();
            }
            let want = reward_chain(&cfg, &realized, &position, &mut envs, &mut global);
            let got = chain.read_out().unwrap();
            let (genvs, gglobal) = chain.download_state().unwrap();
            let step = |name: &str| format!("step {t} {name}");
            out.extend([
                compare_bitwise(&step("pnl"), &got.pnl, &want.pnl),
                compare_bitwise(&step("done"), &got.done, &want.done),
                compare_bitwise(&step("raw"), &got.raw, &want.raw),
                compare_bitwise(&step("abs"), &got.abs, &want.abs),
                compare_exact(&step("duration"), &got.duration, &want.duration),
                compare_bitwise(&step("reward"), &got.reward, &want.reward),
                compare_bitwise(&step("prev_realized"), &genvs.prev_realized, &envs.prev_realized),
                compare_exact(&step("prev_position"), &genvs.prev_position, &envs.prev_position),
                compare_exact(&step("steps_since_done"), &genvs.steps_since_done, &envs.steps_since_done),
                compare_bitwise(&step("outcome_ema"), &genvs.outcome_ema, &envs.outcome_ema),
            ]);
            let (gw, ww) = (gglobal.to_words(), global.to_words());
            let g: Vec<f64> = ww.iter().map(|&x| f64::from(x)).collect();
            // Word 5 is the dispersion, with its cancellation bound; the others one ulp.
            let others = [0, 1, 2, 3, 4, 6, 7];
            let pick = |w: &[f32; 8]| others.map(|j| w[j]);
            let pick64: Vec<f64> = others.iter().map(|&j| g[j]).collect();
            out.push(compare_f32(&step("global statistics"), &pick(&gw), &pick64, REWARD_REDUCTION));
            let tol = reward_dispersion(&want.reward, cfg.dispersion_floor);
            out.push(compare_f32(&step("dispersion"), &[gw[5]], &[g[5]], tol));
            match mix {
                Mix::NoDones => assert_eq!(gglobal.dones, 0.0),
                Mix::AllDones if t % 2 == 1 => assert_eq!(gglobal.dones, n as f32),
                _ => {}
            }
            global = gglobal; // continue from the GPU's statistics: each step checked alone
        }
        out
    }

    #[test]
    fn unfused_reward_chain_matches_oracle_at_every_size_and_done_mix() {
        for (k, n) in [1usize, 3, 31, 256, 1000, 4096, 8192].into_iter().enumerate() {
            for mix in [Mix::NoDones, Mix::AllDones, Mix::Mixed] {
                let c = check(n, mix, 12, 100 + k as u64, false);
                let failures: Vec<String> = c.iter().filter_map(|c| c.check().err()).collect();
                assert!(failures.is_empty(), "N = {n}, {mix:?}:\n{}", failures.join("\n"));
            }
        }
    }

    #[test]
    fn fused_reward_matches_oracle_at_every_size_and_done_mix_in_one_launch() {
        for (k, n) in [1usize, 3, 31, 256, 1000, 4096, 8192].into_iter().enumerate() {
            for mix in [Mix::NoDones, Mix::AllDones, Mix::Mixed] {
                let c = check(n, mix, 12, 200 + k as u64, true);
                let failures: Vec<String> = c.iter().filter_map(|c| c.check().err()).collect();
                assert!(failures.is_empty(), "N = {n}, {mix:?}:\n{}", failures.join("\n"));
            }
        }
    }

    /// The fused kernel against the unfused chain on the same inputs: every output and the
    /// whole state bitwise equal at every step (same sums, same trees, same order).
    #[test]
    fn fused_reward_matches_unfused_chain_bitwise() {
        let gpu = gpu();
        let cfg = RewardConfig { ema_rate: 0.2, scale_gain: 0.2, hold_gain: 0.2, ..RewardConfig::default() };
        for n in [1usize, 3, 31, 256, 1000, 4096, 8192] {
            let mut rng = ChaCha8Rng::seed_from_u64(n as u64);
            let (mut a, mut b) = (RewardChain::new(&gpu, &cfg, n).unwrap(), RewardChain::new(&gpu, &cfg, n).unwrap());
            let (mut realized, mut position) = (vec![0.0f32; n], vec![0i32; n]);
            for t in 0..30 {
                for i in 0..n {
                    if rng.gen_bool(0.3) {
                        position[i] = rng.gen_range(-3..=3);
                        realized[i] += rng.gen_range(-50i32..50) as f32 * 0.25;
                    }
                }
                let dr = gpu.stream.clone_htod(&realized).unwrap();
                let dp = gpu.stream.clone_htod(&position).unwrap();
                a.run(&dr, &dp).unwrap();
                b.run_fused(&dr, &dp).unwrap();
                let (oa, ob) = (a.read_out().unwrap(), b.read_out().unwrap());
                let ((ea, ga), (eb, gb)) = (a.download_state().unwrap(), b.download_state().unwrap());
                let c = [
                    compare_bitwise("reward", &ob.reward, &oa.reward),
                    compare_bitwise("raw", &ob.raw, &oa.raw),
                    compare_bitwise("pnl", &ob.pnl, &oa.pnl),
                    compare_bitwise("done", &ob.done, &oa.done),
                    compare_bitwise("outcome_ema", &eb.outcome_ema, &ea.outcome_ema),
                    compare_bitwise("global", &gb.to_words(), &ga.to_words()),
                ];
                assert_all(&c);
                assert_eq!((ob.duration, eb.steps_since_done, eb.prev_position), (oa.duration, ea.steps_since_done, ea.prev_position), "N {n} step {t}");
            }
        }
    }
}
