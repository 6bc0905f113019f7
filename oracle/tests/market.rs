//! The loaders, their checks and the synthetic market.

use std::io::Write;
use std::path::{Path, PathBuf};

use tallyho_oracle::market::{self, Bars, MarketError, SyntheticConfig};

const DAY_2013_10_07_MS: i64 = 1_381_104_000_000;
const HEADER: &str = "timestamp,open,high,low,close,volume,bid,ask,bid_size,ask_size";
const GOOD_ROW: &str = "1381104000,1676.5,1676.75,1676.5,1676.75,19,1676.5,1676.75,54,89";

/// The real ES data: `lean-es-minute-2013-10` in the shared data folder
/// ([`tallyho_oracle::shared_data::dir`]).
fn lean_dir() -> PathBuf {
    tallyho_oracle::shared_data::dir()
        .unwrap_or_else(|e| panic!("{e}"))
        .join("lean-es-minute-2013-10")
}

/// A fresh, empty folder under the system temp dir, unique per test and process.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tallyho-oracle-market-{test}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_zip(path: &Path, entries: &[(&str, &str)]) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, text) in entries {
        zip.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(text.as_bytes()).unwrap();
    }
    zip.finish().unwrap();
}

/// Loads `rows` (after the standard header) as a CSV file and returns the error, having
/// checked that its message starts with `file:line: `.
#[track_caller]
fn csv_error(test: &str, rows: &[&str], line: usize) -> (MarketError, String) {
    let path = scratch(test).join("bars.csv");
    std::fs::write(&path, format!("{HEADER}\n{}\n", rows.join("\n"))).unwrap();
    let err = market::load_csv(&path).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}:{line}: ", path.display())),
        "{msg}"
    );
    (err, msg)
}

#[track_caller]
fn assert_mentions(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "`{p}` missing from: {msg}");
    }
}

#[test]
fn real_es_data_loads_five_front_month_days_of_valid_bars() {
    let dir = lean_dir();
    let bars = market::load(&dir).unwrap();
    bars.validate("es").unwrap();
    assert!(bars.time_ms.windows(2).all(|w| w[0] < w[1]));
    let days: Vec<i64> = (7..=11)
        .map(|d| DAY_2013_10_07_MS + (d - 7) * market::MS_PER_DAY)
        .collect();
    let mut total = 0;
    for (i, &day) in days.iter().enumerate() {
        // The front month, counted independently: the trade CSV with the most rows.
        let zip_path = dir.join(format!("201310{:02}_trade.zip", 7 + i));
        let mut zip = zip::ZipArchive::new(std::fs::File::open(&zip_path).unwrap()).unwrap();
        let (rows, name) = (0..zip.len())
            .map(|k| {
                let mut text = String::new();
                let mut entry = zip.by_index(k).unwrap();
                std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
                (text.lines().count(), entry.name().to_string())
            })
            .max()
            .unwrap();
        assert!(name.ends_with("_201312.csv"), "{name}");
        let in_day = bars
            .time_ms
            .iter()
            .filter(|&&t| (day..day + market::MS_PER_DAY).contains(&t))
            .count();
        assert_eq!(
            in_day, rows,
            "{name}: every trade minute of the front month is a bar"
        );
        assert!((1200..1450).contains(&in_day), "{name}: {in_day} bars");
        total += in_day;
    }
    assert_eq!(total, bars.len());
}

#[test]
fn the_first_real_bar_is_the_first_trade_row_with_its_quote() {
    let bars = market::load_lean(&lean_dir()).unwrap();
    // 20131007_es_minute_trade_201312.csv: `0,1676.5,1676.5,1676.5,1676.5,9`, then `60000,...,19`;
    // quote: `0,1676.5,1676.5,1676.5,1676.5,86,1676.75,1676.75,1676.75,1676.75,97`, then 54 / 89.
    assert_eq!(
        bars.time_ms[..2],
        [DAY_2013_10_07_MS, DAY_2013_10_07_MS + 60_000]
    );
    assert_eq!(
        (
            bars.open[0],
            bars.high[0],
            bars.low[0],
            bars.close[0],
            bars.volume[0]
        ),
        (1676.5, 1676.5, 1676.5, 1676.5, 9.0)
    );
    assert_eq!(
        (bars.bid[0], bars.bid_size[0], bars.ask[0], bars.ask_size[0]),
        (1676.5, 86.0, 1676.75, 97.0)
    );
    assert_eq!(
        (bars.high[1], bars.close[1], bars.volume[1]),
        (1676.75, 1676.75, 19.0)
    );
    assert_eq!(
        (bars.bid[1], bars.bid_size[1], bars.ask[1], bars.ask_size[1]),
        (1676.5, 54.0, 1676.75, 89.0)
    );
}

