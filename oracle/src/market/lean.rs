//! QuantConnect LEAN minute zips: equities and futures, futures back-adjusted at rolls.
//!
//! # The two layouts
//!
//! A folder holds one `YYYYMMDD_trade.zip` and one `YYYYMMDD_quote.zip` per trading day
//! (LEAN keeps them under `data/equity/usa/minute/<symbol>/` and
//! `data/future/<market>/minute/<symbol>/`; the loader reads only the folder it is given,
//! not that path). Each zip holds headerless CSVs whose names tell the asset class:
//!
//! | asset  | entry in the trade zip                      | entry in the quote zip                      | prices                              |
//! |--------|---------------------------------------------|---------------------------------------------|-------------------------------------|
//! | equity | `YYYYMMDD_spy_minute_trade.csv` (one)       | `YYYYMMDD_spy_minute_quote.csv`             | integers in 1/10000 of a dollar     |
//! | future | `YYYYMMDD_es_minute_trade_201312.csv` (one per contract) | `YYYYMMDD_es_minute_quote_201312.csv` | plain price units (ES: index points) |
//!
//! A name without anything after `_trade` is an equity; the text after `_trade_` is a
//! futures contract (its expiry month, `YYYYMM`, optionally followed by more of its name;
//! contracts are ordered as text). Equity prices are divided by [`EQUITY_PRICE_SCALE`]; futures
//! prices are read as they are. Volumes and sizes are never scaled. Every day of a folder
//! must hold the same symbol and asset class.
//!
//! Rows, both layouts, time `ms` in milliseconds since the midnight of the file's date (the
//! exchange's local day), a whole minute in `[0, 86_400_000)`:
//! - trade: `ms,open,high,low,close,volume`
//! - quote: `ms,bid_open,bid_high,bid_low,bid_close,last_bid_size,ask_open,ask_high,ask_low,ask_close,last_ask_size`;
//!   a side whose close is empty (`60000,,,,,0,1670,...`) keeps its last known
//!   (bid_close, last_bid_size) or (ask_close, last_ask_size). Only those four fields are read.
//!
//! # Rules
//! - The front contract of a futures day is the contract with the most trade rows among
//!   those not earlier than the previous day's front (a tie goes to the earlier contract),
//!   so the front never rolls back. An equity day has one CSV. The quote CSV of the same
//!   name with `_quote` for `_trade` must exist in the day's quote zip.
//! - Bars are the trade minutes. The quote of a bar is the last quote snapshot at or
//!   before its minute, where a snapshot is both sides after carrying forward.
//! - A crossed snapshot (bid > ask) is not a tradeable book: the two sides of a LEAN quote
//!   bar close at different instants inside the minute, and a few real rows cross by a
//!   tick. Such a snapshot is skipped (its sides are still carried forward), so the bar
//!   keeps the last uncrossed quote.
//! - Trade bars before the first uncrossed snapshot with both sides are skipped: they have
//!   no quote.
//! - time_ms = days_from_civil(YYYY, MM, DD) * 86_400_000 + ms (naive exchange-local
//!   time); days are concatenated in date order and time must increase throughout.
//!
//! # Rolls: additive back-adjustment
//! When the front contract of a day differs from the contract of the last bar loaded, the
//! series rolls. The gap is measured at the old contract's last bar (time T, on the last
//! day that gave bars): gap = (the new contract's last trade close at or before T, from that
//! day's trade zip) - (the old contract's close at T). The gap is added to every price
//! (open, high, low, close, bid, ask) of every bar before the roll, so that a position held
//! across the roll sees the new contract's own move and never the jump between contracts;
//! the latest contract keeps its real prices. Spreads, ranges and volumes are unchanged.

use std::cmp::Reverse;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::time::{civil_date, civil_from_days, parse_date};
use super::{
    check_price, check_quantity, check_time, fields, lines, number, text, Bars, Builder,
    MarketError, Row, MS_PER_DAY, MS_PER_MINUTE,
};

/// LEAN equity prices are integers in units of 1/10000 of a dollar ("deci-cents").
pub const EQUITY_PRICE_SCALE: f64 = 10_000.0;

