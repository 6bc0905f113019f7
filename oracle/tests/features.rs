//! Features and targets: causal, normalised on the training split only, targets one bar ahead.

use tallyho_oracle::features::{self, FeatureConfig, Market, FEATURE_DIM, FEATURE_NAMES, WARMUP};
use tallyho_oracle::market::{self, Bars, MarketError, SyntheticConfig};

fn bars(n: usize, seed: u64) -> Bars {
    market::synthetic(&SyntheticConfig {
        bars: n,
        seed,
        ..SyntheticConfig::default()
    })
    .unwrap()
}

/// Moves every bar from `from` on (a different synthetic path, spliced in at `from`'s price
/// level and times), keeping the bars valid.
fn perturb_from(b: &Bars, from: usize) -> Bars {
    let other = bars(b.len(), 99);
    let mut out = b.clone();
    let scale = b.close[from] / other.close[from] * 1.01;
    for i in from..b.len() {
        for (dst, src) in [
            (&mut out.open, &other.open),
            (&mut out.high, &other.high),
            (&mut out.low, &other.low),
            (&mut out.close, &other.close),
            (&mut out.bid, &other.bid),
            (&mut out.ask, &other.ask),
        ] {
            dst[i] = src[i] * scale;
        }
        out.volume[i] = other.volume[i] + 7.0;
        out.bid_size[i] = other.bid_size[i];
        out.ask_size[i] = other.ask_size[i];
    }
    out.validate("perturbed").unwrap();
    out
}

fn row(m: &Market, t: usize) -> &[f32] {
    &m.features[t * m.feature_dim..(t + 1) * m.feature_dim]
}

/// The raw feature value of bar t, feature j, recovered from the normalised one.
fn raw(m: &Market, t: usize, j: usize) -> f64 {
    f64::from(row(m, t)[j]) * m.std[j] + m.mean[j]
}

