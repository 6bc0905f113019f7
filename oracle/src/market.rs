//! Market data: minute bars from QuantConnect LEAN zips, from a plain CSV file, or from a
//! seeded synthetic generator. Every loader checks every row once, with errors that name
//! the file, the line (1-based, as an editor shows it), the value and the fix.
//!
//! The real data used by the tests, `shared/data/lean-es-minute-2013-10`, is CME E-mini
//! S&P 500 (ES) minute data in the LEAN format, taken from the QuantConnect/Lean repository
//! (Apache-2.0) and originally provided by AlgoSeek. Keep this credit wherever it is shown.

use std::fmt;
use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

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
        write!(f, "{} ({y:04}-{m:02}-{d:02} {:02}:{:02}:{:02})", self.0, s / 3600, s / 60 % 60, s % 60)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MarketError {
    #[error("cannot read {path}: {err}: check that it exists and is readable")]
    Read { path: String, err: std::io::Error },
    #[error("cannot write {path}: {err}: check that its folder exists and is writable")]
    Write { path: String, err: std::io::Error },
    #[error("{path} is not a readable zip archive ({err}): replace it with an intact copy")]
    Zip { path: String, err: zip::result::ZipError },
    #[error("{path} is neither a folder of LEAN zips nor a .csv file: pass one of those")]
    UnknownFormat { path: String },
    #[error("{path} has no bars ({what}): {fix}")]
    Empty { path: String, what: &'static str, fix: &'static str },
    #[error(
        "{path}: the name is not YYYYMMDD_trade.zip with a valid date: rename the file or move it out of the folder"
    )]
    BadFileName { path: String },
    #[error(
        "trade file {trade} has no quote file {expected}: add the quote data of that day or remove its trade file"
    )]
    MissingQuote { trade: String, expected: String },
    #[error("{file}:{line}: the header `{header}` has no column `{column}`: {fix}")]
    MissingColumn { file: String, line: usize, column: &'static str, header: String, fix: &'static str },
    #[error("{file}:{line}: expected {expected} fields, found {found} in `{row}`: fix or delete the row")]
    FieldCount { file: String, line: usize, expected: usize, found: usize, row: String },
    #[error("{file}:{line}: {column} `{field}` is not {expected}: fix or delete the row")]
    BadNumber { file: String, line: usize, column: &'static str, field: String, expected: &'static str },
    #[error("{file}:{line}: {column} {value} is not a finite positive price: fix or delete the row")]
    BadPrice { file: String, line: usize, column: &'static str, value: f64 },
    #[error("{file}:{line}: high {high} is below low {low}: fix the row (are the columns swapped?)")]
    HighBelowLow { file: String, line: usize, high: f64, low: f64 },
    #[error("{file}:{line}: {column} {value} is outside [low {low}, high {high}]: fix the row so that low <= open, close <= high")]
    OutsideRange { file: String, line: usize, column: &'static str, value: f64, low: f64, high: f64 },
    #[error("{file}:{line}: {column} {value} is negative or not finite: volumes and sizes must be finite and >= 0")]
    BadQuantity { file: String, line: usize, column: &'static str, value: f64 },
    #[error(
        "{file}:{line}: bid {bid} is above ask {ask} (crossed quote): fix the row or swap the bid and ask columns"
    )]
    CrossedQuote { file: String, line: usize, bid: f64, ask: f64 },
    #[error("{file}:{line}: time {time} is not after time {prev_time} at {prev_at}: sort the rows by time and drop duplicates")]
    TimeNotIncreasing { file: String, line: usize, time: EpochMs, prev_time: EpochMs, prev_at: String },
    #[error("{origin}: {field} has {len} entries but time_ms has {expected}: give every column one entry per bar")]
    LengthMismatch { origin: String, field: &'static str, len: usize, expected: usize },
    #[error("{name} = {value} is invalid: {fix}")]
    BadConfig { name: &'static str, value: String, fix: &'static str },
    #[error("{bars} bars leave {train} training and {test} test bars after the {warmup}-bar warm-up: at least 2 training bars and 1 test bar are needed; load more bars or move train_fraction toward 0.5")]
    TooFewBars { bars: usize, warmup: usize, train: usize, test: usize },
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
                return Err(MarketError::LengthMismatch { origin: origin.into(), field, len, expected: n });
            }
        }
        for i in 0..n {
            check_row(origin, i + 1, &self.row(i))?;
            check_time(origin, i + 1, self.time_ms[i], (i > 0).then(|| (self.time_ms[i - 1], origin, i)))?;
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
    let prices =
        [("open", r.open), ("high", r.high), ("low", r.low), ("close", r.close), ("bid", r.bid), ("ask", r.ask)];
    for (column, value) in prices {
        check_price(file, line, column, value)?;
    }
    if r.high < r.low {
        return Err(MarketError::HighBelowLow { file: file.into(), line, high: r.high, low: r.low });
    }
    for (column, value) in [("open", r.open), ("close", r.close)] {
        if !(r.low..=r.high).contains(&value) {
            return Err(MarketError::OutsideRange { file: file.into(), line, column, value, low: r.low, high: r.high });
        }
    }
    for (column, value) in [("volume", r.volume), ("bid_size", r.bid_size), ("ask_size", r.ask_size)] {
        check_quantity(file, line, column, value)?;
    }
    if r.bid > r.ask {
        return Err(MarketError::CrossedQuote { file: file.into(), line, bid: r.bid, ask: r.ask });
    }
    Ok(())
}