/// The asset class of a LEAN folder, told by its CSV entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeanAsset {
    /// `YYYYMMDD_<symbol>_minute_trade.csv`: prices / [`EQUITY_PRICE_SCALE`].
    Equity,
    /// `YYYYMMDD_<symbol>_minute_trade_<contract>.csv`: prices as they are.
    Future,
}

impl LeanAsset {
    /// The divisor that turns a file price into a price.
    pub fn price_scale(self) -> f64 {
        match self {
            LeanAsset::Equity => EQUITY_PRICE_SCALE,
            LeanAsset::Future => 1.0,
        }
    }

    fn name(self) -> &'static str {
        match self {
            LeanAsset::Equity => "equity",
            LeanAsset::Future => "future",
        }
    }
}

/// One day of a LEAN folder as loaded.
#[derive(Clone, Debug, PartialEq)]
pub struct LeanDay {
    /// Days since 1970-01-01.
    pub day: i64,
    pub symbol: String,
    /// The front contract (futures only).
    pub contract: Option<String>,
    /// Index of the day's first bar in the loaded [`Bars`].
    pub first_bar: usize,
    pub bars: usize,
    /// What back-adjustment added to every price of the day (0 after the last roll).
    pub shift: f64,
}

impl LeanDay {
    /// `YYYY-MM-DD`.
    pub fn date(&self) -> String {
        iso_date(self.day)
    }
}

/// A change of front contract between two loaded days.
#[derive(Clone, Debug, PartialEq)]
pub struct LeanRoll {
    /// The first day on the new contract (days since 1970-01-01).
    pub day: i64,
    pub from: String,
    pub to: String,
    /// Time of the old contract's last bar, where the gap is measured (epoch ms).
    pub at_ms: i64,
    /// The old contract's close at `at_ms`.
    pub from_close: f64,
    /// The new contract's last trade close at or before `at_ms`.
    pub to_close: f64,
}

impl LeanRoll {
    /// What this roll adds to every earlier price.
    pub fn gap(&self) -> f64 {
        self.to_close - self.from_close
    }
}

/// What a LEAN folder held: its asset class, each day's contract and bar count, the rolls.
#[derive(Clone, Debug, PartialEq)]
pub struct LeanLog {
    pub asset: LeanAsset,
    pub days: Vec<LeanDay>,
    pub rolls: Vec<LeanRoll>,
}

impl LeanLog {
    /// Human-readable lines: the days (date, symbol, contract, bars, shift), then the rolls.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "LEAN {} minute data, {} days:",
            self.asset.name(),
            self.days.len()
        )];
        for d in &self.days {
            let contract = d.contract.as_deref().unwrap_or("-");
            out.push(format!(
                "  {}  {} {contract}  {} bars  shift {:+}",
                d.date(),
                d.symbol,
                d.bars,
                d.shift
            ));
        }
        if self.asset == LeanAsset::Future && self.rolls.is_empty() {
            out.push("rolls: none (prices as in the files)".into());
        }
        if !self.rolls.is_empty() {
            out.push(
                "rolls (additive back-adjustment: each gap is added to every earlier bar):".into(),
            );
        }
        for r in &self.rolls {
            out.push(format!(
                "  {}  {} -> {}  gap {:+} = {} {} - {} {} at {}",
                iso_date(r.day),
                r.from,
                r.to,
                r.gap(),
                r.to,
                r.to_close,
                r.from,
                r.from_close,
                super::EpochMs(r.at_ms)
            ));
        }
        out
    }
}

