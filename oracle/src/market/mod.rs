//! Market data: minute bars from QuantConnect LEAN zips, from a plain CSV file, or from a
//! seeded synthetic generator. Every loader checks every row once, with errors that name
//! the file, the line (1-based, as an editor shows it), the value and the fix.
//!
//! The real data used by the tests, `shared/data/lean-es-minute-2013-10`, is CME E-mini
//! S&P 500 (ES) minute data in the LEAN format, taken from the QuantConnect/Lean repository
//! (Apache-2.0) and originally provided by AlgoSeek. Keep this credit wherever it is shown.
//!
//! The loaders: [`load`] dispatches a path to [`load_lean`] (lean.rs: LEAN equity and
//! futures minute zips, futures back-adjusted at rolls) or [`load_csv`] (csv.rs);
//! [`load_detailed`] also returns a LEAN folder's day list and rolls. docs/DATA.md gives
//! every layout field by field; [`synthetic`] (synthetic.rs) generates bars; time.rs holds the civil-date
//! arithmetic they share. This file holds [`Bars`], its errors and the row checks every
//! loader applies.

mod csv;
mod lean;
mod synthetic;
mod time;

use std::fmt;
use std::fs;
use std::path::Path;

pub use csv::{load_csv, write_csv};
pub use lean::{load_lean, read_lean, LeanAsset, LeanDay, LeanLog, LeanRoll, EQUITY_PRICE_SCALE};
pub use synthetic::{synthetic, SyntheticConfig};
use time::civil_from_days;

pub const MS_PER_DAY: i64 = 86_400_000;
const MS_PER_MINUTE: i64 = 60_000;

/// Tick assumed for a CSV file without quote columns: its quote is
/// bid = close - CSV_TICK / 2, ask = close + CSV_TICK / 2, bid_size = ask_size = 1
/// (a fixed, documented spread, so that the same file always gives the same bars).
pub const CSV_TICK: f64 = 0.25;

/// Integer CSV timestamps below this are epoch seconds, the others epoch milliseconds.
pub const EPOCH_SECONDS_BELOW: i64 = 100_000_000_000;

/// Minute bars: trade OHLCV plus the top-of-book quote at the bar's close, one entry per
/// bar, time increasing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Bars {
    /// Bar time in epoch milliseconds (naive exchange-local time for LEAN data).
    pub time_ms: Vec<i64>,
    pub open: Vec<f64>,
    pub high: Vec<f64>,
    pub low: Vec<f64>,
    pub close: Vec<f64>,
    pub volume: Vec<f64>,
    pub bid: Vec<f64>,
    pub ask: Vec<f64>,
    pub bid_size: Vec<f64>,
    pub ask_size: Vec<f64>,
}

/// One bar while it is checked and appended.
struct Row {
    time: i64,
    open: f64,
    high: f64,
    low: f64,
    close: f64,
    volume: f64,
    bid: f64,
    ask: f64,
    bid_size: f64,
    ask_size: f64,
}

/// A time in epoch milliseconds, shown as the number and as `YYYY-MM-DD HH:MM:SS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochMs(pub i64);

