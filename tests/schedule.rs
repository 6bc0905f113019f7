//! Schedules advanced on the device (cuda/schedule.cu) against the oracle
//! (tallyho_oracle::schedule), eagerly and under the experience step's graph replay.

mod common;

mod gpu {
    use super::common::*;
    use tallyho::env::{load_market, Env};
    use tallyho::experience::Experience;
    use tallyho::harness::parity::schedule::check_schedule_epsilon;
    use tallyho::qnet::QNet;
    use tallyho::schedule::Epsilon;
    use tallyho_oracle::action::ACTION_BRANCHES;
    use tallyho_oracle::compare_bitwise;
    use tallyho_oracle::env::{EnvConfig, EnvMarket, Split, PORTFOLIO_FEATURES};
    use tallyho_oracle::qnet::QNetConfig;
    use tallyho_oracle::schedule::{schedule_epsilon, EpsilonSchedule};

    #[test]
    fn schedule_epsilon_matches_the_oracle_bit_for_bit_past_its_end() {
        let gpu = gpu();
        // 7 steps from 0.9 to 0.05 (the fractions t / 7 are inexact in float), 1000 steps,
        // and a constant, each run past its end.
        for (s, steps) in [
            ((0.9, 0.05, 7), 12),
            ((1.0, 0.1, 1000), 1003),
            ((0.3, 0.3, 0), 3),
        ] {
            let s = EpsilonSchedule {
                start: s.0,
                end: s.1,
                steps: s.2,
            };
            assert_all(&check_schedule_epsilon(&gpu, &s, steps).unwrap());
        }
        // A constant rate launches nothing and stays.
        let mut eps = Epsilon::new(&gpu, 1.0).unwrap();
        eps.set_constant(0.25).unwrap();
        eps.advance().unwrap();
        assert_eq!(eps.read().unwrap(), 0.25);
    }

    /// Random schedules (any start and end in [0, 1], 0 to 400 steps), each run past its end:
    /// every rate bitwise the oracle's.
    #[test]
    fn schedule_epsilon_matches_the_oracle_on_random_schedules() {
        use proptest::prelude::*;
        let gpu = gpu();
        let cases = (0.0f32..=1.0, 0.0f32..=1.0, 0u32..400);
        runner(file!())
            .run(&cases, |(start, end, steps)| {
                let s = EpsilonSchedule { start, end, steps };
                for c in check_schedule_epsilon(&gpu, &s, steps + 3)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?
                {
                    c.check().map_err(TestCaseError::fail)?;
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn epsilon_anneals_under_the_experience_steps_graph_replay() {
        let gpu = gpu();
        let m = load_market(None).unwrap();
        let em = EnvMarket::of(&m);
        let mut env = Env::new(
            &gpu,
            &EnvConfig {
                envs: 50,
                ..EnvConfig::default()
            },
            &ACTION_BRANCHES,
            &em,
            Split::train(&m),
        )
        .unwrap();
        let qcfg = QNetConfig {
            state_dim: em.feature_dim + PORTFOLIO_FEATURES,
            ..QNetConfig::default()
        };
        let net = QNet::new(&gpu, &qcfg, 1).unwrap();
        let mut acting = net.acting(50).unwrap();
        let mut exp = Experience::new(&gpu, &env, &net).unwrap();
        let s = EpsilonSchedule {
            start: 1.0,
            end: 0.1,
            steps: 6,
        };
        env.epsilon.set_schedule(&s).unwrap();
        let (mut got, mut want) = (Vec::new(), Vec::new());
        // Steps 0 and 1 run eagerly and captured; 2.. replay the graph, whose launches took
        // no epsilon argument: the rate comes from the device counter.
        for t in 0..9 {
            exp.step_graphed(&mut env, &net, &mut acting).unwrap();
            got.push(env.epsilon.read().unwrap());
            want.push(schedule_epsilon(&s, t));
        }
        assert_eq!(exp.graph_phase(), tallyho::graph::Phase::Replay);
        assert_all(&[compare_bitwise("epsilon", &got, &want)]);
    }
}