fn iso_date(day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Loads a folder of QuantConnect LEAN minute zips (e.g. the AlgoSeek ES data in
/// `shared/data/lean-es-minute-2013-10`, Apache-2.0, via QuantConnect/Lean); see the module
/// documentation for the layouts and rules.
pub fn load_lean(dir: &Path) -> Result<Bars, MarketError> {
    read_lean(dir).map(|(bars, _)| bars)
}

/// [`load_lean`], with the day list and the rolls.
pub fn read_lean(dir: &Path) -> Result<(Bars, LeanLog), MarketError> {
    let days = trade_zips(dir)?;
    let mut b = Builder::default();
    let mut log: Option<LeanLog> = None;
    let mut last: Option<LastDay> = None;
    for (day, trade_zip) in &days {
        let csvs = trade_csvs(trade_zip, *day)?;
        let (asset, symbol) = classify(&csvs)?;
        let log = log.get_or_insert_with(|| LeanLog {
            asset,
            days: Vec::new(),
            rolls: Vec::new(),
        });
        check_same_kind(log, &days[0].1, trade_zip, asset, &symbol)?;
        let floor = log.days.last().and_then(|d| d.contract.clone());
        let front = pick_front(trade_zip, csvs, floor.as_deref())?;
        let first_bar = b.bars.len();
        lean_day(&mut b, *day, trade_zip, &front.csv, asset.price_scale())?;
        let bars = b.bars.len() - first_bar;
        if bars > 0 {
            if let Some(prev) = &last {
                if prev.contract != front.csv.contract {
                    log.rolls
                        .push(measure_roll(prev, &front.csv, *day, asset.price_scale())?);
                }
            }
            last = Some(LastDay {
                zip: trade_zip.clone(),
                contract: front.csv.contract.clone(),
                others: front.others,
                at_ms: b.bars.time_ms[b.bars.len() - 1],
                close: b.bars.close[b.bars.len() - 1],
            });
        }
        log.days.push(LeanDay {
            day: *day,
            symbol,
            contract: front.csv.contract,
            first_bar,
            bars,
            shift: 0.0,
        });
    }
    let (Some(mut log), false) = (log, b.bars.is_empty()) else {
        let what = if days.is_empty() {
            "no YYYYMMDD_trade.zip files"
        } else {
            "no trade bar has a quote"
        };
        let fix = "point at a folder of LEAN YYYYMMDD_trade.zip and YYYYMMDD_quote.zip pairs, or at a .csv file";
        return Err(MarketError::Empty {
            path: dir.display().to_string(),
            what,
            fix,
        });
    };
    back_adjust(&mut b.bars, &mut log)?;
    Ok((b.bars, log))
}

/// The `YYYYMMDD_trade.zip` files of `dir` as (day, path), in date order.
fn trade_zips(dir: &Path) -> Result<Vec<(i64, PathBuf)>, MarketError> {
    let read_err = |err| MarketError::Read {
        path: dir.display().to_string(),
        err,
    };
    let mut days = Vec::new();
    for entry in fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        let Some(stem) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix("_trade.zip"))
        else {
            continue;
        };
        let day = parse_date(stem).ok_or_else(|| MarketError::BadFileName {
            path: path.display().to_string(),
        })?;
        days.push((day, path));
    }
    days.sort();
    Ok(days)
}

/// The CSV entries of a zip as (entry name, text), in archive order.
fn read_zip(path: &Path) -> Result<Vec<(String, String)>, MarketError> {
    let zip_err = |err| MarketError::Zip {
        path: path.display().to_string(),
        err,
    };
    let file = fs::File::open(path).map_err(|err| MarketError::Read {
        path: path.display().to_string(),
        err,
    })?;
    let mut zip = zip::ZipArchive::new(file).map_err(zip_err)?;
    let mut out = Vec::new();
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(zip_err)?;
        if !entry.name().ends_with(".csv") {
            continue;
        }
        let shown = format!("{}/{}", path.display(), entry.name());
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .map_err(|err| MarketError::Read {
                path: shown.clone(),
                err,
            })?;
        let fix = "LEAN CSVs are text: replace the zip with an intact copy";
        out.push((entry.name().to_string(), text(shown, bytes, fix)?));
    }
    Ok(out)
}

/// One trade CSV of a day: its entry name, the parts of that name, its text.
struct TradeCsv {
    name: String,
    symbol: String,
    contract: Option<String>,
    text: String,
}

impl TradeCsv {
    /// `equity spy` or `future es`.
    fn kind(&self) -> String {
        let asset = match self.contract {
            Some(_) => LeanAsset::Future,
            None => LeanAsset::Equity,
        };
        format!("{} {}", asset.name(), self.symbol)
    }
}

/// (symbol, contract) of `YYYYMMDD_<symbol>_minute_trade[_<contract>].csv` for the given date.
fn parse_trade_name(name: &str, date: &str) -> Option<(String, Option<String>)> {
    let rest = name
        .strip_suffix(".csv")?
        .strip_prefix(date)?
        .strip_prefix('_')?;
    let (symbol, tail) = rest.split_once("_minute_trade")?;
    let contract = match tail {
        "" => None,
        t => Some(t.strip_prefix('_').filter(|c| !c.is_empty())?.to_string()),
    };
    (!symbol.is_empty()).then(|| (symbol.to_string(), contract))
}