fn mean_std(x: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = x.clone().count() as f64;
    let mean = x.clone().sum::<f64>() / n;
    (
        mean,
        (x.map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt(),
    )
}

#[test]
fn the_feature_names_are_unique_and_match_the_dimension() {
    let m = features::build(&bars(500, 1), &FeatureConfig::default()).unwrap();
    assert_eq!(m.feature_dim, FEATURE_DIM);
    assert_eq!(m.features.len(), m.bars * FEATURE_DIM);
    let mut names = FEATURE_NAMES.to_vec();
    names.dedup();
    assert_eq!(names.len(), FEATURE_DIM);
}

#[test]
fn features_at_or_before_t_do_not_depend_on_later_bars() {
    let b = bars(2000, 1);
    let cfg = FeatureConfig::default();
    let m = features::build(&b, &cfg).unwrap();
    // In the test split the statistics do not move, so the arrays up to t are bitwise equal.
    for t in [m.train_end + 3, m.bars - 2] {
        let p = features::build(&perturb_from(&b, t + 1), &cfg).unwrap();
        assert_eq!((&p.mean, &p.std), (&m.mean, &m.std));
        assert_eq!(
            p.features[..(t + 1) * FEATURE_DIM],
            m.features[..(t + 1) * FEATURE_DIM]
        );
        assert_eq!(p.volatility[..=t], m.volatility[..=t]);
        assert_ne!(
            p.features[(t + 1) * FEATURE_DIM..],
            m.features[(t + 1) * FEATURE_DIM..]
        );
    }
    // In the training split they do, so compare the raw values.
    let t = WARMUP + 100;
    let p = features::build(&perturb_from(&b, t + 1), &cfg).unwrap();
    assert_ne!(p.mean, m.mean);
    for s in 0..=t {
        for (j, name) in FEATURE_NAMES.iter().enumerate() {
            let (a, b) = (raw(&m, s, j), raw(&p, s, j));
            let bound = 1e-6 * (m.std[j] + p.std[j]) * (1.0 + f64::from(row(&m, s)[j]).abs());
            assert!((a - b).abs() <= bound, "bar {s} {name}: {a} vs {b}");
        }
    }
    assert_eq!(p.volatility[..=t], m.volatility[..=t]);
}

#[test]
fn the_training_split_is_z_scored_and_test_bars_do_not_move_the_statistics() {
    let b = bars(5000, 2);
    let m = features::build(&b, &FeatureConfig::default()).unwrap();
    assert_eq!(
        (m.first_bar, m.train_end),
        (WARMUP, WARMUP + (0.8 * (5000 - WARMUP) as f64) as usize)
    );
    for (j, name) in FEATURE_NAMES.iter().enumerate() {
        let (mean, std) = mean_std((m.first_bar..m.train_end).map(|t| f64::from(row(&m, t)[j])));
        assert!(mean.abs() < 1e-5, "{name}: train mean {mean}");
        assert!((std - 1.0).abs() < 1e-5, "{name}: train std {std}");
    }
    let p = features::build(&perturb_from(&b, m.train_end), &FeatureConfig::default()).unwrap();
    assert_eq!((p.mean, p.std), (m.mean, m.std));
}

#[test]
fn a_feature_constant_on_the_training_split_is_only_centred() {
    let mut b = bars(400, 3);
    b.bid_size.fill(5.0);
    b.ask_size.fill(5.0);
    let m = features::build(&b, &FeatureConfig::default()).unwrap();
    let ofi = FEATURE_NAMES.iter().position(|&n| n == "ofi").unwrap();
    assert_eq!((m.mean[ofi], m.std[ofi]), (0.0, 1.0));
}

#[test]
fn raw_features_follow_their_definitions() {
    let b = bars(300, 4);
    let m = features::build(&b, &FeatureConfig::default()).unwrap();
    let t = 200;
    let c = &b.close;
    let r: Vec<f64> = (t - 29..=t).map(|i| (c[i] / c[i - 1]).ln()).collect();
    let expected = [
        ("ret_1", (c[t] / c[t - 1]).ln()),
        ("ret_60", (c[t] / c[t - 60]).ln()),
        ("range", (b.high[t] - b.low[t]) / c[t]),
        ("log_volume", (1.0 + b.volume[t]).ln()),
        (
            "spread_rel",
            (b.ask[t] - b.bid[t]) / ((b.ask[t] + b.bid[t]) / 2.0),
        ),
        (
            "ofi",
            (b.bid_size[t] - b.ask_size[t]) / (b.bid_size[t] + b.ask_size[t]),
        ),
        ("volatility", mean_std(r.iter().copied()).1),
    ];
    for (name, want) in expected {
        let j = FEATURE_NAMES.iter().position(|&n| n == name).unwrap();
        let got = raw(&m, t, j);
        assert!(
            (got - want).abs() <= 1e-6 * m.std[j] * (1.0 + f64::from(row(&m, t)[j]).abs()),
            "{name}: {got} vs {want}"
        );
    }
    let moves: f64 = (t - 29..=t).map(|i| (c[i] - c[i - 1]).abs()).sum::<f64>() / 30.0;
    assert_eq!(m.volatility[t], moves.max(1e-4 * c[t]) as f32);
}

#[test]
fn volatility_is_positive_in_price_units_at_every_bar() {
    let mut b = bars(300, 5);
    // A flat stretch: no moves at all, so the floor applies.
    for i in 0..100 {
        (b.open[i], b.high[i], b.low[i], b.close[i]) =
            (b.close[0], b.close[0], b.close[0], b.close[0]);
        (b.bid[i], b.ask[i]) = (b.close[0] - 0.25, b.close[0]);
    }
    let m = features::build(&b, &FeatureConfig::default()).unwrap();
    assert!(m.volatility.iter().all(|&v| v > 0.0));
    assert_eq!(m.volatility[50], (1e-4 * b.close[0]) as f32);
    let mean = m.volatility[WARMUP..]
        .iter()
        .map(|&v| f64::from(v))
        .sum::<f64>()
        / (m.bars - WARMUP) as f64;
    assert!(
        (0.1..2.0).contains(&mean),
        "mean |move| {mean} points is not ES-like"
    );
}

#[test]
fn targets_are_the_next_bars_values() {
    let b = bars(500, 6);
    let m = features::build(&b, &FeatureConfig::default()).unwrap();
    let n = m.bars;
    for t in 0..n {
        let s = (t + 1).min(n - 1);
        assert_eq!(m.next_close[t], b.close[s] as f32);
        assert_eq!(m.next_high[t], b.high[s] as f32);
        assert_eq!(m.next_low[t], b.low[s] as f32);
        assert_eq!(m.next_spread[t], (b.ask[s] - b.bid[s]) as f32);
        assert_eq!(
            (m.close[t], m.bid[t], m.ask[t]),
            (b.close[t] as f32, b.bid[t] as f32, b.ask[t] as f32)
        );
    }
}

#[test]
fn too_few_bars_are_refused_with_the_counts() {
    let err = features::build(&bars(WARMUP + 2, 7), &FeatureConfig::default()).unwrap_err();
    assert!(
        matches!(
            err,
            MarketError::TooFewBars {
                bars: 62,
                train: 1,
                test: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "62 bars leave 1 training and 1 test bars after the 60-bar warm-up: at least 2 training bars and 1 test bar \
         are needed; load more bars or move train_fraction toward 0.5"
    );
    assert!(features::build(&bars(WARMUP + 4, 7), &FeatureConfig::default()).is_ok());
    let err = features::build(
        &bars(500, 7),
        &FeatureConfig {
            train_fraction: 1.0,
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            MarketError::BadConfig {
                name: "train_fraction",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn the_real_es_data_gives_finite_features() {
    let dir = tallyho_oracle::shared_data::dir().unwrap_or_else(|e| panic!("{e}"));
    let b = market::load(&dir.join("lean-es-minute-2013-10")).unwrap();
    let m = features::build(&b, &FeatureConfig::default()).unwrap();
    assert!(m.features.iter().all(|x| x.is_finite()));
    assert!(m.std.iter().all(|&s| s > 0.0));
    assert!(m.volatility.iter().all(|&v| v > 0.0));
    assert_eq!(
        m.train_end,
        WARMUP + (0.8 * (b.len() - WARMUP) as f64) as usize
    );
}