impl fmt::Display for EpochMs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = civil_from_days(self.0.div_euclid(MS_PER_DAY));
        let s = self.0.rem_euclid(MS_PER_DAY) / 1000;
        write!(
            f,
            "{} ({y:04}-{m:02}-{d:02} {:02}:{:02}:{:02})",
            self.0,
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MarketError {
    #[error("cannot read {path}: {err}: check that it exists and is readable")]
    Read { path: String, err: std::io::Error },
    #[error("{path} is not UTF-8 text (invalid byte at offset {offset}): {fix}")]
    NotText {
        path: String,
        offset: usize,
        fix: &'static str,
    },
    #[error("cannot write {path}: {err}: check that its folder exists and is writable")]
    Write { path: String, err: std::io::Error },
    #[error("{path} is not a readable zip archive ({err}): replace it with an intact copy")]
    Zip {
        path: String,
        err: zip::result::ZipError,
    },
    #[error("{path} is neither a folder of LEAN zips nor a .csv file: pass one of those")]
    UnknownFormat { path: String },
    #[error("{path} has no bars ({what}): {fix}")]
    Empty {
        path: String,
        what: &'static str,
        fix: &'static str,
    },
    #[error(
        "{path}: the name is not YYYYMMDD_trade.zip with a valid date: rename the file or move it out of the folder"
    )]
    BadFileName { path: String },
    #[error(
        "trade file {trade} has no quote file {expected}: add the quote data of that day or remove its trade file"
    )]
    MissingQuote { trade: String, expected: String },
    #[error(
        "{zip}: entry `{entry}` is not named {date}_SYMBOL_minute_trade.csv (equity) or {date}_SYMBOL_minute_trade_CONTRACT.csv (future): rename it or remove it from the zip"
    )]
    BadEntryName {
        zip: String,
        entry: String,
        date: String,
    },
    #[error(
        "{zip}: entry `{entry}` is LEAN {resolution} data: only minute data is read; pass a folder of minute zips (LEAN's .../minute/<symbol>/)"
    )]
    WrongResolution {
        zip: String,
        entry: String,
        resolution: &'static str,
    },
    #[error(
        "{zip}: entry `{entry}` names contract `{contract}`, which does not start with its expiry month YYYYMM (ES December 2013: 201312): only LEAN equity and futures minute data is read (not options); rename the entry or remove the zip"
    )]
    BadContract {
        zip: String,
        entry: String,
        contract: String,
    },
    #[error("{other} ({other_kind}) does not go with {first} ({first_kind}): load one symbol of one asset class per folder, with one CSV per equity trade zip or one CSV per contract in a futures trade zip")]
    MixedLean {
        first: String,
        first_kind: String,
        other: String,
        other_kind: String,
    },
    #[error("{zip} has no trade CSV of contract {floor} (the front of the day before) or later: the front contract never rolls back; add the day's later contracts or remove the zip")]
    NoFrontContract { zip: String, floor: String },
    #[error("{zip}: cannot measure the roll from {from} to {to}: there is no {to} trade at or before {at}, the last {from} bar: add the {to} trade CSV of that day to the zip (LEAN daily zips hold every listed contract)")]
    RollGap {
        zip: String,
        from: String,
        to: String,
        at: EpochMs,
    },
    #[error("back-adjusting {date} ({contract}) by {shift:+} for the later rolls makes a price {value}, not positive: load fewer days before the rolls")]
    AdjustedPrice {
        date: String,
        contract: String,
        shift: f64,
        value: f64,
    },
    #[error("{file}:{line}: the header `{header}` has no column `{column}`: {fix}")]
    MissingColumn {
        file: String,
        line: usize,
        column: &'static str,
        header: String,
        fix: &'static str,
    },
    #[error(
        "{file}:{line}: the header `{header}` names `{column}` twice: keep one column of that name"
    )]
    DuplicateColumn {
        file: String,
        line: usize,
        column: String,
        header: String,
    },
    #[error("{file}:{line}: expected {expected} fields, found {found} in `{row}`: fix or delete the row")]
    FieldCount {
        file: String,
        line: usize,
        expected: usize,
        found: usize,
        row: String,
    },
    #[error("{file}:{line}: {column} `{field}` is not {expected}: fix or delete the row")]
    BadNumber {
        file: String,
        line: usize,
        column: &'static str,
        field: String,
        expected: &'static str,
    },
    #[error(
        "{file}:{line}: {column} {value} is not a finite positive price: fix or delete the row"
    )]
    BadPrice {
        file: String,
        line: usize,
        column: &'static str,
        value: f64,
    },
    #[error(
        "{file}:{line}: high {high} is below low {low}: fix the row (are the columns swapped?)"
    )]
    HighBelowLow {
        file: String,
        line: usize,
        high: f64,
        low: f64,
    },
    #[error("{file}:{line}: {column} {value} is outside [low {low}, high {high}]: fix the row so that low <= open, close <= high")]
    OutsideRange {
        file: String,
        line: usize,
        column: &'static str,
        value: f64,
        low: f64,
        high: f64,
    },
    #[error("{file}:{line}: {column} {value} is negative or not finite: volumes and sizes must be finite and >= 0")]
    BadQuantity {
        file: String,
        line: usize,
        column: &'static str,
        value: f64,
    },
    #[error(
        "{file}:{line}: bid {bid} is above ask {ask} (crossed quote): fix the row or swap the bid and ask columns"
    )]
    CrossedQuote {
        file: String,
        line: usize,
        bid: f64,
        ask: f64,
    },
    #[error("{file}:{line}: time {time} is not after time {prev_time} at {prev_at}: sort the rows by time and drop duplicates")]
    TimeNotIncreasing {
        file: String,
        line: usize,
        time: EpochMs,
        prev_time: EpochMs,
        prev_at: String,
    },
    #[error("{origin}: {field} has {len} entries but time_ms has {expected}: give every column one entry per bar")]
    LengthMismatch {
        origin: String,
        field: &'static str,
        len: usize,
        expected: usize,
    },
    #[error("{name} = {value} is invalid: {fix}")]
    BadConfig {
        name: &'static str,
        value: String,
        fix: &'static str,
    },
    #[error("{bars} bars leave {train} training and {test} test bars after the {warmup}-bar warm-up: at least 2 training bars and 1 test bar are needed; load more bars or move train_fraction toward 0.5")]
    TooFewBars {
        bars: usize,
        warmup: usize,
        train: usize,
        test: usize,
    },
}