fn check_price(file: &str, line: usize, column: &'static str, value: f64) -> Result<f64, MarketError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(MarketError::BadPrice { file: file.into(), line, column, value })
    }
}

fn check_quantity(file: &str, line: usize, column: &'static str, value: f64) -> Result<f64, MarketError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(MarketError::BadQuantity { file: file.into(), line, column, value })
    }
}

/// `time` must be after the previous row's, given as (time, file, line).
fn check_time(file: &str, line: usize, time: i64, prev: Option<(i64, &str, usize)>) -> Result<(), MarketError> {
    match prev {
        Some((prev_time, prev_file, prev_line)) if time <= prev_time => Err(MarketError::TimeNotIncreasing {
            file: file.into(),
            line,
            time: EpochMs(time),
            prev_time: EpochMs(prev_time),
            prev_at: format!("{prev_file}:{prev_line}"),
        }),
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
        check_time(file, line, r.time, self.prev.map(|(t, l)| (t, self.prev_file.as_str(), l)))?;
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
        .map(|(i, l)| (i + 1, l.trim_start_matches('\u{feff}').trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty())
}

fn fields<'a>(file: &str, line: usize, row: &'a str, expected: usize) -> Result<Vec<&'a str>, MarketError> {
    let f: Vec<&str> = row.split(',').map(str::trim).collect();
    if f.len() == expected {
        Ok(f)
    } else {
        Err(MarketError::FieldCount { file: file.into(), line, expected, found: f.len(), row: row.into() })
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
    fs::read_to_string(path).map_err(|err| MarketError::Read { path: path.display().to_string(), err })
}

/// A folder of LEAN zips, or a .csv file.
pub fn load(path: &Path) -> Result<Bars, MarketError> {
    let meta = fs::metadata(path).map_err(|err| MarketError::Read { path: path.display().to_string(), err })?;
    if meta.is_dir() {
        load_lean(path)
    } else if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
        load_csv(path)
    } else {
        Err(MarketError::UnknownFormat { path: path.display().to_string() })
    }
}

