//! QuantConnect LEAN minute zips.

use std::fs;
use std::io::Read;
use std::path::Path;

use super::time::{civil_date, parse_date};
use super::{
    check_price, check_quantity, check_time, fields, lines, number, Bars, Builder, MarketError,
    Row, MS_PER_DAY,
};

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
    let entries = fs::read_dir(dir).map_err(|err| MarketError::Read {
        path: dir.display().to_string(),
        err,
    })?;
    let mut days = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|err| MarketError::Read {
                path: dir.display().to_string(),
                err,
            })?
            .path();
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
    let mut b = Builder::default();
    for (day, trade_zip) in &days {
        lean_day(&mut b, *day, trade_zip)?;
    }
    if b.bars.is_empty() {
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
    }
    Ok(b.bars)
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
        let mut text = String::new();
        entry
            .read_to_string(&mut text)
            .map_err(|err| MarketError::Read {
                path: format!("{}/{}", path.display(), entry.name()),
                err,
            })?;
        out.push((entry.name().to_string(), text));
    }
    Ok(out)
}

/// One quote side at a bar's close: (price, size).
type Side = Option<(f64, f64)>;

/// The side whose (close, size) fields start at `col`, named `names`; `None` if its close is empty.
fn lean_side(
    file: &str,
    line: usize,
    f: &[&str],
    col: usize,
    names: [&'static str; 2],
) -> Result<Side, MarketError> {
    if f[col].is_empty() {
        return Ok(None);
    }
    let price = check_price(file, line, names[0], number(file, line, names[0], f[col])?)?;
    let size = check_quantity(
        file,
        line,
        names[1],
        number(file, line, names[1], f[col + 1])?,
    )?;
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
        return Err(MarketError::Empty {
            path: trade_zip.display().to_string(),
            what: "no trade CSV",
            fix,
        });
    };
    let tfile = format!("{}/{name}", trade_zip.display());
    let quote_zip = trade_zip.with_file_name(format!("{}_quote.zip", civil_date(day)));
    let quote_name = name.replace("_trade_", "_quote_");
    let qfile = format!("{}/{quote_name}", quote_zip.display());
    let missing = || MarketError::MissingQuote {
        trade: tfile.clone(),
        expected: qfile.clone(),
    };
    if !quote_zip.exists() {
        return Err(missing());
    }
    let quotes = read_zip(&quote_zip)?;
    let (_, qtext) = quotes
        .iter()
        .find(|(n, _)| *n == quote_name)
        .ok_or_else(missing)?;

    // Quote snapshots (time, bid, ask) after carrying each side forward, uncrossed only.
    let (mut bid, mut ask): (Side, Side) = (None, None);
    let mut snapshots = Vec::new();
    let mut prev = None;
    for (line, row) in lines(qtext) {
        let f = fields(&qfile, line, row, 11)?;
        let time = lean_time(&qfile, line, day, f[0])?;
        check_time(
            &qfile,
            line,
            time,
            prev.map(|(t, l)| (t, qfile.as_str(), l)),
        )?;
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
        let (open, high, low, close, volume) = (
            num(1, "open")?,
            num(2, "high")?,
            num(3, "low")?,
            num(4, "close")?,
            num(5, "volume")?,
        );
        while next < snapshots.len() && snapshots[next].0 <= time {
            next += 1;
        }
        let Some(&(_, (bid, bid_size), (ask, ask_size))) =
            next.checked_sub(1).map(|i| &snapshots[i])
        else {
            continue;
        };
        b.push(
            &tfile,
            line,
            Row {
                time,
                open,
                high,
                low,
                close,
                volume,
                bid,
                ask,
                bid_size,
                ask_size,
            },
        )?;
    }
    Ok(())
}