impl Bars {
    pub fn len(&self) -> usize {
        self.time_ms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.time_ms.is_empty()
    }

    /// The checks of the loaders, for bars built in memory: equal column lengths, then
    /// per bar the row checks and strictly increasing time. Errors name `origin` as the
    /// file and the 1-based bar number as the line.
    pub fn validate(&self, origin: &str) -> Result<(), MarketError> {
        let n = self.len();
        let columns = [
            ("open", self.open.len()),
            ("high", self.high.len()),
            ("low", self.low.len()),
            ("close", self.close.len()),
            ("volume", self.volume.len()),
            ("bid", self.bid.len()),
            ("ask", self.ask.len()),
            ("bid_size", self.bid_size.len()),
            ("ask_size", self.ask_size.len()),
        ];
        for (field, len) in columns {
            if len != n {
                return Err(MarketError::LengthMismatch {
                    origin: origin.into(),
                    field,
                    len,
                    expected: n,
                });
            }
        }
        for i in 0..n {
            check_row(origin, i + 1, &self.row(i))?;
            check_time(
                origin,
                i + 1,
                self.time_ms[i],
                (i > 0).then(|| (self.time_ms[i - 1], origin, i)),
            )?;
        }
        Ok(())
    }

    fn row(&self, i: usize) -> Row {
        Row {
            time: self.time_ms[i],
            open: self.open[i],
            high: self.high[i],
            low: self.low[i],
            close: self.close[i],
            volume: self.volume[i],
            bid: self.bid[i],
            ask: self.ask[i],
            bid_size: self.bid_size[i],
            ask_size: self.ask_size[i],
        }
    }

    fn push(&mut self, r: Row) {
        self.time_ms.push(r.time);
        self.open.push(r.open);
        self.high.push(r.high);
        self.low.push(r.low);
        self.close.push(r.close);
        self.volume.push(r.volume);
        self.bid.push(r.bid);
        self.ask.push(r.ask);
        self.bid_size.push(r.bid_size);
        self.ask_size.push(r.ask_size);
    }
}

/// Per-row checks: prices finite and > 0, low <= open, close <= high, volume and sizes
/// finite and >= 0, bid <= ask (a locked quote, bid = ask, is allowed).
fn check_row(file: &str, line: usize, r: &Row) -> Result<(), MarketError> {
    let prices = [
        ("open", r.open),
        ("high", r.high),
        ("low", r.low),
        ("close", r.close),
        ("bid", r.bid),
        ("ask", r.ask),
    ];
    for (column, value) in prices {
        check_price(file, line, column, value)?;
    }
    if r.high < r.low {
        return Err(MarketError::HighBelowLow {
            file: file.into(),
            line,
            high: r.high,
            low: r.low,
        });
    }
    for (column, value) in [("open", r.open), ("close", r.close)] {
        if !(r.low..=r.high).contains(&value) {
            return Err(MarketError::OutsideRange {
                file: file.into(),
                line,
                column,
                value,
                low: r.low,
                high: r.high,
            });
        }
    }
    for (column, value) in [
        ("volume", r.volume),
        ("bid_size", r.bid_size),
        ("ask_size", r.ask_size),
    ] {
        check_quantity(file, line, column, value)?;
    }
    if r.bid > r.ask {
        return Err(MarketError::CrossedQuote {
            file: file.into(),
            line,
            bid: r.bid,
            ask: r.ask,
        });
    }
    Ok(())
}