/// Loads a folder of QuantConnect LEAN minute zips (e.g. the AlgoSeek ES data in
/// `shared/data/lean-es-minute-2013-10`, Apache-2.0, via QuantConnect/Lean).
///
/// Each day `YYYYMMDD` has `YYYYMMDD_trade.zip` and `YYYYMMDD_quote.zip`, each holding
/// one headerless CSV per contract month (`YYYYMMDD_es_minute_trade_201312.csv`), time in
/// ms since the day's midnight:
/// - trade: `ms,open,high,low,close,volume`
/// - quote: `ms,bid_open,bid_high,bid_low,bid_close,last_bid_size,ask_open,ask_high,ask_low,ask_close,last_ask_size`;
///   a side whose close is empty (`60000,,,,,0,1670,...`) keeps its last known
///   (bid_close, last_bid_size) or (ask_close, last_ask_size). Only those four fields are read.
///
/// Rules:
/// - The front month of a day is the contract with the most trade rows (a tie goes to
///   the earlier contract month); its quote CSV must exist in the quote zip.
/// - Bars are the trade minutes. The quote of a bar is the last quote snapshot at or
///   before its minute, where a snapshot is both sides after carrying forward.
/// - A crossed snapshot (bid > ask) is not a tradeable book: the two sides of a LEAN quote
///   bar close at different instants inside the minute, and a few real rows cross by a
///   tick. Such a snapshot is skipped (its sides are still carried forward), so the bar
///   keeps the last uncrossed quote.
/// - Trade bars before the first uncrossed snapshot with both sides are skipped: they have
///   no quote.
/// - time_ms = days_from_civil(YYYY, MM, DD) * 86_400_000 + ms (naive exchange-local
///   time); days are concatenated in date order and time must increase throughout.
pub fn load_lean(dir: &Path) -> Result<Bars, MarketError> {
    let entries = fs::read_dir(dir).map_err(|err| MarketError::Read { path: dir.display().to_string(), err })?;
    let mut days = Vec::new();
    for entry in entries {
        let path = entry.map_err(|err| MarketError::Read { path: dir.display().to_string(), err })?.path();
        let Some(stem) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix("_trade.zip")) else {
            continue;
        };
        let day = parse_date(stem).ok_or_else(|| MarketError::BadFileName { path: path.display().to_string() })?;
        days.push((day, path));
    }
    days.sort();
    let mut b = Builder::default();
    for (day, trade_zip) in &days {
        lean_day(&mut b, *day, trade_zip)?;
    }
    if b.bars.is_empty() {
        let what = if days.is_empty() { "no YYYYMMDD_trade.zip files" } else { "no trade bar has a quote" };
        let fix = "point at a folder of LEAN YYYYMMDD_trade.zip and YYYYMMDD_quote.zip pairs, or at a .csv file";
        return Err(MarketError::Empty { path: dir.display().to_string(), what, fix });
    }
    Ok(b.bars)
}

/// The CSV entries of a zip as (entry name, text), in archive order.
fn read_zip(path: &Path) -> Result<Vec<(String, String)>, MarketError> {
    let zip_err = |err| MarketError::Zip { path: path.display().to_string(), err };
    let file = fs::File::open(path).map_err(|err| MarketError::Read { path: path.display().to_string(), err })?;
    let mut zip = zip::ZipArchive::new(file).map_err(zip_err)?;
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(zip_err)?;
        if !entry.name().ends_with(".csv") {
            continue;
        }
        let mut text = String::new();
        entry
            .read_to_string(&mut text)
            .map_err(|err| MarketError::Read { path: format!("{}/{}", path.display(), entry.name()), err })?;
        out.push((entry.name().to_string(), text));
    }
    Ok(out)
}

/// One quote side at a bar's close: (price, size).
type Side = Option<(f64, f64)>;