#[test]
fn lean_quotes_carry_sides_forward_and_skip_crossed_snapshots_and_unquoted_bars() {
    let dir = scratch("lean-rules");
    let trades = "0,100,100,100,100,1\n60000,100,101,100,101,2\n120000,101,101,100.5,100.5,3\n180000,100.5,100.5,100.5,100.5,4\n";
    write_zip(
        &dir.join("20200102_trade.zip"),
        &[
            ("20200102_es_minute_trade_202003.csv", trades),
            (
                "20200102_es_minute_trade_202006.csv",
                "60000,50,50,50,50,1\n",
            ),
        ],
    );
    let quotes = [
        "0,99.75,99.75,99.75,99.75,10,,,,,0", // bid only: the bar at 0 has no quote
        "60000,,,,,0,100.25,100.25,100.25,100.25,20", // ask only, bid carried: 99.75 x 100.25
        "120000,101,101,101,101,5,100.75,100.75,100.75,100.75,6", // crossed: skipped
        "180000,100.25,100.25,100.25,100.25,7,,,,,0", // ask carried from the crossed row
    ];
    write_zip(
        &dir.join("20200102_quote.zip"),
        &[("20200102_es_minute_quote_202003.csv", &quotes.join("\n"))],
    );
    let bars = market::load(&dir).unwrap();
    let day = 1_577_923_200_000; // 2020-01-02
    assert_eq!(bars.time_ms, [day + 60_000, day + 120_000, day + 180_000]);
    assert_eq!(bars.close, [101.0, 100.5, 100.5]);
    assert_eq!(bars.bid, [99.75, 99.75, 100.25]);
    assert_eq!(bars.bid_size, [10.0, 10.0, 7.0]);
    assert_eq!(bars.ask, [100.25, 100.25, 100.75]);
    assert_eq!(bars.ask_size, [20.0, 20.0, 6.0]);
}

#[test]
fn a_trade_zip_without_its_quote_zip_names_the_quote_file_expected() {
    let dir = scratch("missing-quote");
    std::fs::copy(
        lean_dir().join("20131008_trade.zip"),
        dir.join("20131008_trade.zip"),
    )
    .unwrap();
    let msg = market::load(&dir).unwrap_err().to_string();
    assert_mentions(
        &msg,
        &[
            "20131008_trade.zip/20131008_es_minute_trade_201312.csv",
            "20131008_quote.zip/20131008_es_minute_quote_201312.csv",
        ],
    );
}

#[test]
fn a_quote_zip_without_the_front_month_names_the_entry_expected() {
    let dir = scratch("missing-quote-entry");
    write_zip(
        &dir.join("20200102_trade.zip"),
        &[("20200102_es_minute_trade_202003.csv", "0,1,1,1,1,1\n")],
    );
    write_zip(
        &dir.join("20200102_quote.zip"),
        &[(
            "20200102_es_minute_quote_202006.csv",
            "0,1,1,1,1,1,1,1,1,1,1\n",
        )],
    );
    let err = market::load(&dir).unwrap_err();
    assert!(matches!(err, MarketError::MissingQuote { .. }), "{err:?}");
    assert_mentions(
        &err.to_string(),
        &["20200102_quote.zip/20200102_es_minute_quote_202003.csv"],
    );
}

#[test]
fn a_bad_row_inside_a_lean_zip_names_the_zip_entry_and_line() {
    let dir = scratch("lean-bad-row");
    write_zip(
        &dir.join("20200102_trade.zip"),
        &[(
            "20200102_es_minute_trade_202003.csv",
            "0,1,1,1,1,1\n60000,1,1,1,x,1\n",
        )],
    );
    write_zip(
        &dir.join("20200102_quote.zip"),
        &[(
            "20200102_es_minute_quote_202003.csv",
            "0,1,1,1,1,1,1,1,1,1,1\n",
        )],
    );
    let msg = market::load(&dir).unwrap_err().to_string();
    assert_mentions(
        &msg,
        &[
            "20200102_trade.zip/20200102_es_minute_trade_202003.csv:2: ",
            "close `x`",
        ],
    );
}

#[test]
fn a_folder_without_zips_is_refused_as_empty() {
    let dir = scratch("no-zips");
    let err = market::load(&dir).unwrap_err();
    assert!(matches!(err, MarketError::Empty { .. }), "{err:?}");
    assert_mentions(
        &err.to_string(),
        &[&dir.display().to_string(), "no YYYYMMDD_trade.zip files"],
    );
}

#[test]
fn a_trade_zip_with_an_invalid_date_is_refused() {
    let dir = scratch("bad-name");
    std::fs::write(dir.join("20131341_trade.zip"), b"").unwrap();
    let err = market::load(&dir).unwrap_err();
    assert!(matches!(err, MarketError::BadFileName { .. }), "{err:?}");
    assert_mentions(&err.to_string(), &["20131341_trade.zip"]);
}

#[test]
fn a_damaged_zip_is_refused_with_its_path() {
    let dir = scratch("bad-zip");
    std::fs::write(dir.join("20131007_trade.zip"), b"not a zip").unwrap();
    let err = market::load(&dir).unwrap_err();
    assert!(matches!(err, MarketError::Zip { .. }), "{err:?}");
    assert_mentions(&err.to_string(), &["20131007_trade.zip"]);
}

