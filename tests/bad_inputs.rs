//! The corpus of bad inputs: one test per case, each asserting that the input is refused
//! with a message naming the file or key, the value and the fix. The inputs are derived from
//! good ones inside each test (a CSV, LEAN zips, a config, a short CPU run's checkpoint, a
//! copy of the fixtures); the real ES data is read in place. The library is called where it
//! can be (fast); a few cases run the `tallyho` binary end to end.

#[path = "bad_inputs/support.rs"]
mod support;

use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use support::*;
use tallyho::checkpoint::{self, Checkpoint, Header};
use tallyho::harness::fixtures::{self, Replayer};
use tallyho::train::{Preset, TrainOptions};
use tallyho_oracle::features::FEATURE_DIM;
use tallyho_oracle::market;

/// The message of `r`'s error; fails, naming the case, if the bad input was accepted.
#[track_caller]
fn refusal<T, E: std::fmt::Display>(case: &str, r: Result<T, E>) -> String {
    match r {
        Ok(_) => panic!("case {case}: the bad input was accepted"),
        Err(e) => e.to_string(),
    }
}

/// `msg` holds every one of `parts` (the file or key, the value, the fix).
#[track_caller]
fn assert_names(case: &str, msg: &str, parts: &[&str]) {
    let missing: Vec<&&str> = parts.iter().filter(|p| !msg.contains(**p)).collect();
    assert!(
        missing.is_empty(),
        "case {case}: the message does not name {missing:?}:\n{msg}"
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

// ---- Headed CSV ---------------------------------------------------------------------------

/// The refusal of a CSV file of `text`, and the file's path.
fn csv_refusal(case: &str, text: &[u8]) -> (String, String) {
    let path = scratch(case).join("bars.csv");
    std::fs::write(&path, text).unwrap();
    let msg = refusal(case, market::load(&path));
    (msg, path.display().to_string())
}

/// Valid rows with row `i` (0-based) given field `col` (0-based) replaced by `value`.
fn csv_with(i: usize, col: usize, value: &str) -> String {
    let mut rows = csv_rows(6);
    let mut f: Vec<String> = rows[i].split(',').map(str::to_string).collect();
    f[col] = value.to_string();
    rows[i] = f.join(",");
    csv_text(&rows)
}

#[test]
fn csv_an_empty_file() {
    let (msg, file) = csv_refusal("csv-empty", b"");
    assert_names(
        "csv-empty",
        &msg,
        &[&file, "the file is empty", "give a header line"],
    );
}

#[test]
fn csv_a_header_only_file() {
    let (msg, file) = csv_refusal("csv-header-only", format!("{CSV_HEADER}\n\n").as_bytes());
    assert_names(
        "csv-header-only",
        &msg,
        &[
            &file,
            "no rows after the header",
            "at least one row of bars",
        ],
    );
}

#[test]
fn csv_a_file_truncated_mid_row() {
    let text = csv_text(&csv_rows(5));
    let cut = &text[..text.len() - 12];
    let (msg, file) = csv_refusal("csv-truncated", cut.as_bytes());
    let last = cut.lines().last().unwrap();
    assert_names(
        "csv-truncated",
        &msg,
        &[
            &format!("{file}:6"),
            "expected 10 fields",
            last,
            "fix or delete the row",
        ],
    );
}

#[test]
fn csv_a_nan_price() {
    let (msg, file) = csv_refusal("csv-nan", csv_with(2, 1, "NaN").as_bytes());
    assert_names(
        "csv-nan",
        &msg,
        &[
            &format!("{file}:4"),
            "open NaN",
            "not a finite positive price",
            "fix or delete the row",
        ],
    );
}

#[test]
fn csv_an_infinite_price() {
    let (msg, file) = csv_refusal("csv-inf", csv_with(1, 2, "inf").as_bytes());
    assert_names(
        "csv-inf",
        &msg,
        &[&format!("{file}:3"), "high inf", "fix or delete the row"],
    );
}

#[test]
fn csv_a_negative_price() {
    let (msg, file) = csv_refusal("csv-negative", csv_with(0, 3, "-1676.5").as_bytes());
    assert_names(
        "csv-negative",
        &msg,
        &[
            &format!("{file}:2"),
            "low -1676.5",
            "not a finite positive price",
        ],
    );
}

#[test]
fn csv_a_bid_above_the_ask() {
    let (msg, file) = csv_refusal("csv-crossed", csv_with(3, 6, "1699.25").as_bytes());
    assert_names(
        "csv-crossed",
        &msg,
        &[
            &format!("{file}:5"),
            "bid 1699.25 is above ask",
            "swap the bid and ask columns",
        ],
    );
}

#[test]
fn csv_unsorted_timestamps() {
    let mut rows = csv_rows(5);
    rows.swap(1, 2);
    let (msg, file) = csv_refusal("csv-unsorted", csv_text(&rows).as_bytes());
    let later = rows[1].split(',').next().unwrap();
    assert_names(
        "csv-unsorted",
        &msg,
        &[
            &format!("{file}:4"),
            "is not after time",
            later,
            &format!("{file}:3"),
            "sort the rows by time",
        ],
    );
}

#[test]
fn csv_a_duplicate_timestamp() {
    let mut rows = csv_rows(4);
    let dup = rows[2].clone();
    rows.insert(3, dup);
    let (msg, file) = csv_refusal("csv-duplicate", csv_text(&rows).as_bytes());
    assert_names(
        "csv-duplicate",
        &msg,
        &[
            &format!("{file}:5"),
            rows[2].split(',').next().unwrap(),
            "drop duplicates",
        ],
    );
}

#[test]
fn csv_an_unparsable_number() {
    let (msg, file) = csv_refusal("csv-number", csv_with(1, 5, "12x").as_bytes());
    assert_names(
        "csv-number",
        &msg,
        &[
            &format!("{file}:3"),
            "volume `12x` is not a number",
            "fix or delete",
        ],
    );
}

#[test]
fn csv_an_impossible_date() {
    let (msg, file) = csv_refusal("csv-date", csv_with(0, 0, "2013-13-07 00:00").as_bytes());
    assert_names(
        "csv-date",
        &msg,
        &[
            &format!("{file}:2"),
            "timestamp `2013-13-07 00:00`",
            "YYYY-MM-DD HH:MM[:SS]",
        ],
    );
}

#[test]
fn csv_a_timestamp_out_of_range() {
    // i64::MIN once overflowed the seconds-or-milliseconds test (a panic).
    let (msg, file) = csv_refusal(
        "csv-time-range",
        csv_with(0, 0, "-9223372036854775808").as_bytes(),
    );
    assert_names(
        "csv-time-range",
        &msg,
        &[
            &format!("{file}:2"),
            "`-9223372036854775808`",
            "from 1970-01-01 to 9999-12-31",
        ],
    );
}

#[test]
fn csv_a_missing_column() {
    let text = csv_text(&csv_rows(3)).replacen("volume", "vol", 1);
    let (msg, file) = csv_refusal("csv-missing-column", text.as_bytes());
    assert_names(
        "csv-missing-column",
        &msg,
        &[
            &format!("{file}:1"),
            "no column `volume`",
            "header naming timestamp, open",
        ],
    );
}

#[test]
fn csv_a_column_named_twice() {
    let text = csv_text(&csv_rows(3)).replacen("bid_size", "close", 1);
    let (msg, file) = csv_refusal("csv-twice", text.as_bytes());
    assert_names(
        "csv-twice",
        &msg,
        &[&file, "names `close` twice", "keep one column"],
    );
}

#[test]
fn csv_a_negative_volume() {
    let (msg, file) = csv_refusal("csv-volume", csv_with(2, 5, "-5").as_bytes());
    assert_names(
        "csv-volume",
        &msg,
        &[&format!("{file}:4"), "volume -5", "must be finite and >= 0"],
    );
}

#[test]
fn csv_a_binary_file() {
    let mut bytes = csv_text(&csv_rows(2)).into_bytes();
    bytes.splice(20..20, [0xff, 0xfe, 0x00]);
    let (msg, file) = csv_refusal("csv-binary", &bytes);
    assert_names(
        "csv-binary",
        &msg,
        &[
            &file,
            "is not UTF-8 text (invalid byte at offset 20)",
            "give a comma-separated text file",
        ],
    );
}

#[test]
fn data_of_an_unknown_format() {
    let path = scratch("unknown-format").join("bars.parquet");
    std::fs::write(&path, b"PAR1").unwrap();
    let msg = refusal("unknown-format", market::load(&path));
    assert_names(
        "unknown-format",
        &msg,
        &[s(&path), "neither a folder of LEAN zips nor a .csv file"],
    );
}

// ---- LEAN minute zips ---------------------------------------------------------------------

/// A folder holding the real ES day 2013-10-08 (both zips copied from the shared data).
fn real_day(case: &str) -> PathBuf {
    let dir = scratch(case);
    for kind in ["trade", "quote"] {
        let name = format!("20131008_{kind}.zip");
        std::fs::copy(es_dir().join(&name), dir.join(&name)).unwrap();
    }
    dir
}

fn lean_refusal(case: &str, dir: &Path) -> String {
    refusal(case, market::load(dir))
}

#[test]
fn lean_a_truncated_trade_zip() {
    let dir = real_day("lean-truncated");
    let zip = dir.join("20131008_trade.zip");
    let bytes = std::fs::read(&zip).unwrap();
    std::fs::write(&zip, &bytes[..bytes.len() / 2]).unwrap();
    let msg = lean_refusal("lean-truncated", &dir);
    assert_names(
        "lean-truncated",
        &msg,
        &[
            s(&zip),
            "is not a readable zip archive",
            "replace it with an intact copy",
        ],
    );
}

#[test]
fn lean_a_quote_zip_that_is_not_a_zip() {
    let dir = real_day("lean-not-zip");
    let zip = dir.join("20131008_quote.zip");
    std::fs::write(&zip, b"ms,bid,ask\n60000,1,2\n").unwrap();
    let msg = lean_refusal("lean-not-zip", &dir);
    assert_names(
        "lean-not-zip",
        &msg,
        &[s(&zip), "is not a readable zip archive", "intact copy"],
    );
}

#[test]
fn lean_a_zip_without_csv_entries() {
    let dir = scratch("lean-no-csv");
    let zip = dir.join("20131008_trade.zip");
    std::fs::write(&zip, zip_bytes(&[("README.txt", b"nothing here")])).unwrap();
    let msg = lean_refusal("lean-no-csv", &dir);
    assert_names(
        "lean-no-csv",
        &msg,
        &[s(&zip), "no trade CSV", "replace it with a LEAN trade zip"],
    );
}

#[test]
fn lean_a_zip_with_a_foreign_csv() {
    let dir = scratch("lean-foreign");
    let zip = dir.join("20131008_trade.zip");
    std::fs::write(&zip, zip_bytes(&[("bars.csv", b"60000,1,1,1,1,1")])).unwrap();
    let msg = lean_refusal("lean-foreign", &dir);
    assert_names(
        "lean-foreign",
        &msg,
        &[
            s(&zip),
            "`bars.csv`",
            "20131008_SYMBOL_minute_trade",
            "rename it or remove it",
        ],
    );
}

#[test]
fn lean_a_zip_of_second_resolution() {
    let dir = scratch("lean-second");
    let zip = dir.join("20131008_trade.zip");
    let entry = "20131008_es_second_trade_201312.csv";
    std::fs::write(&zip, zip_bytes(&[(entry, b"1000,1,1,1,1,1")])).unwrap();
    let msg = lean_refusal("lean-second", &dir);
    assert_names(
        "lean-second",
        &msg,
        &[
            s(&zip),
            entry,
            "LEAN second data",
            "pass a folder of minute zips",
        ],
    );
}

#[test]
fn lean_a_zip_of_option_data() {
    let dir = scratch("lean-option");
    let zip = dir.join("20131008_trade.zip");
    let entry = "20131008_es_minute_trade_american_call_16500000_20131220.csv";
    std::fs::write(&zip, zip_bytes(&[(entry, b"60000,1,1,1,1,1")])).unwrap();
    let msg = lean_refusal("lean-option", &dir);
    assert_names(
        "lean-option",
        &msg,
        &[
            s(&zip),
            "contract `american_call_16500000_20131220`",
            "expiry month YYYYMM",
            "not options",
        ],
    );
}

#[test]
fn lean_an_equity_day_among_futures_days() {
    let dir = scratch("lean-mixed");
    LeanDay::valid("20131007", 4).write(&dir);
    let eq = "20131008_spy_minute_trade.csv";
    let zip = dir.join("20131008_trade.zip");
    std::fs::write(
        &zip,
        zip_bytes(&[(eq, b"60000,1676500,1676500,1676500,1676500,5")]),
    )
    .unwrap();
    let msg = lean_refusal("lean-mixed", &dir);
    assert_names(
        "lean-mixed",
        &msg,
        &[
            s(&zip),
            "equity spy",
            "does not go with",
            "future es",
            "load one symbol of one asset class per folder",
        ],
    );
}

#[test]
fn lean_tick_times_in_a_minute_file() {
    let dir = scratch("lean-tick");
    let mut day = LeanDay::valid("20131008", 4);
    day.trade[2] = day.trade[2].replacen("180000", "181234", 1);
    day.write(&dir);
    let msg = lean_refusal("lean-tick", &dir);
    assert_names(
        "lean-tick",
        &msg,
        &[
            &format!(
                "{}/{}:3",
                dir.join("20131008_trade.zip").display(),
                day.trade_name()
            ),
            "ms `181234`",
            "a whole minute of the day",
            "is this second or tick data?",
        ],
    );
}

#[test]
fn lean_a_nan_price_in_a_trade_row() {
    let dir = scratch("lean-nan");
    let mut day = LeanDay::valid("20131008", 4);
    day.trade[1] = "120000,NaN,1677,1676.5,1676.75,5".into();
    day.write(&dir);
    let msg = lean_refusal("lean-nan", &dir);
    assert_names(
        "lean-nan",
        &msg,
        &[
            &format!(
                "{}/{}:2",
                dir.join("20131008_trade.zip").display(),
                day.trade_name()
            ),
            "open NaN",
            "fix or delete the row",
        ],
    );
}

#[test]
fn lean_a_negative_bid_in_a_quote_row() {
    let dir = scratch("lean-negative-bid");
    let mut day = LeanDay::valid("20131008", 4);
    day.quote[0] = "60000,1,1,1,-1676.5,40,1676.75,1676.75,1676.75,1676.75,30".into();
    day.write(&dir);
    let msg = lean_refusal("lean-negative-bid", &dir);
    assert_names(
        "lean-negative-bid",
        &msg,
        &[
            &format!(
                "{}/{}:1",
                dir.join("20131008_quote.zip").display(),
                day.quote_name()
            ),
            "bid_close -1676.5",
            "not a finite positive price",
        ],
    );
}

#[test]
fn lean_unsorted_trade_rows() {
    let dir = scratch("lean-unsorted");
    let mut day = LeanDay::valid("20131008", 5);
    day.trade.swap(2, 3);
    day.write(&dir);
    let msg = lean_refusal("lean-unsorted", &dir);
    assert_names(
        "lean-unsorted",
        &msg,
        &[
            &format!("{}:4", day.trade_name()),
            "is not after time",
            "sort the rows by time",
        ],
    );
}

#[test]
fn lean_a_trade_zip_without_its_quote_zip() {
    let dir = scratch("lean-no-quote");
    let day = LeanDay::valid("20131008", 3);
    day.write(&dir);
    std::fs::remove_file(dir.join("20131008_quote.zip")).unwrap();
    let msg = lean_refusal("lean-no-quote", &dir);
    assert_names(
        "lean-no-quote",
        &msg,
        &[
            &day.trade_name(),
            &format!("20131008_quote.zip/{}", day.quote_name()),
            "add the quote data of that day",
        ],
    );
}

#[test]
fn lean_a_zip_named_with_an_impossible_date() {
    let dir = scratch("lean-bad-name");
    let zip = dir.join("20131345_trade.zip");
    std::fs::write(&zip, LeanDay::valid("20131008", 2).trade_zip()).unwrap();
    let msg = lean_refusal("lean-bad-name", &dir);
    assert_names(
        "lean-bad-name",
        &msg,
        &[
            s(&zip),
            "YYYYMMDD_trade.zip with a valid date",
            "rename the file",
        ],
    );
}

#[test]
fn lean_a_folder_without_zips() {
    let dir = scratch("lean-empty");
    std::fs::write(dir.join("notes.txt"), b"no data").unwrap();
    let msg = lean_refusal("lean-empty", &dir);
    assert_names(
        "lean-empty",
        &msg,
        &[
            s(&dir),
            "no YYYYMMDD_trade.zip files",
            "point at a folder of LEAN",
        ],
    );
}

#[test]
fn lean_an_entry_that_is_not_text() {
    let dir = scratch("lean-binary");
    let day = LeanDay::valid("20131008", 2);
    let zip = dir.join("20131008_trade.zip");
    std::fs::write(
        &zip,
        zip_bytes(&[(&day.trade_name(), b"60000,\xff\xfe,1,1,1,1")]),
    )
    .unwrap();
    std::fs::write(dir.join("20131008_quote.zip"), day.quote_zip()).unwrap();
    let msg = lean_refusal("lean-binary", &dir);
    assert_names(
        "lean-binary",
        &msg,
        &[
            &format!("{}/{}", zip.display(), day.trade_name()),
            "is not UTF-8 text (invalid byte at offset 6)",
            "intact copy",
        ],
    );
}

// ---- Configs ------------------------------------------------------------------------------

/// The refusal of the CPU preset's config with the `--set` overrides `sets` (and a config
/// file of `file` where given).
fn config_refusal(case: &str, file: Option<&str>, sets: &[&str]) -> (String, Option<PathBuf>) {
    let path = file.map(|text| {
        let p = scratch(case).join("run.toml");
        std::fs::write(&p, text).unwrap();
        p
    });
    let opts = TrainOptions {
        config: path.clone(),
        sets: sets.iter().map(|s| s.to_string()).collect(),
        ..TrainOptions::default()
    };
    let msg = refusal(
        case,
        tallyho::train::resolve_config(&opts, Preset::Cpu, FEATURE_DIM),
    );
    (msg, path)
}

/// (case, --set, what the message must name).
const SET_CASES: [(&str, &str, &[&str]); 17] = [
    ("envs-zero", "env.envs=0", &["env.envs is 0", "at least 1"]),
    (
        "envs-negative",
        "env.envs=-5",
        &[
            "--set env.envs=-5",
            "env.envs = -5",
            "give an integer from 0 to",
            "the default is",
        ],
    ),
    (
        "envs-huge",
        "env.envs=4611686018427387904",
        &[
            "env.envs = 4611686018427387904 is above 16777216",
            "lower --envs",
        ],
    ),
    (
        "batch-zero",
        "replay.batch=0",
        &["replay.batch is 0", "at least 1"],
    ),
    (
        "batch-huge",
        "replay.batch=4611686018427387904",
        &[
            "replay.batch = 4611686018427388000 is outside [1, 2^28]",
            "lower replay.batch",
        ],
    ),
    (
        "capacity-below-4-batches",
        "replay.capacity=100",
        &[
            "replay.capacity 100 is below 4 x batch 64 (= 256)",
            "raise replay.capacity or lower replay.batch",
        ],
    ),
    (
        "branches-mismatch",
        "qnet.branches=[3, 4, 3]",
        &[
            "qnet.branches [3, 4, 3]",
            "not the action space [3, 5, 3]",
            "ACTION_BRANCHES",
        ],
    ),
    (
        "branches-wrong-element",
        "qnet.branches=[3, \"five\", 3]",
        &[
            "qnet.branches = [3, \"five\", 3]",
            "expected usize",
            "give an integer",
        ],
    ),
    (
        "gamma-above-1",
        "qnet.gamma=1.5",
        &[
            "qnet.gamma = 1.5 is outside (0, 1]",
            "a discount such as 0.99",
        ],
    ),
    (
        "gamma-zero",
        "qnet.gamma=0",
        &[
            "qnet.gamma = 0 is outside (0, 1]",
            "a discount such as 0.99",
        ],
    ),
    (
        "v-min-not-below-v-max",
        "qnet.v_min=10",
        &[
            "qnet.v_max = 10 is outside (v_min, +inf)",
            "set v_max above v_min",
        ],
    ),
    (
        "atoms-zero",
        "qnet.atoms=0",
        &["qnet.atoms is 0", "at least 1"],
    ),
    (
        "n-step-zero",
        "qnet.n_step=0",
        &["qnet.n_step is 0", "at least 1"],
    ),
    (
        "n-step-beyond-u32",
        "qnet.n_step=5000000000",
        &[
            "qnet.n_step = 5000000000",
            "an integer from 0 to 4294967295",
        ],
    ),
    (
        "width-huge",
        "qnet.h1=1000000000000",
        &[
            "qnet.h1 = 1000000000000 is outside [1, 65536]",
            "a width of at most 65536",
        ],
    ),
    (
        "lr-nan",
        "qnet.lr=nan",
        &[
            "qnet.lr = NaN is outside (0, +inf)",
            "a learning rate such as 1e-4",
        ],
    ),
    (
        "commission-infinite",
        "env.commission=inf",
        &[
            "env.commission = inf is outside >= 0, finite",
            "a fee per contract such as 2.5",
        ],
    ),
];

#[test]
fn config_sets_out_of_range_or_of_the_wrong_type() {
    for (case, set, parts) in SET_CASES {
        let (msg, _) = config_refusal(case, None, &[set]);
        assert_names(case, &msg, parts);
    }
}

#[test]
fn config_a_set_without_a_value() {
    let (msg, _) = config_refusal("set-no-value", None, &["qnet.lr"]);
    assert_names(
        "set-no-value",
        &msg,
        &["--set qnet.lr", "expected key=value", "--set qnet.lr=3e-4"],
    );
}

#[test]
fn config_a_file_with_an_unknown_key() {
    let (msg, path) = config_refusal(
        "file-unknown-key",
        Some("[replay]\ncapacityy = 4096\n"),
        &[],
    );
    assert_names(
        "file-unknown-key",
        &msg,
        &[
            s(&path.unwrap()),
            "unknown key replay.capacityy",
            "[replay] has ",
            "capacity",
        ],
    );
}

#[test]
fn config_a_file_with_a_value_of_the_wrong_type() {
    let (msg, path) = config_refusal("file-wrong-type", Some("[env]\nenvs = \"many\"\n"), &[]);
    assert_names(
        "file-wrong-type",
        &msg,
        &[
            s(&path.unwrap()),
            "env.envs = \"many\" is a string",
            "takes an integer",
            "the default is",
        ],
    );
}

#[test]
fn config_a_file_with_a_negative_size() {
    let (msg, path) = config_refusal("file-negative", Some("[replay]\ncapacity = -4096\n"), &[]);
    assert_names(
        "file-negative",
        &msg,
        &[
            s(&path.unwrap()),
            "replay.capacity = -4096",
            "give an integer from 0 to",
        ],
    );
}

#[test]
fn config_a_file_that_is_not_toml() {
    let (msg, path) = config_refusal("file-not-toml", Some("[qnet\nlr = 1\n"), &[]);
    assert_names(
        "file-not-toml",
        &msg,
        &[s(&path.unwrap()), "is not valid TOML", "line 1"],
    );
}

#[test]
fn config_an_unknown_section() {
    let (msg, _) = config_refusal("unknown-section", None, &["optimizer.lr=0.1"]);
    assert_names(
        "unknown-section",
        &msg,
        &[
            "--set optimizer.lr=0.1",
            "unknown key optimizer",
            "the config has env, qnet",
        ],
    );
}

// ---- Checkpoints --------------------------------------------------------------------------

/// A tensor of a checkpoint, copied or made up.
struct Raw {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Raw {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// A checkpoint's tensors and metadata, to rebuild it with a change.
fn unpack(bytes: &[u8]) -> (Vec<(String, Raw)>, HashMap<String, String>) {
    let st = SafeTensors::deserialize(bytes).unwrap();
    let (_, meta) = SafeTensors::read_metadata(bytes).unwrap();
    let tensors = st
        .tensors()
        .into_iter()
        .map(|(n, v)| {
            let raw = Raw {
                dtype: v.dtype(),
                shape: v.shape().to_vec(),
                data: v.data().to_vec(),
            };
            (n, raw)
        })
        .collect();
    (tensors, meta.metadata().clone().unwrap_or_default())
}

fn pack(tensors: &[(String, Raw)], meta: HashMap<String, String>) -> Vec<u8> {
    safetensors::serialize(tensors.iter().map(|(n, t)| (n.as_str(), t)), &Some(meta)).unwrap()
}

/// A short CPU run's checkpoint bytes, with the market and header it was written from.
fn good_checkpoint() -> (tallyho_oracle::Market, Header, Vec<u8>) {
    let (market, header, t) = short_run();
    let bytes = checkpoint::serialize(&header, &t).unwrap();
    (market, header, bytes)
}

/// Writes `bytes` as a checkpoint file of the case.
fn checkpoint_file(case: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch(case).join("step-0000000030.safetensors");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn checkpoint_truncated() {
    let (_, _, bytes) = good_checkpoint();
    let path = checkpoint_file("ckpt-truncated", &bytes[..bytes.len() * 2 / 3]);
    let msg = refusal("ckpt-truncated", Checkpoint::read(&path));
    assert_names(
        "ckpt-truncated",
        &msg,
        &[
            s(&path),
            "is not a safetensors file",
            &format!("{} bytes", bytes.len() * 2 / 3),
            "cut short",
            "an older one of the run",
        ],
    );
}

#[test]
fn checkpoint_cut_inside_its_header() {
    let (_, _, bytes) = good_checkpoint();
    let path = checkpoint_file("ckpt-cut-header", &bytes[..100]);
    let msg = refusal("ckpt-cut-header", Checkpoint::read(&path));
    assert_names(
        "ckpt-cut-header",
        &msg,
        &[
            s(&path),
            "is not a safetensors file",
            "point --resume (or tallyho eval) at a checkpoint",
        ],
    );
}

#[test]
fn checkpoint_without_a_tallyho_header() {
    let (_, _, bytes) = good_checkpoint();
    let (tensors, _) = unpack(&bytes);
    let path = checkpoint_file("ckpt-no-header", &pack(&tensors, HashMap::new()));
    let msg = refusal("ckpt-no-header", Checkpoint::read(&path));
    assert_names(
        "ckpt-no-header",
        &msg,
        &[
            s(&path),
            "has no tallyho header",
            "not a checkpoint of tallyho train",
        ],
    );
}

#[test]
fn checkpoint_with_a_corrupt_header() {
    let (_, _, bytes) = good_checkpoint();
    let (tensors, mut meta) = unpack(&bytes);
    let json = meta["tallyho"].replacen("\"step\":30", "\"step\":\"thirty\"", 1);
    meta.insert("tallyho".into(), json);
    let path = checkpoint_file("ckpt-bad-json", &pack(&tensors, meta));
    let msg = refusal("ckpt-bad-json", Checkpoint::read(&path));
    assert_names(
        "ckpt-bad-json",
        &msg,
        &[
            s(&path),
            "its header is not one this tallyho reads",
            "\"thirty\"",
            "resume it with the tallyho that wrote it",
        ],
    );
}

#[test]
fn checkpoint_with_an_invalid_config() {
    let (_, mut header, t) = short_run();
    header.config.qnet.gamma = 7.0;
    let path = checkpoint_file(
        "ckpt-bad-config",
        &checkpoint::serialize(&header, &t).unwrap(),
    );
    let msg = refusal("ckpt-bad-config", Checkpoint::read(&path));
    assert_names(
        "ckpt-bad-config",
        &msg,
        &[
            s(&path),
            "its config is refused",
            "qnet.gamma = 7 is outside (0, 1]",
            "resume from another checkpoint",
        ],
    );
}

#[test]
fn checkpoint_with_an_impossible_feature_count() {
    // usize::MAX + 4 portfolio features once overflowed (a panic) while the config was
    // checked against the state width.
    let (_, mut header, t) = short_run();
    header.market.feature_dim = usize::MAX;
    let path = checkpoint_file(
        "ckpt-features",
        &checkpoint::serialize(&header, &t).unwrap(),
    );
    let msg = refusal("ckpt-features", Checkpoint::read(&path));
    assert_names(
        "ckpt-features",
        &msg,
        &[
            s(&path),
            &format!("{}", header.config.qnet.state_dim),
            &format!("{} market features", usize::MAX),
            "its config is refused",
        ],
    );
}

#[test]
fn checkpoint_whose_header_is_of_another_config() {
    let (market, mut header, t) = short_run();
    header.config.qnet.h1 = 32;
    let want = tallyho_oracle::qnet::param_count(&header.config.qnet);
    let path = checkpoint_file(
        "ckpt-other-config",
        &checkpoint::serialize(&header, &t).unwrap(),
    );
    let c = Checkpoint::read(&path).unwrap();
    let msg = refusal(
        "ckpt-other-config",
        c.trainer(&market, checkpoint::SYNTHETIC),
    );
    assert_names(
        "ckpt-other-config",
        &msg,
        &[
            s(&path),
            &format!(
                "tensor online has {} values, its config says {want}",
                t.online.len()
            ),
            "header is of another run",
        ],
    );
    let msg = refusal("ckpt-other-config (eval)", c.online());
    assert_names(
        "ckpt-other-config (eval)",
        &msg,
        &[s(&path), "tensor online has"],
    );
}

#[test]
fn checkpoint_with_a_tensor_of_another_dtype() {
    let (market, _, bytes) = good_checkpoint();
    let (mut tensors, meta) = unpack(&bytes);
    let adam = tensors.iter_mut().find(|(n, _)| n == "adam.step").unwrap();
    adam.1.dtype = Dtype::I32;
    let path = checkpoint_file("ckpt-dtype", &pack(&tensors, meta));
    let c = Checkpoint::read(&path).unwrap();
    let msg = refusal("ckpt-dtype", c.trainer(&market, checkpoint::SYNTHETIC));
    assert_names(
        "ckpt-dtype",
        &msg,
        &[
            s(&path),
            "tensor adam.step is I32, expected U32",
            "the file is damaged",
            "resume from another checkpoint",
        ],
    );
}

#[test]
fn checkpoint_without_a_tensor() {
    let (market, _, bytes) = good_checkpoint();
    let (mut tensors, meta) = unpack(&bytes);
    tensors.retain(|(n, _)| n != "replay.tree");
    let path = checkpoint_file("ckpt-missing-tensor", &pack(&tensors, meta));
    let c = Checkpoint::read(&path).unwrap();
    let msg = refusal(
        "ckpt-missing-tensor",
        c.trainer(&market, checkpoint::SYNTHETIC),
    );
    assert_names(
        "ckpt-missing-tensor",
        &msg,
        &[
            s(&path),
            "tensor replay.tree is missing",
            "the file is damaged",
        ],
    );
}

#[test]
fn checkpoint_with_a_replay_cursor_past_its_capacity() {
    let (market, header, bytes) = good_checkpoint();
    let (mut tensors, meta) = unpack(&bytes);
    let ctl = tensors.iter_mut().find(|(n, _)| n == "replay.ctl").unwrap();
    let past = header.config.replay.capacity as u32 + 5;
    ctl.1.data[..4].copy_from_slice(&past.to_le_bytes());
    let path = checkpoint_file("ckpt-cursor", &pack(&tensors, meta));
    let c = Checkpoint::read(&path).unwrap();
    let msg = refusal("ckpt-cursor", c.trainer(&market, checkpoint::SYNTHETIC));
    assert_names(
        "ckpt-cursor",
        &msg,
        &[
            s(&path),
            &format!("replay cursor {past}"),
            &format!("capacity {}", header.config.replay.capacity),
            "damaged",
        ],
    );
}

#[test]
fn checkpoint_of_another_market() {
    let (_, _, bytes) = good_checkpoint();
    let path = checkpoint_file("ckpt-other-market", &bytes);
    let c = Checkpoint::read(&path).unwrap();
    let es = tallyho::env::load_market(Some(&es_dir())).unwrap();
    let msg = refusal("ckpt-other-market", c.trainer(&es, s(&es_dir())));
    assert_names(
        "ckpt-other-market",
        &msg,
        &[
            s(&path),
            "trained on synthetic",
            &format!("not on {}", es_dir().display()),
            "resume with --data synthetic",
        ],
    );
}

// ---- Fixtures -----------------------------------------------------------------------------

fn fixture_refusal(case: &str, dir: &Path) -> String {
    refusal(case, fixtures::check(dir, Replayer::Oracle))
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

fn set_manifest(dir: &Path, m: &serde_json::Value) {
    std::fs::write(dir.join("manifest.json"), serde_json::to_string(m).unwrap()).unwrap();
}

#[test]
fn fixtures_a_manifest_that_is_not_json() {
    let dir = fixtures_copy("fix-manifest");
    std::fs::write(dir.join("manifest.json"), b"{\"format\": 1,").unwrap();
    let msg = fixture_refusal("fix-manifest", &dir);
    assert_names(
        "fix-manifest",
        &msg,
        &[
            s(&dir.join("manifest.json")),
            "is not a fixture manifest",
            "git checkout -- fixtures/",
        ],
    );
}

#[test]
fn fixtures_a_truncated_file() {
    let dir = fixtures_copy("fix-truncated");
    let file = dir.join("philox.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 7]).unwrap();
    let msg = fixture_refusal("fix-truncated", &dir);
    assert_names(
        "fix-truncated",
        &msg,
        &[
            s(&file),
            "not a readable safetensors file",
            "tallyho fixtures record",
        ],
    );
}

#[test]
fn fixtures_a_missing_file() {
    let dir = fixtures_copy("fix-missing");
    let file = dir.join("schedule.safetensors");
    std::fs::remove_file(&file).unwrap();
    let msg = fixture_refusal("fix-missing", &dir);
    assert_names(
        "fix-missing",
        &msg,
        &[s(&file), "git checkout -- fixtures/"],
    );
}

#[test]
fn fixtures_a_manifest_naming_a_file_outside_the_folder() {
    let dir = fixtures_copy("fix-outside");
    let mut m = manifest(&dir);
    m["kernels"]["philox"]["file"] = "../philox.safetensors".into();
    set_manifest(&dir, &m);
    let msg = fixture_refusal("fix-outside", &dir);
    assert_names(
        "fix-outside",
        &msg,
        &[
            "manifest entry philox",
            "\"../philox.safetensors\"",
            "not a file name in the fixture folder",
        ],
    );
}

#[test]
fn fixtures_a_manifest_counting_more_calls_than_recorded() {
    let dir = fixtures_copy("fix-calls");
    let mut m = manifest(&dir);
    let calls = m["kernels"]["philox"]["calls"].as_u64().unwrap();
    m["kernels"]["philox"]["calls"] = (calls + 1).into();
    set_manifest(&dir, &m);
    let msg = fixture_refusal("fix-calls", &dir);
    assert_names(
        "fix-calls",
        &msg,
        &[
            s(&dir.join("philox.safetensors")),
            &format!("records {} calls", calls + 1),
            &format!("no tensor of call {calls}"),
        ],
    );
}

#[test]
fn fixtures_a_stale_source_hash() {
    let dir = fixtures_copy("fix-stale");
    let mut m = manifest(&dir);
    m["kernels"]["philox"]["sha256"] = "0123456789abcdef".into();
    set_manifest(&dir, &m);
    let msg = fixture_refusal("fix-stale", &dir);
    assert_names(
        "fix-stale",
        &msg,
        &[
            "stale: cuda/philox.cu changed",
            "recorded sha256 0123456789ab",
            "re-record with `tallyho fixtures record`",
        ],
    );
}

#[test]
fn fixtures_a_tensor_of_another_dtype() {
    let dir = fixtures_copy("fix-dtype");
    let file = dir.join("philox.safetensors");
    let (mut tensors, _) = unpack(&std::fs::read(&file).unwrap());
    let (name, t) = tensors
        .iter_mut()
        .find(|(n, _)| n.starts_with("0/out/"))
        .unwrap();
    let name = name.clone();
    let (was, now) = match t.dtype {
        Dtype::U32 => (Dtype::U32, Dtype::I32),
        other => (other, Dtype::U32),
    };
    t.dtype = now;
    std::fs::write(
        &file,
        safetensors::serialize(tensors.iter().map(|(n, t)| (n.as_str(), t)), &None).unwrap(),
    )
    .unwrap();
    let msg = fixture_refusal("fix-dtype", &dir);
    assert_names(
        "fix-dtype",
        &msg,
        &[
            &format!("tensor {name}"),
            "fixtures/philox.safetensors",
            &format!("is {now:?}, expected {was:?}"),
            "git checkout -- fixtures/",
        ],
    );
}

// ---- End to end: the binary -----------------------------------------------------------------

/// `tallyho train --backend cpu --quiet ARGS`: refused, and its stderr.
fn cli_refusal(case: &str, args: &[&str]) -> String {
    let mut a = vec!["train", "--backend", "cpu", "--quiet"];
    a.extend_from_slice(args);
    let (ok, stdout, stderr) = tallyho(&a);
    assert!(!ok, "case {case}: accepted:\n{stdout}");
    stderr
}

fn tallyho(args: &[&str]) -> (bool, String, String) {
    let bin = std::env::var_os("NEXTEST_BIN_EXE_tallyho")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tallyho").into());
    let out = std::process::Command::new(&bin)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_a_config_file_with_a_negative_size() {
    let dir = scratch("cli-config");
    let file = dir.join("run.toml");
    std::fs::write(&file, "[env]\nenvs = -3\n").unwrap();
    let out = dir.join("run");
    let err = cli_refusal("cli-config", &["--config", s(&file), "--out", s(&out)]);
    assert_names(
        "cli-config",
        &err,
        &[s(&file), "env.envs = -3", "give an integer from 0 to"],
    );
    assert!(!out.exists(), "a refused run writes nothing");
}

#[test]
fn cli_a_set_of_gamma_zero() {
    let err = cli_refusal("cli-gamma", &["--set", "qnet.gamma=0", "--print-config"]);
    assert_names(
        "cli-gamma",
        &err,
        &[
            "qnet.gamma = 0 is outside (0, 1]",
            "a discount such as 0.99",
        ],
    );
}

#[test]
fn cli_data_with_a_nan_price() {
    let dir = scratch("cli-data");
    let file = dir.join("bars.csv");
    std::fs::write(&file, csv_with(4, 4, "nan")).unwrap();
    let err = cli_refusal(
        "cli-data",
        &["--data", s(&file), "--out", s(&dir.join("run"))],
    );
    assert_names(
        "cli-data",
        &err,
        &[
            &format!("{}:6", file.display()),
            "close NaN",
            "fix or delete the row",
        ],
    );
}

#[test]
fn cli_resume_from_a_truncated_checkpoint() {
    let (_, _, bytes) = good_checkpoint();
    let dir = scratch("cli-resume");
    let ckpt = dir.join("checkpoints").join("step-0000000030.safetensors");
    std::fs::create_dir_all(ckpt.parent().unwrap()).unwrap();
    std::fs::write(&ckpt, &bytes[..bytes.len() / 2]).unwrap();
    let err = cli_refusal("cli-resume", &["--resume", s(&dir), "--steps", "40"]);
    assert_names(
        "cli-resume",
        &err,
        &[
            s(&ckpt),
            "is not a safetensors file",
            "cut short",
            "an older one of the run",
        ],
    );
}

#[test]
fn cli_resume_with_another_config() {
    let (_, _, bytes) = good_checkpoint();
    let dir = scratch("cli-resume-config");
    let ckpt = dir.join("checkpoints").join("step-0000000030.safetensors");
    std::fs::create_dir_all(ckpt.parent().unwrap()).unwrap();
    std::fs::write(&ckpt, &bytes).unwrap();
    let err = cli_refusal(
        "cli-resume-config",
        &["--resume", s(&dir), "--steps", "40", "--set", "qnet.h1=32"],
    );
    assert_names(
        "cli-resume-config",
        &err,
        &[
            s(&ckpt),
            "these keys would change it",
            "qnet.h1: 64 vs 32",
            "start a new run",
        ],
    );
}

#[test]
fn cli_eval_of_a_file_that_is_not_a_checkpoint() {
    let dir = scratch("cli-eval");
    let junk = dir.join("model.safetensors");
    std::fs::write(&junk, b"\x08\0\0\0\0\0\0\0{}      ").unwrap();
    let (ok, _, err) = tallyho(&["eval", s(&junk)]);
    assert!(!ok, "case cli-eval: accepted");
    assert_names(
        "cli-eval",
        &err,
        &[
            s(&junk),
            "has no tallyho header",
            "not a checkpoint of tallyho train",
        ],
    );
}