/// The side whose (close, size) fields start at `col`, named `names`; `None` if its close is empty.
fn lean_side(file: &str, line: usize, f: &[&str], col: usize, names: [&'static str; 2]) -> Result<Side, MarketError> {
    if f[col].is_empty() {
        return Ok(None);
    }
    let price = check_price(file, line, names[0], number(file, line, names[0], f[col])?)?;
    let size = check_quantity(file, line, names[1], number(file, line, names[1], f[col + 1])?)?;
    Ok(Some((price, size)))
}

/// Epoch ms of a LEAN row: the day's midnight plus the integer ms field.
fn lean_time(file: &str, line: usize, day: i64, field: &str) -> Result<i64, MarketError> {
    let ms: i64 = field.parse().map_err(|_| MarketError::BadNumber {
        file: file.into(),
        line,
        column: "ms",
        field: field.into(),
        expected: "an integer number of ms since midnight",
    })?;
    Ok(day * MS_PER_DAY + ms)
}

fn lean_day(b: &mut Builder, day: i64, trade_zip: &Path) -> Result<(), MarketError> {
    let trades = read_zip(trade_zip)?;
    let Some((name, text)) = trades
        .iter()
        .filter(|(n, _)| n.contains("_trade_"))
        .max_by_key(|(n, t)| (lines(t).count(), std::cmp::Reverse(n.as_str())))
    else {
        let fix = "replace it with a LEAN trade zip holding one CSV per contract month";
        return Err(MarketError::Empty { path: trade_zip.display().to_string(), what: "no trade CSV", fix });
    };
    let tfile = format!("{}/{name}", trade_zip.display());
    let quote_zip = trade_zip.with_file_name(format!("{}_quote.zip", civil_date(day)));
    let quote_name = name.replace("_trade_", "_quote_");
    let qfile = format!("{}/{quote_name}", quote_zip.display());
    let missing = || MarketError::MissingQuote { trade: tfile.clone(), expected: qfile.clone() };
    if !quote_zip.exists() {
        return Err(missing());
    }
    let quotes = read_zip(&quote_zip)?;
    let (_, qtext) = quotes.iter().find(|(n, _)| *n == quote_name).ok_or_else(missing)?;

    // Quote snapshots (time, bid, ask) after carrying each side forward, uncrossed only.
    let (mut bid, mut ask): (Side, Side) = (None, None);
    let mut snapshots = Vec::new();
    let mut prev = None;
    for (line, row) in lines(qtext) {
        let f = fields(&qfile, line, row, 11)?;
        let time = lean_time(&qfile, line, day, f[0])?;
        check_time(&qfile, line, time, prev.map(|(t, l)| (t, qfile.as_str(), l)))?;
        prev = Some((time, line));
        bid = lean_side(&qfile, line, &f, 4, ["bid_close", "last_bid_size"])?.or(bid);
        ask = lean_side(&qfile, line, &f, 9, ["ask_close", "last_ask_size"])?.or(ask);
        if let (Some(b), Some(a)) = (bid, ask) {
            if b.0 <= a.0 {
                snapshots.push((time, b, a));
            }
        }
    }

    let mut next = 0;
    for (line, row) in lines(text) {
        let f = fields(&tfile, line, row, 6)?;
        let time = lean_time(&tfile, line, day, f[0])?;
        let num = |i: usize, column| number(&tfile, line, column, f[i]);
        let (open, high, low, close, volume) =
            (num(1, "open")?, num(2, "high")?, num(3, "low")?, num(4, "close")?, num(5, "volume")?);
        while next < snapshots.len() && snapshots[next].0 <= time {
            next += 1;
        }
        let Some(&(_, (bid, bid_size), (ask, ask_size))) = next.checked_sub(1).map(|i| &snapshots[i]) else {
            continue;
        };
        b.push(&tfile, line, Row { time, open, high, low, close, volume, bid, ask, bid_size, ask_size })?;
    }
    Ok(())
}

/// Loads a plain CSV file of bars.
///
/// A header row is required; columns are found by name, case-insensitively, in any order:
/// `timestamp,open,high,low,close,volume`, and optionally all four of
/// `bid,ask,bid_size,ask_size`. Without them the quote is close -/+ [`CSV_TICK`] / 2 with
/// sizes 1. A timestamp is an integer, epoch seconds below [`EPOCH_SECONDS_BELOW`] and epoch
/// milliseconds otherwise, or `YYYY-MM-DD HH:MM[:SS]` or `YYYY-MM-DDTHH:MM:SS[Z]` (read as
/// UTC-naive). Blank lines are skipped.
pub fn load_csv(path: &Path) -> Result<Bars, MarketError> {
    let file = path.display().to_string();
    let text = read(path)?;
    let mut rows = lines(&text);
    let fix = "give a header line and at least one row of bars";
    let Some((header_line, header)) = rows.next() else {
        return Err(MarketError::Empty { path: file, what: "the file is empty", fix });
    };
    let names: Vec<String> = header.split(',').map(|s| s.trim().trim_matches('"').to_ascii_lowercase()).collect();
    let col = |column: &'static str| names.iter().position(|n| n == column);
    let missing = |column, fix| MarketError::MissingColumn {
        file: file.clone(),
        line: header_line,
        column,
        header: header.into(),
        fix,
    };
    let mut required = [0; 6];
    for (slot, column) in required.iter_mut().zip(["timestamp", "open", "high", "low", "close", "volume"]) {
        let fix = "the first line must be a header naming timestamp, open, high, low, close, volume";
        *slot = col(column).ok_or_else(|| missing(column, fix))?;
    }
    let [t, o, h, l, c, v] = required;
    let quote_names = ["bid", "ask", "bid_size", "ask_size"];
    let quote = quote_names.map(col);
    let quote = match quote.iter().position(Option::is_none) {
        None => Some(quote.map(Option::unwrap)),
        Some(_) if quote.iter().all(Option::is_none) => None,
        Some(i) => {
            return Err(missing(quote_names[i], "give all four quote columns bid, ask, bid_size, ask_size, or none"))
        }
    };

    let mut b = Builder::default();
    for (line, row) in rows {
        let f = fields(&file, line, row, names.len())?;
        let time = parse_time(f[t]).ok_or_else(|| MarketError::BadNumber {
            file: file.clone(),
            line,
            column: "timestamp",
            field: f[t].into(),
            expected: "epoch seconds, epoch ms, YYYY-MM-DD HH:MM[:SS] or YYYY-MM-DDTHH:MM:SS[Z]",
        })?;
        let num = |i: usize, column| number(&file, line, column, f[i]);
        let close = num(c, "close")?;
        let [bid, ask, bid_size, ask_size] = match quote {
            Some([qb, qa, qbs, qas]) => {
                [num(qb, "bid")?, num(qa, "ask")?, num(qbs, "bid_size")?, num(qas, "ask_size")?]
            }
            None => [close - CSV_TICK / 2.0, close + CSV_TICK / 2.0, 1.0, 1.0],
        };
        let (open, high, low, volume) = (num(o, "open")?, num(h, "high")?, num(l, "low")?, num(v, "volume")?);
        b.push(&file, line, Row { time, open, high, low, close, volume, bid, ask, bid_size, ask_size })?;
    }
    if b.bars.is_empty() {
        return Err(MarketError::Empty { path: file, what: "no rows after the header", fix });
    }
    Ok(b.bars)
}

/// Writes bars as CSV with all ten columns, time in epoch ms and prices in Rust's shortest
/// round-trip form, so that [`load_csv`] reads back equal bars (for times >= 1e11 ms).
pub fn write_csv(bars: &Bars, path: &Path) -> Result<(), MarketError> {
    let mut out = String::from("timestamp,open,high,low,close,volume,bid,ask,bid_size,ask_size\n");
    for i in 0..bars.len() {
        let r = bars.row(i);
        out += &format!(
            "{},{},{},{},{},{},{},{},{},{}\n",
            r.time, r.open, r.high, r.low, r.close, r.volume, r.bid, r.ask, r.bid_size, r.ask_size
        );
    }
    fs::File::create(path)
        .and_then(|mut f| f.write_all(out.as_bytes()))
        .map_err(|err| MarketError::Write { path: path.display().to_string(), err })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible
/// Low-Level Date Algorithms").
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// Inverse of [`days_from_civil`]: (year, month, day).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn civil_date(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}{m:02}{d:02}")
}

/// Digits only, within [lo, hi].
fn digits(s: &str, len: usize, lo: i64, hi: i64) -> Option<i64> {
    (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
        .filter(|v| (lo..=hi).contains(v))
}

/// Days since the epoch of a valid date given as (YYYY, MM, DD) strings.
fn date_days(y: &str, m: &str, d: &str) -> Option<i64> {
    let (y, m, d) = (digits(y, 4, 0, 9999)?, digits(m, 2, 1, 12)?, digits(d, 2, 1, 31)?);
    let days = days_from_civil(y, m, d);
    (civil_from_days(days) == (y, m, d)).then_some(days)
}

/// `YYYYMMDD` -> days since the epoch.
fn parse_date(s: &str) -> Option<i64> {
    (s.len() == 8 && s.is_ascii()).then(|| date_days(&s[..4], &s[4..6], &s[6..])).flatten()
}

/// A CSV timestamp in epoch ms; see [`load_csv`] for the accepted forms.
fn parse_time(s: &str) -> Option<i64> {
    if let Ok(v) = s.parse::<i64>() {
        return Some(if v.abs() < EPOCH_SECONDS_BELOW { v * 1000 } else { v });
    }
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, clock) = s.split_once([' ', 'T'])?;
    let [y, mo, d] = date.split('-').collect::<Vec<_>>()[..] else { return None };
    let hms: Vec<&str> = clock.split(':').collect();
    let (h, mi, sec) = match hms[..] {
        [h, mi] => (h, mi, "00"),
        [h, mi, sec] => (h, mi, sec),
        _ => return None,
    };
    let seconds = digits(h, 2, 0, 23)? * 3600 + digits(mi, 2, 0, 59)? * 60 + digits(sec, 2, 0, 59)?;
    Some(date_days(y, mo, d)? * MS_PER_DAY + seconds * 1000)
}

/// The synthetic market's parameters; see [`synthetic`] for the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SyntheticConfig {
    /// Number of bars to emit.
    pub bars: usize,
    /// ChaCha8 seed: equal configs give equal bars.
    pub seed: u64,
    pub start_price: f64,
    /// Price grid: every price is an integer multiple of the tick.
    pub tick: f64,
    /// Time of the first simulated minute, epoch ms.
    pub start_time_ms: i64,
    /// Unconditional standard deviation of the 1-minute log return.
    pub sigma: f64,
    /// GARCH(1,1) weight of the last squared return.
    pub garch_alpha: f64,
    /// GARCH(1,1) weight of the last variance; garch_alpha + garch_beta < 1.
    pub garch_beta: f64,
    /// Minutes per session; a 60-minute break follows each session.
    pub session_minutes: usize,
    /// Probability that a minute has no trades and so no bar.
    pub gap_prob: f64,
    /// Loading of the quote-size imbalance on the next minute's standardised return.
    pub imbalance_signal: f64,
}