/// Every CSV of a trade zip, each named as a LEAN minute trade file of the zip's day.
fn trade_csvs(zip: &Path, day: i64) -> Result<Vec<TradeCsv>, MarketError> {
    let date = civil_date(day);
    let mut out = Vec::new();
    for (name, text) in read_zip(zip)? {
        let Some((symbol, contract)) = parse_trade_name(&name, &date) else {
            return Err(misnamed(zip, &name, &date));
        };
        if let Some(c) = &contract {
            let month = c
                .get(..6)
                .is_some_and(|m| m.bytes().all(|b| b.is_ascii_digit()));
            if !month {
                return Err(MarketError::BadContract {
                    zip: zip.display().to_string(),
                    entry: name,
                    contract: c.clone(),
                });
            }
        }
        out.push(TradeCsv {
            name,
            symbol,
            contract,
            text,
        });
    }
    if out.is_empty() {
        let fix = "replace it with a LEAN trade zip: one CSV for an equity, one per contract for a future";
        return Err(MarketError::Empty {
            path: zip.display().to_string(),
            what: "no trade CSV",
            fix,
        });
    }
    Ok(out)
}

/// Why an entry is not a LEAN minute trade CSV of the zip's day: another resolution, or a
/// name of another form.
fn misnamed(zip: &Path, name: &str, date: &str) -> MarketError {
    let resolution = ["second", "tick", "hour", "daily"]
        .into_iter()
        .find(|r| name.contains(&format!("_{r}_")));
    match resolution {
        Some(r) => MarketError::WrongResolution {
            zip: zip.display().to_string(),
            entry: name.to_string(),
            resolution: r,
        },
        None => MarketError::BadEntryName {
            zip: zip.display().to_string(),
            entry: name.to_string(),
            date: date.to_string(),
        },
    }
}

/// The asset class and symbol of a day's trade CSVs: all futures of one symbol, or a single
/// equity CSV.
fn classify(csvs: &[TradeCsv]) -> Result<(LeanAsset, String), MarketError> {
    let first = &csvs[0];
    for other in &csvs[1..] {
        if other.kind() != first.kind() || first.contract.is_none() {
            return Err(MarketError::MixedLean {
                first: first.name.clone(),
                first_kind: first.kind(),
                other: other.name.clone(),
                other_kind: other.kind(),
            });
        }
    }
    let asset = match first.contract {
        Some(_) => LeanAsset::Future,
        None => LeanAsset::Equity,
    };
    Ok((asset, first.symbol.clone()))
}

/// Every day of a folder holds the asset class and symbol of its first day.
fn check_same_kind(
    log: &LeanLog,
    first_zip: &Path,
    zip: &Path,
    asset: LeanAsset,
    symbol: &str,
) -> Result<(), MarketError> {
    let Some(first) = log.days.first() else {
        return Ok(());
    };
    if log.asset == asset && first.symbol == symbol {
        return Ok(());
    }
    Err(MarketError::MixedLean {
        first: first_zip.display().to_string(),
        first_kind: format!("{} {}", log.asset.name(), first.symbol),
        other: zip.display().to_string(),
        other_kind: format!("{} {symbol}", asset.name()),
    })
}

/// The day's front CSV, and the day's other CSVs (kept to measure a roll at the day's end).
struct Front {
    csv: TradeCsv,
    others: Vec<TradeCsv>,
}

/// The contract with the most trade rows among those not before `floor` (a tie goes to the
/// earlier contract); an equity's single CSV.
fn pick_front(
    zip: &Path,
    mut csvs: Vec<TradeCsv>,
    floor: Option<&str>,
) -> Result<Front, MarketError> {
    let at_or_after = |c: &TradeCsv| match (c.contract.as_deref(), floor) {
        (Some(c), Some(f)) => c >= f,
        _ => true,
    };
    let best = csvs
        .iter()
        .enumerate()
        .filter(|(_, c)| at_or_after(c))
        .max_by_key(|(_, c)| (lines(&c.text).count(), Reverse(c.contract.clone())))
        .map(|(i, _)| i)
        .ok_or_else(|| MarketError::NoFrontContract {
            zip: zip.display().to_string(),
            floor: floor.unwrap_or_default().to_string(),
        })?;
    let csv = csvs.swap_remove(best);
    Ok(Front { csv, others: csvs })
}