#[test]
fn a_row_with_the_wrong_field_count_is_quoted() {
    let (err, msg) = csv_error("field-count", &[GOOD_ROW, "1381104060,1676.5,1676.75"], 3);
    assert!(matches!(err, MarketError::FieldCount { .. }), "{err:?}");
    assert_mentions(
        &msg,
        &["expected 10 fields, found 3", "`1381104060,1676.5,1676.75`"],
    );
}

#[test]
fn an_unparsable_number_is_quoted_with_its_column() {
    let (err, msg) = csv_error(
        "bad-number",
        &[
            GOOD_ROW,
            "1381104060,1676.5,1,6x,1676.5,1676.75,19,1676.5,1676.75,54",
        ],
        3,
    );
    assert!(
        matches!(err, MarketError::BadNumber { column: "low", .. }),
        "{err:?}"
    );
    assert_mentions(&msg, &["low `6x`"]);
}

#[test]
fn an_unparsable_timestamp_lists_the_accepted_forms() {
    let (err, msg) = csv_error("bad-time", &["07/10/2013 00:00,1,1,1,1,1,1,1,1,1"], 2);
    assert!(
        matches!(
            err,
            MarketError::BadNumber {
                column: "timestamp",
                ..
            }
        ),
        "{err:?}"
    );
    assert_mentions(&msg, &["`07/10/2013 00:00`", "YYYY-MM-DD HH:MM[:SS]"]);
}