impl Default for SyntheticConfig {
    /// ES-like: 1680 index points, 0.25 tick, 2.4e-4 minute volatility (the ES front
    /// month, October 2013), 23-hour sessions, starting 2013-10-07 00:00.
    fn default() -> Self {
        SyntheticConfig {
            bars: 20_000,
            seed: 0x07a1_11b0,
            start_price: 1680.0,
            tick: 0.25,
            start_time_ms: 1_381_104_000_000,
            sigma: 2.4e-4,
            garch_alpha: 0.08,
            garch_beta: 0.9,
            session_minutes: 1380,
            gap_prob: 0.02,
            imbalance_signal: 0.06,
        }
    }
}

impl SyntheticConfig {
    pub fn validate(&self) -> Result<(), MarketError> {
        let persistence = self.garch_alpha + self.garch_beta;
        let checks = [
            (self.bars >= 1, "bars", self.bars as f64, "generate at least 1 bar"),
            (self.tick > 0.0 && self.tick.is_finite(), "tick", self.tick, "use a positive tick such as 0.25"),
            (self.start_price.is_finite(), "start_price", self.start_price, "use a finite price such as 1680"),
            (self.start_price >= 100.0 * self.tick, "start_price", self.start_price, "use at least 100 ticks"),
            (self.sigma > 0.0 && self.sigma <= 0.01, "sigma", self.sigma, "use a value in (0, 0.01], e.g. 2.4e-4"),
            ((0.0..1.0).contains(&self.garch_alpha), "garch_alpha", self.garch_alpha, "use [0, 1), e.g. 0.08"),
            ((0.0..1.0).contains(&self.garch_beta), "garch_beta", self.garch_beta, "use [0, 1), e.g. 0.9"),
            (persistence < 1.0, "garch_alpha + garch_beta", persistence, "keep it below 1 (stationary variance)"),
            (self.session_minutes >= 2, "session_minutes", self.session_minutes as f64, "use at least 2, e.g. 1380"),
            ((0.0..=0.5).contains(&self.gap_prob), "gap_prob", self.gap_prob, "use [0, 0.5], e.g. 0.02"),
            (self.imbalance_signal.is_finite(), "imbalance_signal", self.imbalance_signal, "use a finite value"),
            (self.imbalance_signal >= 0.0, "imbalance_signal", self.imbalance_signal, "use >= 0, e.g. 0.06"),
        ];
        match checks.into_iter().find(|c| !c.0) {
            Some((_, name, value, fix)) => Err(MarketError::BadConfig { name, value: value.to_string(), fix }),
            None => Ok(()),
        }
    }
}