/// The last day that gave bars: where the next roll's gap is measured.
struct LastDay {
    zip: PathBuf,
    contract: Option<String>,
    others: Vec<TradeCsv>,
    at_ms: i64,
    close: f64,
}

/// The roll from `prev`'s contract to `to`'s: the new contract's last trade close at or
/// before the old contract's last bar, in the old contract's last day's trade zip.
fn measure_roll(
    prev: &LastDay,
    to: &TradeCsv,
    day: i64,
    scale: f64,
) -> Result<LeanRoll, MarketError> {
    let from = prev.contract.clone().unwrap_or_default();
    let to_contract = to.contract.clone().unwrap_or_default();
    let no_price = || MarketError::RollGap {
        zip: prev.zip.display().to_string(),
        from: from.clone(),
        to: to_contract.clone(),
        at: super::EpochMs(prev.at_ms),
    };
    let csv = prev
        .others
        .iter()
        .find(|c| c.contract == to.contract)
        .ok_or_else(no_price)?;
    let prev_day = prev.at_ms.div_euclid(MS_PER_DAY);
    let file = format!("{}/{}", prev.zip.display(), csv.name);
    let mut to_close = None;
    for (line, row) in lines(&csv.text) {
        let r = trade_row(&file, line, prev_day, row, scale)?;
        if r.time > prev.at_ms {
            break;
        }
        to_close = Some(r.close);
    }
    let to_close = to_close.ok_or_else(no_price)?;
    Ok(LeanRoll {
        day,
        from,
        to: to_contract,
        at_ms: prev.at_ms,
        from_close: prev.close,
        to_close,
    })
}

/// Adds to every day the gaps of the rolls after it, and records the shift per day.
fn back_adjust(bars: &mut Bars, log: &mut LeanLog) -> Result<(), MarketError> {
    for d in log.days.iter_mut() {
        d.shift = log
            .rolls
            .iter()
            .filter(|r| r.day > d.day)
            .fold(0.0, |sum, r| sum + r.gap());
        if d.shift == 0.0 {
            continue;
        }
        let range = d.first_bar..d.first_bar + d.bars;
        for column in [
            &mut bars.open,
            &mut bars.high,
            &mut bars.low,
            &mut bars.close,
            &mut bars.bid,
            &mut bars.ask,
        ] {
            column[range.clone()].iter_mut().for_each(|p| *p += d.shift);
        }
        // low <= open, close <= high and bid <= ask still hold, so low and bid bound the rest.
        let lowest = range
            .map(|i| bars.low[i].min(bars.bid[i]))
            .fold(f64::INFINITY, f64::min);
        if lowest <= 0.0 {
            return Err(MarketError::AdjustedPrice {
                date: d.date(),
                contract: d.contract.clone().unwrap_or_default(),
                shift: d.shift,
                value: lowest,
            });
        }
    }
    Ok(())
}

/// One quote side at a bar's close: (price, size).
type Side = Option<(f64, f64)>;