#[test]
fn nan_infinite_and_non_positive_prices_are_refused() {
    for (field, shown) in [
        ("NaN", "NaN"),
        ("inf", "inf"),
        ("0", "0"),
        ("-1676.5", "-1676.5"),
    ] {
        let row = format!("1381104000,1676.5,1676.75,1676.5,{field},19,1676.5,1676.75,54,89");
        let (err, msg) = csv_error("bad-price", &[&row], 2);
        assert!(
            matches!(
                err,
                MarketError::BadPrice {
                    column: "close",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_mentions(
            &msg,
            &[&format!("close {shown} is not a finite positive price")],
        );
    }
}

#[test]
fn high_below_low_is_refused() {
    let (err, msg) = csv_error(
        "high-below-low",
        &["1381104000,1676.5,1676.25,1676.5,1676.5,19,1676.5,1676.75,54,89"],
        2,
    );
    assert!(matches!(err, MarketError::HighBelowLow { .. }), "{err:?}");
    assert_mentions(&msg, &["high 1676.25 is below low 1676.5"]);
}

#[test]
fn open_or_close_outside_the_range_is_refused() {
    let (err, msg) = csv_error(
        "open-outside",
        &["1381104000,1677,1676.75,1676.5,1676.75,19,1676.5,1676.75,54,89"],
        2,
    );
    assert!(
        matches!(err, MarketError::OutsideRange { column: "open", .. }),
        "{err:?}"
    );
    assert_mentions(&msg, &["open 1677 is outside [low 1676.5, high 1676.75]"]);
    let (err, msg) = csv_error(
        "close-outside",
        &[
            GOOD_ROW,
            "1381104060,1676.5,1676.75,1676.5,1676,19,1676.5,1676.75,54,89",
        ],
        3,
    );
    assert!(
        matches!(
            err,
            MarketError::OutsideRange {
                column: "close",
                ..
            }
        ),
        "{err:?}"
    );
    assert_mentions(&msg, &["close 1676 is outside"]);
}

#[test]
fn negative_volume_is_refused() {
    let (err, msg) = csv_error(
        "negative-volume",
        &["1381104000,1676.5,1676.75,1676.5,1676.75,-19,1676.5,1676.75,54,89"],
        2,
    );
    assert!(
        matches!(
            err,
            MarketError::BadQuantity {
                column: "volume",
                ..
            }
        ),
        "{err:?}"
    );
    assert_mentions(&msg, &["volume -19 is negative"]);
}

#[test]
fn a_crossed_quote_is_refused_and_a_locked_one_accepted() {
    let (err, msg) = csv_error(
        "crossed",
        &["1381104000,1676.5,1676.75,1676.5,1676.75,19,1677,1676.75,54,89"],
        2,
    );
    assert!(matches!(err, MarketError::CrossedQuote { .. }), "{err:?}");
    assert_mentions(&msg, &["bid 1677 is above ask 1676.75"]);
    let path = scratch("locked").join("bars.csv");
    std::fs::write(
        &path,
        format!("{HEADER}\n1381104000,1676.5,1676.75,1676.5,1676.75,19,1676.75,1676.75,54,89\n"),
    )
    .unwrap();
    assert_eq!(market::load_csv(&path).unwrap().bid, [1676.75]);
}

#[test]
fn duplicate_and_unsorted_times_name_both_times_and_lines() {
    let later = "1381104060,1676.5,1676.75,1676.5,1676.75,19,1676.5,1676.75,54,89";
    let (err, msg) = csv_error("duplicate-time", &[GOOD_ROW, GOOD_ROW], 3);
    assert!(
        matches!(err, MarketError::TimeNotIncreasing { .. }),
        "{err:?}"
    );
    assert_mentions(
        &msg,
        &[
            "time 1381104000000 (2013-10-07 00:00:00) is not after time 1381104000000",
            "bars.csv:2",
        ],
    );
    let (_, msg) = csv_error("unsorted-time", &[later, GOOD_ROW], 3);
    assert_mentions(
        &msg,
        &[
            "time 1381104000000 (2013-10-07 00:00:00) is not after time 1381104060000 (2013-10-07 00:01:00)",
            "bars.csv:2",
        ],
    );
}

#[test]
fn empty_files_and_header_only_files_are_refused() {
    let dir = scratch("empty");
    for (name, text, what) in [
        ("empty.csv", "", "the file is empty"),
        ("blank.csv", "\n \n", "the file is empty"),
        ("header.csv", HEADER, "no rows after the header"),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let err = market::load(&path).unwrap_err();
        assert!(matches!(err, MarketError::Empty { .. }), "{err:?}");
        assert_mentions(&err.to_string(), &[&path.display().to_string(), what]);
    }
}

#[test]
fn a_missing_header_column_is_named_with_the_header() {
    let path = scratch("missing-column").join("bars.csv");
    std::fs::write(
        &path,
        "timestamp,open,high,low,volume\n1381104000,1,1,1,1\n",
    )
    .unwrap();
    let msg = market::load_csv(&path).unwrap_err().to_string();
    assert!(msg.starts_with(&format!("{}:1: ", path.display())), "{msg}");
    assert_mentions(
        &msg,
        &["no column `close`", "`timestamp,open,high,low,volume`"],
    );
    // A headerless file is refused the same way.
    std::fs::write(&path, format!("{GOOD_ROW}\n")).unwrap();
    assert!(matches!(
        market::load_csv(&path).unwrap_err(),
        MarketError::MissingColumn {
            column: "timestamp",
            ..
        }
    ));
}

#[test]
fn quote_columns_come_all_four_or_none() {
    let path = scratch("partial-quote").join("bars.csv");
    std::fs::write(
        &path,
        "timestamp,open,high,low,close,volume,bid,ask\n1381104000,1,1,1,1,1,1,1\n",
    )
    .unwrap();
    let err = market::load_csv(&path).unwrap_err();
    assert!(
        matches!(
            err,
            MarketError::MissingColumn {
                column: "bid_size",
                ..
            }
        ),
        "{err:?}"
    );
    assert_mentions(&err.to_string(), &["all four quote columns"]);
}

#[test]
fn a_path_that_is_neither_a_folder_nor_csv_is_refused() {
    let path = scratch("unknown").join("bars.txt");
    std::fs::write(&path, "x").unwrap();
    assert!(matches!(
        market::load(&path).unwrap_err(),
        MarketError::UnknownFormat { .. }
    ));
}

#[test]
fn in_memory_bars_with_unequal_columns_are_refused() {
    let mut bars = market::synthetic(&SyntheticConfig {
        bars: 10,
        ..SyntheticConfig::default()
    })
    .unwrap();
    bars.ask.pop();
    let msg = bars.validate("my bars").unwrap_err().to_string();
    assert_mentions(&msg, &["my bars: ask has 9 entries but time_ms has 10"]);
}

#[test]
fn csv_columns_are_found_by_name_in_any_case_and_order_with_every_timestamp_form() {
    let path = scratch("csv-forms").join("bars.csv");
    let rows = [
        "Volume,Close,Low,High,Open,TimeStamp",
        "5,100,100,100,100,2013-10-07 00:00",
        "6,100.5,100,100.5,100,2013-10-07T00:01:00Z",
        "7,100.5,100.5,100.5,100.5,1381104120",
        "",
        "8,100.25,100.25,100.5,100.5,1381104180000",
        "9,100,100,100,100,2013-10-07 00:04:30",
    ];
    std::fs::write(&path, rows.join("\r\n")).unwrap();
    let bars = market::load_csv(&path).unwrap();
    let t0 = DAY_2013_10_07_MS;
    assert_eq!(
        bars.time_ms,
        [t0, t0 + 60_000, t0 + 120_000, t0 + 180_000, t0 + 270_000]
    );
    assert_eq!(bars.volume, [5.0, 6.0, 7.0, 8.0, 9.0]);
    assert_eq!(bars.high[3], 100.5);
    let half = market::CSV_TICK / 2.0;
    assert!(bars
        .close
        .iter()
        .zip(&bars.bid)
        .all(|(c, b)| *b == c - half));
    assert!(bars
        .close
        .iter()
        .zip(&bars.ask)
        .all(|(c, a)| *a == c + half));
    assert!(bars
        .bid_size
        .iter()
        .chain(&bars.ask_size)
        .all(|&s| s == 1.0));
}

#[test]
fn synthetic_bars_round_trip_through_csv() {
    let bars = market::synthetic(&SyntheticConfig {
        bars: 3000,
        seed: 5,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let path = scratch("round-trip").join("bars.csv");
    market::write_csv(&bars, &path).unwrap();
    assert_eq!(market::load(&path).unwrap(), bars);
}

fn log_returns(b: &Bars) -> Vec<f64> {
    b.close.windows(2).map(|w| (w[1] / w[0]).ln()).collect()
}

fn correlation(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
    cov / (vx * vy).sqrt()
}

#[test]
fn synthetic_bars_are_deterministic_per_seed_and_differ_across_seeds() {
    let cfg = SyntheticConfig {
        bars: 2000,
        ..SyntheticConfig::default()
    };
    let a = market::synthetic(&cfg).unwrap();
    assert_eq!(a, market::synthetic(&cfg).unwrap());
    assert_ne!(
        a.close,
        market::synthetic(&SyntheticConfig {
            seed: cfg.seed + 1,
            ..cfg
        })
        .unwrap()
        .close
    );
}

#[test]
fn synthetic_bars_are_valid_and_on_the_tick_grid() {
    let cfg = SyntheticConfig::default();
    let bars = market::synthetic(&cfg).unwrap();
    assert_eq!(bars.len(), cfg.bars);
    bars.validate("synthetic").unwrap();
    for p in [
        &bars.open,
        &bars.high,
        &bars.low,
        &bars.close,
        &bars.bid,
        &bars.ask,
    ]
    .into_iter()
    .flatten()
    {
        assert_eq!((p / cfg.tick).round() * cfg.tick, *p);
    }
    assert!(bars
        .bid
        .iter()
        .zip(&bars.ask)
        .all(|(b, a)| a - b >= cfg.tick));
}

#[test]
fn synthetic_returns_cluster_in_volatility() {
    let bars = market::synthetic(&SyntheticConfig::default()).unwrap();
    let abs: Vec<f64> = log_returns(&bars).iter().map(|r| r.abs()).collect();
    let acf1 = correlation(&abs[1..], &abs[..abs.len() - 1]);
    assert!(acf1 > 0.05, "lag-1 autocorrelation of |r| = {acf1}");
}

#[test]
fn synthetic_spreads_widen_with_volatility() {
    let bars = market::synthetic(&SyntheticConfig::default()).unwrap();
    let abs: Vec<f64> = log_returns(&bars).iter().map(|r| r.abs()).collect();
    let rolling: Vec<f64> = abs
        .windows(30)
        .map(|w| w.iter().sum::<f64>() / 30.0)
        .collect();
    let spread: Vec<f64> = bars
        .ask
        .iter()
        .zip(&bars.bid)
        .map(|(a, b)| a - b)
        .skip(30)
        .collect();
    let rho = correlation(&spread, &rolling);
    assert!(rho > 0.05, "corr(spread, rolling |r|) = {rho}");
}

#[test]
fn synthetic_volume_is_u_shaped_over_the_session() {
    let cfg = SyntheticConfig::default();
    let bars = market::synthetic(&cfg).unwrap();
    let (mut edges, mut middle) = (Vec::new(), Vec::new());
    for (t, v) in bars.time_ms.iter().zip(&bars.volume) {
        let m = ((t - cfg.start_time_ms) / 60_000) as usize % (cfg.session_minutes + 60);
        let u = m as f64 / cfg.session_minutes as f64;
        if !(0.1..0.9).contains(&u) {
            edges.push(v.ln());
        } else if (0.4..0.6).contains(&u) {
            middle.push(v.ln());
        }
    }
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let ratio = (mean(&edges) - mean(&middle)).exp();
    assert!(
        ratio > 2.0,
        "geometric mean volume, session edges / midday = {ratio}"
    );
}

#[test]
fn synthetic_bars_have_missing_minutes_and_session_breaks() {
    let cfg = SyntheticConfig::default();
    let bars = market::synthetic(&cfg).unwrap();
    let gaps: Vec<i64> = bars
        .time_ms
        .windows(2)
        .map(|w| (w[1] - w[0]) / 60_000)
        .collect();
    let missing = gaps.iter().filter(|&&g| (2..60).contains(&g)).count() as f64 / gaps.len() as f64;
    assert!(
        (0.5 * cfg.gap_prob..2.0 * cfg.gap_prob).contains(&missing),
        "share of gaps {missing}"
    );
    let minutes = (bars.time_ms[bars.len() - 1] - cfg.start_time_ms) / 60_000;
    let breaks = minutes as usize / (cfg.session_minutes + 60);
    assert!(breaks >= 10);
    assert_eq!(
        gaps.iter().filter(|&&g| g > 60).count(),
        breaks,
        "one break per session"
    );
}

#[test]
fn synthetic_book_imbalance_leans_toward_the_next_return() {
    let bars = market::synthetic(&SyntheticConfig::default()).unwrap();
    let ofi: Vec<f64> = bars
        .bid_size
        .iter()
        .zip(&bars.ask_size)
        .map(|(b, a)| (b - a) / (b + a))
        .collect();
    let next = log_returns(&bars);
    let rho = correlation(&ofi[..next.len()], &next);
    assert!((0.03..0.3).contains(&rho), "corr(ofi_t, r_t+1) = {rho}");
}

#[test]
fn synthetic_configs_out_of_range_are_refused_with_the_fix() {
    let msg = market::synthetic(&SyntheticConfig {
        bars: 0,
        ..SyntheticConfig::default()
    })
    .unwrap_err()
    .to_string();
    assert_eq!(msg, "bars = 0 is invalid: generate at least 1 bar");
    let msg = market::synthetic(&SyntheticConfig {
        garch_alpha: 0.2,
        garch_beta: 0.8,
        ..SyntheticConfig::default()
    })
    .unwrap_err()
    .to_string();
    assert_mentions(&msg, &["garch_alpha + garch_beta = 1", "below 1"]);
    assert!(market::synthetic(&SyntheticConfig {
        tick: 0.0,
        ..SyntheticConfig::default()
    })
    .is_err());
    assert!(market::synthetic(&SyntheticConfig {
        sigma: f64::NAN,
        ..SyntheticConfig::default()
    })
    .is_err());
}

/// A LEAN quote row with both sides: bid and ask prices as given, sizes 10 and 20.
fn quote_row(ms: i64, bid: &str, ask: &str) -> String {
    format!("{ms},{bid},{bid},{bid},{bid},10,{ask},{ask},{ask},{ask},20")
}

/// Writes `DATE_trade.zip` and `DATE_quote.zip` with the given (entry, text) lists.
fn write_lean_day(dir: &Path, date: &str, trades: &[(&str, &str)], quotes: &[(&str, &str)]) {
    write_zip(&dir.join(format!("{date}_trade.zip")), trades);
    write_zip(&dir.join(format!("{date}_quote.zip")), quotes);
}

const DAY_2020_01_02: i64 = 18_263;
const DAY_2020_01_02_MS: i64 = DAY_2020_01_02 * market::MS_PER_DAY;

#[test]
fn lean_equity_prices_in_deci_cents_load_as_dollars_with_unscaled_sizes() {
    let dir = scratch("lean-equity");
    let trades = "34200000,1676500,1677000,1676000,1676800,1200\n34260000,1676800,1676800,1675100,1675300,900\n";
    let quotes = [
        quote_row(34200000, "1676700", "1676900"),
        quote_row(34260000, "1675200", "1675400"),
    ];
    write_lean_day(
        &dir,
        "20131007",
        &[("20131007_spy_minute_trade.csv", trades)],
        &[("20131007_spy_minute_quote.csv", &quotes.join("\n"))],
    );
    let (bars, log) = market::read_lean(&dir).unwrap();
    let t0 = DAY_2013_10_07_MS + 34_200_000; // 09:30
    assert_eq!(bars.time_ms, [t0, t0 + 60_000]);
    assert_eq!(bars.open, [167.65, 167.68]);
    assert_eq!(bars.high, [167.7, 167.68]);
    assert_eq!(bars.low, [167.6, 167.51]);
    assert_eq!(bars.close, [167.68, 167.53]);
    assert_eq!(bars.volume, [1200.0, 900.0]);
    assert_eq!(bars.bid, [167.67, 167.52]);
    assert_eq!(bars.ask, [167.69, 167.54]);
    assert_eq!((bars.bid_size[0], bars.ask_size[0]), (10.0, 20.0));
    assert_eq!(log.asset, market::LeanAsset::Equity);
    assert_eq!(log.rolls, []);
    assert_eq!(
        (
            log.days[0].symbol.as_str(),
            log.days[0].contract.clone(),
            log.days[0].bars
        ),
        ("spy", None, 2)
    );
    assert_eq!(market::load(&dir).unwrap(), bars);
}

#[test]
fn an_equity_trade_zip_without_its_quote_zip_names_the_quote_file_expected() {
    let dir = scratch("lean-equity-no-quote");
    write_zip(
        &dir.join("20131007_trade.zip"),
        &[(
            "20131007_spy_minute_trade.csv",
            "34200000,1676500,1677000,1676000,1676800,1200\n",
        )],
    );
    let err = market::load(&dir).unwrap_err();
    assert!(matches!(err, MarketError::MissingQuote { .. }), "{err:?}");
    assert_mentions(
        &err.to_string(),
        &[
            "20131007_trade.zip/20131007_spy_minute_trade.csv",
            "20131007_quote.zip/20131007_spy_minute_quote.csv",
            "add the quote data of that day",
        ],
    );
}

#[test]
fn a_lean_row_off_the_minute_is_refused_with_the_fix() {
    let dir = scratch("lean-off-minute");
    write_lean_day(
        &dir,
        "20131007",
        &[(
            "20131007_spy_minute_trade.csv",
            "34200000,1676500,1677000,1676000,1676800,1200\n34230000,1676500,1677000,1676000,1676800,1\n",
        )],
        &[(
            "20131007_spy_minute_quote.csv",
            &quote_row(34200000, "1676700", "1676900"),
        )],
    );
    let err = market::load(&dir).unwrap_err();
    assert!(
        matches!(err, MarketError::BadNumber { column: "ms", .. }),
        "{err:?}"
    );
    assert_mentions(
        &err.to_string(),
        &[
            "20131007_spy_minute_trade.csv:2: ",
            "ms `34230000`",
            "multiple of 60000",
        ],
    );
}

#[test]
fn lean_entries_not_named_as_lean_files_or_mixing_layouts_are_refused() {
    let dir = scratch("lean-bad-entry");
    write_lean_day(
        &dir,
        "20131007",
        &[("spy_trades.csv", "34200000,1,1,1,1,1\n")],
        &[],
    );
    let err = market::load(&dir).unwrap_err();
    assert!(matches!(err, MarketError::BadEntryName { .. }), "{err:?}");
    assert_mentions(
        &err.to_string(),
        &[
            "`spy_trades.csv`",
            "20131007_SYMBOL_minute_trade.csv (equity)",
        ],
    );

    let dir = scratch("lean-mixed");
    let row = "34200000,1676500,1677000,1676000,1676800,1200\n";
    write_lean_day(
        &dir,
        "20131007",
        &[("20131007_spy_minute_trade.csv", row)],
        &[(
            "20131007_spy_minute_quote.csv",
            &quote_row(34200000, "1676700", "1676900"),
        )],
    );
    write_lean_day(
        &dir,
        "20131008",
        &[("20131008_es_minute_trade_201312.csv", "0,1,1,1,1,1\n")],
        &[],
    );
    let err = market::load(&dir).unwrap_err();
    assert!(matches!(err, MarketError::MixedLean { .. }), "{err:?}");
    assert_mentions(
        &err.to_string(),
        &["20131008_trade.zip (future es)", "(equity spy)"],
    );
}

/// Day 1 (2020-01-02): front 202003 closes 100, 100.5, 101 (last bar at 00:02); 202006 last
/// trades at 105 by 00:02 (and at 999 after, which must not count). Day 2: front 202006.
/// Day 3: 202003 has more rows again, but the front never rolls back.
fn write_roll_days(dir: &Path) {
    let old = "0,100,100,100,100,5\n60000,100,100.5,100,100.5,6\n120000,100.5,101,100.5,101,7\n";
    let new_day1 = "60000,105,105,105,105,1\n180000,999,999,999,999,1\n";
    write_lean_day(
        dir,
        "20200102",
        &[
            ("20200102_es_minute_trade_202003.csv", old),
            ("20200102_es_minute_trade_202006.csv", new_day1),
        ],
        &[(
            "20200102_es_minute_quote_202003.csv",
            &quote_row(0, "99.75", "100.25"),
        )],
    );
    let new = "0,105,105.25,105,105.25,8\n60000,105.25,105.5,105.25,105.5,9\n120000,105.5,105.5,105,105,4\n";
    write_lean_day(
        dir,
        "20200103",
        &[
            (
                "20200103_es_minute_trade_202003.csv",
                "0,101,101,101,101,1\n",
            ),
            ("20200103_es_minute_trade_202006.csv", new),
        ],
        &[(
            "20200103_es_minute_quote_202006.csv",
            &quote_row(0, "105", "105.25"),
        )],
    );
    write_lean_day(
        dir,
        "20200106",
        &[
            ("20200106_es_minute_trade_202003.csv", old),
            (
                "20200106_es_minute_trade_202006.csv",
                "0,106,106,106,106,1\n",
            ),
        ],
        &[(
            "20200106_es_minute_quote_202006.csv",
            &quote_row(0, "105.75", "106.25"),
        )],
    );
}

#[test]
fn a_futures_roll_is_back_adjusted_so_prices_are_continuous_and_each_day_lists_its_contract() {
    let dir = scratch("lean-roll");
    write_roll_days(&dir);
    let (bars, log) = market::read_lean(&dir).unwrap();
    bars.validate("roll").unwrap();
    // Day 1 shifted by the gap 105 - 101 = +4; days 2 and 3 as in the files.
    assert_eq!(
        bars.close,
        [104.0, 104.5, 105.0, 105.25, 105.5, 105.0, 106.0]
    );
    assert_eq!(bars.low[..3], [104.0, 104.0, 104.5]);
    assert_eq!(
        bars.bid,
        [103.75, 103.75, 103.75, 105.0, 105.0, 105.0, 105.75]
    );
    assert_eq!(
        bars.ask,
        [104.25, 104.25, 104.25, 105.25, 105.25, 105.25, 106.25]
    );
    assert_eq!(bars.volume, [5.0, 6.0, 7.0, 8.0, 9.0, 4.0, 1.0]);
    // Across the roll a held position sees 202006's own move (105 -> 105.25), not the
    // 4.25 jump between the contracts' prices in the files.
    assert_eq!(bars.close[3] - bars.close[2], 0.25);
    let days: Vec<(String, Option<String>, usize, f64)> = log
        .days
        .iter()
        .map(|d| (d.date(), d.contract.clone(), d.bars, d.shift))
        .collect();
    let contract = |c: &str| Some(c.to_string());
    assert_eq!(
        days,
        [
            ("2020-01-02".into(), contract("202003"), 3, 4.0),
            ("2020-01-03".into(), contract("202006"), 3, 0.0),
            ("2020-01-06".into(), contract("202006"), 1, 0.0),
        ]
    );
    assert_eq!(
        log.rolls,
        [market::LeanRoll {
            day: DAY_2020_01_02 + 1,
            from: "202003".into(),
            to: "202006".into(),
            at_ms: DAY_2020_01_02_MS + 120_000,
            from_close: 101.0,
            to_close: 105.0,
        }]
    );
    let lines = log.lines();
    assert_mentions(
        &lines.join("\n"),
        &[
            "2020-01-02  es 202003  3 bars  shift +4",
            "2020-01-03  es 202006  3 bars  shift +0",
            "2020-01-03  202003 -> 202006  gap +4 = 202006 105 - 202003 101 at",
        ],
    );
    assert_eq!(market::load(&dir).unwrap(), bars);
}

#[test]
fn a_roll_without_the_new_contracts_price_on_the_old_contracts_last_day_is_refused() {
    let dir = scratch("lean-roll-gap");
    write_roll_days(&dir);
    // Day 1 without 202006: the gap cannot be measured.
    write_zip(
        &dir.join("20200102_trade.zip"),
        &[(
            "20200102_es_minute_trade_202003.csv",
            "0,100,100,100,100,5\n",
        )],
    );
    let err = market::load(&dir).unwrap_err();
    assert!(matches!(err, MarketError::RollGap { .. }), "{err:?}");
    assert_mentions(
        &err.to_string(),
        &[
            "20200102_trade.zip: cannot measure the roll from 202003 to 202006",
            "no 202006 trade at or before 1577923200000 (2020-01-02 00:00:00)",
        ],
    );
}

#[test]
fn a_back_adjustment_that_makes_a_price_non_positive_is_refused() {
    let dir = scratch("lean-roll-negative");
    write_roll_days(&dir);
    // 202006 at 0.5 on day 1: the gap 0.5 - 101 takes day 1's prices below zero.
    write_zip(
        &dir.join("20200102_trade.zip"),
        &[
            (
                "20200102_es_minute_trade_202003.csv",
                "0,100,100,100,100,5\n60000,100,100.5,100,100.5,6\n120000,100.5,101,100.5,101,7\n",
            ),
            (
                "20200102_es_minute_trade_202006.csv",
                "0,0.5,0.5,0.5,0.5,1\n",
            ),
        ],
    );
    let err = market::load(&dir).unwrap_err();
    assert!(
        matches!(err, MarketError::AdjustedPrice { shift, .. } if shift == -100.5),
        "{err:?}"
    );
    assert_mentions(
        &err.to_string(),
        &["2020-01-02 (202003) by -100.5", "-0.75"],
    );
}

#[test]
fn a_futures_day_with_only_contracts_before_the_front_is_refused() {
    let dir = scratch("lean-roll-back");
    write_roll_days(&dir);
    write_lean_day(
        &dir,
        "20200107",
        &[(
            "20200107_es_minute_trade_202003.csv",
            "0,101,101,101,101,1\n",
        )],
        &[],
    );
    let err = market::load(&dir).unwrap_err();
    assert!(
        matches!(err, MarketError::NoFrontContract { .. }),
        "{err:?}"
    );
    assert_mentions(
        &err.to_string(),
        &["20200107_trade.zip has no trade CSV of contract 202006"],
    );
}

#[test]
fn a_csv_header_naming_a_column_twice_is_refused() {
    let path = scratch("duplicate-column").join("bars.csv");
    std::fs::write(
        &path,
        "timestamp,open,high,low,close,volume,Close\n1381104000,1,1,1,1,1,2\n",
    )
    .unwrap();
    let err = market::load_csv(&path).unwrap_err();
    assert!(
        matches!(err, MarketError::DuplicateColumn { .. }),
        "{err:?}"
    );
    assert_mentions(
        &err.to_string(),
        &[&format!("{}:1: ", path.display()), "names `close` twice"],
    );
}

#[test]
fn the_es_week_has_one_contract_and_no_roll() {
    let (_, log) = market::read_lean(&lean_dir()).unwrap();
    assert_eq!(log.asset, market::LeanAsset::Future);
    assert_eq!(log.rolls, []);
    assert_eq!(log.days.len(), 5);
    assert!(log
        .days
        .iter()
        .all(|d| d.contract.as_deref() == Some("201312") && d.shift == 0.0 && d.symbol == "es"));
}