/// Sub-steps of the intrabar path.
const SUBSTEPS: usize = 6;

fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u1 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

fn shocks(rng: &mut ChaCha8Rng) -> [f64; SUBSTEPS] {
    std::array::from_fn(|_| normal(rng))
}

/// A seeded synthetic minute-bar market with the microstructure of a liquid future.
///
/// Minutes k = 0, 1, ... run in sessions of L = `session_minutes` minutes, each followed by a
/// 60-minute break; m = k mod L is the minute of the session. With sigma, alpha, beta from the
/// config, omega = sigma^2 (1 - alpha - beta), standard normals z (Box-Muller on ChaCha8
/// uniforms) and E ~ Exp(1):
/// - volatility, GARCH(1,1): s_k^2 = omega + alpha r_{k-1}^2 + beta s_{k-1}^2, s_0 = sigma;
/// - latent log price x: SUBSTEPS = 6 steps x += s_k z_{k,j} / sqrt(6), so the minute's
///   return is r_k = s_k Z_k with Z_k = sum_j z_{k,j} / sqrt(6) ~ N(0, 1); at each session
///   boundary x also jumps by 10 sigma z;
/// - trades on the tick grid, q = tick * max(1, round(exp(x) / tick)): open = q at the
///   minute's start, close = q at its end, high/low = max/min of q over the start and the
///   6 steps (so low <= open, close <= high);
/// - spread in ticks n_k = 1 + floor(0.3 (s_k / sigma) E): at least one tick, wider when
///   volatile; the last trade is at the ask if the last step rose (bid = close - n tick, floored
///   at one tick), else at the bid (ask = close + n tick);
/// - volume = max(1, round(200 u(m) (s_k / sigma) exp(z - 0.5))), U-shaped seasonality
///   u(m) = 0.5 + 1.5 (2 m / (L - 1) - 1)^2 (2 at the session's open and close, 0.5 at midday);
/// - depth D = 150 exp(0.6 z - 0.18), imbalance I = tanh(`imbalance_signal` Z_{k+1} + 0.6 z),
///   bid_size = max(1, round(D (1 + I))), ask_size = max(1, round(D (1 - I))): the book leans
///   toward the next minute's move, a little (correlation about
///   `imbalance_signal` / 0.6 for small values);
/// - a minute emits no bar with probability `gap_prob` (its price still moves), and no
///   bar is emitted during breaks, so bars have gaps of missing minutes.
pub fn synthetic(cfg: &SyntheticConfig) -> Result<Bars, MarketError> {
    cfg.validate()?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let (sigma, tick, session) = (cfg.sigma, cfg.tick, cfg.session_minutes);
    let omega = sigma * sigma * (1.0 - cfg.garch_alpha - cfg.garch_beta);
    let on_grid = |x: f64| tick * (x.exp() / tick).round().max(1.0);
    let mut x = cfg.start_price.ln();
    let (mut var, mut r_prev) = (sigma * sigma, 0.0);
    let mut next_shocks = shocks(&mut rng);
    let mut bars = Bars::default();
    let mut k = 0;
    while bars.len() < cfg.bars {
        let m = k % session;
        let time = cfg.start_time_ms + MS_PER_MINUTE * (k + 60 * (k / session)) as i64;
        if m == 0 && k > 0 {
            x += 10.0 * sigma * normal(&mut rng);
        }
        var = omega + cfg.garch_alpha * r_prev * r_prev + cfg.garch_beta * var;
        let s = var.sqrt();
        let z = std::mem::replace(&mut next_shocks, shocks(&mut rng));
        let x0 = x;
        let open = on_grid(x);
        let (mut high, mut low) = (open, open);
        for zj in z {
            x += s * zj / (SUBSTEPS as f64).sqrt();
            let q = on_grid(x);
            high = high.max(q);
            low = low.min(q);
        }
        r_prev = x - x0;
        let close = on_grid(x);
        let spread = tick * (1.0 + (0.3 * s / sigma * -(1.0 - rng.gen::<f64>()).ln()).floor());
        let (bid, ask) =
            if z[SUBSTEPS - 1] > 0.0 { ((close - spread).max(tick), close) } else { (close, close + spread) };
        let u = 2.0 * m as f64 / (session - 1) as f64 - 1.0;
        let volume = (200.0 * (0.5 + 1.5 * u * u) * s / sigma * (normal(&mut rng) - 0.5).exp()).round().max(1.0);
        let depth = 150.0 * (0.6 * normal(&mut rng) - 0.18).exp();
        let next_z = next_shocks.iter().sum::<f64>() / (SUBSTEPS as f64).sqrt();
        let imbalance = (cfg.imbalance_signal * next_z + 0.6 * normal(&mut rng)).tanh();
        let size = |sign: f64| (depth * (1.0 + sign * imbalance)).round().max(1.0);
        if rng.gen::<f64>() >= cfg.gap_prob {
            bars.push(Row {
                time,
                open,
                high,
                low,
                close,
                volume,
                bid,
                ask,
                bid_size: size(1.0),
                ask_size: size(-1.0),
            });
        }
        k += 1;
    }
    bars.validate("synthetic market")?;
    Ok(bars)
}