/// The side whose (close, size) fields start at `col`, named `names`, its price divided by
/// `scale`; `None` if its close is empty.
fn lean_side(
    file: &str,
    line: usize,
    f: &[&str],
    col: usize,
    names: [&'static str; 2],
    scale: f64,
) -> Result<Side, MarketError> {
    if f[col].is_empty() {
        return Ok(None);
    }
    let price = number(file, line, names[0], f[col])? / scale;
    let price = check_price(file, line, names[0], price)?;
    let size = check_quantity(
        file,
        line,
        names[1],
        number(file, line, names[1], f[col + 1])?,
    )?;
    Ok(Some((price, size)))
}

/// Epoch ms of a LEAN row: the day's midnight plus the ms field, a whole minute of the day.
fn lean_time(file: &str, line: usize, day: i64, field: &str) -> Result<i64, MarketError> {
    let bad = |expected| MarketError::BadNumber {
        file: file.into(),
        line,
        column: "ms",
        field: field.into(),
        expected,
    };
    let ms: i64 = field
        .parse()
        .map_err(|_| bad("an integer number of ms since midnight"))?;
    if ms % MS_PER_MINUTE != 0 || !(0..MS_PER_DAY).contains(&ms) {
        return Err(bad("a whole minute of the day (a multiple of 60000 in [0, 86400000)): minute files only; is this second or tick data?"));
    }
    Ok(day * MS_PER_DAY + ms)
}

/// A trade row `ms,open,high,low,close,volume`, prices divided by `scale`; the quote is
/// filled in later.
fn trade_row(file: &str, line: usize, day: i64, row: &str, scale: f64) -> Result<Row, MarketError> {
    let f = fields(file, line, row, 6)?;
    let num = |i: usize, column| number(file, line, column, f[i]);
    Ok(Row {
        time: lean_time(file, line, day, f[0])?,
        open: num(1, "open")? / scale,
        high: num(2, "high")? / scale,
        low: num(3, "low")? / scale,
        close: num(4, "close")? / scale,
        volume: num(5, "volume")?,
        bid: f64::NAN,
        ask: f64::NAN,
        bid_size: f64::NAN,
        ask_size: f64::NAN,
    })
}

/// The quote CSV of the front trade CSV: same name with `_quote` for `_trade`, in the day's
/// quote zip.
fn quote_text(day: i64, trade_zip: &Path, csv: &TradeCsv) -> Result<(String, String), MarketError> {
    let tfile = format!("{}/{}", trade_zip.display(), csv.name);
    let quote_zip = trade_zip.with_file_name(format!("{}_quote.zip", civil_date(day)));
    let quote_name = csv.name.replacen("_minute_trade", "_minute_quote", 1);
    let qfile = format!("{}/{quote_name}", quote_zip.display());
    let missing = || MarketError::MissingQuote {
        trade: tfile.clone(),
        expected: qfile.clone(),
    };
    if !quote_zip.exists() {
        return Err(missing());
    }
    let (_, text) = read_zip(&quote_zip)?
        .into_iter()
        .find(|(n, _)| *n == quote_name)
        .ok_or_else(missing)?;
    Ok((qfile, text))
}

/// A quote snapshot: (time, (bid, bid_size), (ask, ask_size)).
type Snapshot = (i64, (f64, f64), (f64, f64));

/// Quote snapshots (time, bid, ask) after carrying each side forward, uncrossed only.
fn snapshots(qfile: &str, qtext: &str, day: i64, scale: f64) -> Result<Vec<Snapshot>, MarketError> {
    let (mut bid, mut ask): (Side, Side) = (None, None);
    let mut out = Vec::new();
    let mut prev = None;
    for (line, row) in lines(qtext) {
        let f = fields(qfile, line, row, 11)?;
        let time = lean_time(qfile, line, day, f[0])?;
        check_time(qfile, line, time, prev.map(|(t, l)| (t, qfile, l)))?;
        prev = Some((time, line));
        bid = lean_side(qfile, line, &f, 4, ["bid_close", "last_bid_size"], scale)?.or(bid);
        ask = lean_side(qfile, line, &f, 9, ["ask_close", "last_ask_size"], scale)?.or(ask);
        if let (Some(b), Some(a)) = (bid, ask) {
            if b.0 <= a.0 {
                out.push((time, b, a));
            }
        }
    }
    Ok(out)
}

/// Appends the bars of one day's front CSV, each with its quote.
fn lean_day(
    b: &mut Builder,
    day: i64,
    trade_zip: &Path,
    csv: &TradeCsv,
    scale: f64,
) -> Result<(), MarketError> {
    let tfile = format!("{}/{}", trade_zip.display(), csv.name);
    let (qfile, qtext) = quote_text(day, trade_zip, csv)?;
    let snapshots = snapshots(&qfile, &qtext, day, scale)?;
    let mut next = 0;
    for (line, row) in lines(&csv.text) {
        let mut r = trade_row(&tfile, line, day, row, scale)?;
        while next < snapshots.len() && snapshots[next].0 <= r.time {
            next += 1;
        }
        let Some(&(_, (bid, bid_size), (ask, ask_size))) =
            next.checked_sub(1).map(|i| &snapshots[i])
        else {
            continue;
        };
        (r.bid, r.bid_size, r.ask, r.ask_size) = (bid, bid_size, ask, ask_size);
        b.push(&tfile, line, r)?;
    }
    Ok(())
}