fn check_price(
    file: &str,
    line: usize,
    column: &'static str,
    value: f64,
) -> Result<f64, MarketError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(MarketError::BadPrice {
            file: file.into(),
            line,
            column,
            value,
        })
    }
}

fn check_quantity(
    file: &str,
    line: usize,
    column: &'static str,
    value: f64,
) -> Result<f64, MarketError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(MarketError::BadQuantity {
            file: file.into(),
            line,
            column,
            value,
        })
    }
}

/// `time` must be after the previous row's, given as (time, file, line).
fn check_time(
    file: &str,
    line: usize,
    time: i64,
    prev: Option<(i64, &str, usize)>,
) -> Result<(), MarketError> {
    match prev {
        Some((prev_time, prev_file, prev_line)) if time <= prev_time => {
            Err(MarketError::TimeNotIncreasing {
                file: file.into(),
                line,
                time: EpochMs(time),
                prev_time: EpochMs(prev_time),
                prev_at: format!("{prev_file}:{prev_line}"),
            })
        }
        _ => Ok(()),
    }
}

/// Appends checked rows, remembering where the previous one came from for the time check.
#[derive(Default)]
struct Builder {
    bars: Bars,
    prev: Option<(i64, usize)>,
    prev_file: String,
}

impl Builder {
    fn push(&mut self, file: &str, line: usize, r: Row) -> Result<(), MarketError> {
        check_row(file, line, &r)?;
        check_time(
            file,
            line,
            r.time,
            self.prev.map(|(t, l)| (t, self.prev_file.as_str(), l)),
        )?;
        if self.prev_file != file {
            self.prev_file = file.to_string();
        }
        self.prev = Some((r.time, line));
        self.bars.push(r);
        Ok(())
    }
}

/// Non-empty lines with their 1-based line numbers, `\r` and a UTF-8 BOM removed.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            (
                i + 1,
                l.trim_start_matches('\u{feff}').trim_end_matches('\r'),
            )
        })
        .filter(|(_, l)| !l.trim().is_empty())
}

fn fields<'a>(
    file: &str,
    line: usize,
    row: &'a str,
    expected: usize,
) -> Result<Vec<&'a str>, MarketError> {
    let f: Vec<&str> = row.split(',').map(str::trim).collect();
    if f.len() == expected {
        Ok(f)
    } else {
        Err(MarketError::FieldCount {
            file: file.into(),
            line,
            expected,
            found: f.len(),
            row: row.into(),
        })
    }
}

fn number(file: &str, line: usize, column: &'static str, field: &str) -> Result<f64, MarketError> {
    field.parse().map_err(|_| MarketError::BadNumber {
        file: file.into(),
        line,
        column,
        field: field.into(),
        expected: "a number",
    })
}

fn read(path: &Path) -> Result<String, MarketError> {
    let bytes = fs::read(path).map_err(|err| MarketError::Read {
        path: path.display().to_string(),
        err,
    })?;
    text(
        path.display().to_string(),
        bytes,
        "give a comma-separated text file (is it a spreadsheet, a compressed file or a binary?)",
    )
}

/// `bytes` as UTF-8 text; else an error naming `path`, the first bad byte and `fix`.
fn text(path: String, bytes: Vec<u8>, fix: &'static str) -> Result<String, MarketError> {
    String::from_utf8(bytes).map_err(|e| MarketError::NotText {
        path,
        offset: e.utf8_error().valid_up_to(),
        fix,
    })
}

/// A folder of LEAN zips, or a .csv file.
pub fn load(path: &Path) -> Result<Bars, MarketError> {
    load_detailed(path).map(|(bars, _)| bars)
}

/// [`load`], with the day list and rolls of a LEAN folder ([`read_lean`]); `None` for a CSV file.
pub fn load_detailed(path: &Path) -> Result<(Bars, Option<LeanLog>), MarketError> {
    let meta = fs::metadata(path).map_err(|err| MarketError::Read {
        path: path.display().to_string(),
        err,
    })?;
    if meta.is_dir() {
        read_lean(path).map(|(bars, log)| (bars, Some(log)))
    } else if path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
    {
        load_csv(path).map(|bars| (bars, None))
    } else {
        Err(MarketError::UnknownFormat {
            path: path.display().to_string(),
        })
    }
}
