//! Plain headed CSV files of bars.

use std::fs;
use std::io::Write;
use std::path::Path;

use super::time::parse_time;
use super::{fields, lines, number, read, Bars, Builder, MarketError, Row, CSV_TICK};

/// Loads a plain CSV file of bars.
///
/// A header row is required; columns are found by name, case-insensitively, in any order:
/// `timestamp,open,high,low,close,volume`, and optionally all four of
/// `bid,ask,bid_size,ask_size`. Without them the quote is close -/+ [`CSV_TICK`](super::CSV_TICK) / 2 with
/// sizes 1. A timestamp is an integer, epoch seconds below [`EPOCH_SECONDS_BELOW`](super::EPOCH_SECONDS_BELOW) and epoch
/// milliseconds otherwise, or `YYYY-MM-DD HH:MM[:SS]` or `YYYY-MM-DDTHH:MM:SS[Z]` (read as
/// UTC-naive), from 1970 to 9999. Blank lines are skipped. Other columns are ignored; a column the loader reads
/// may appear only once. Fields are split at every comma, without quoting. docs/DATA.md
/// gives the schema with units.
pub fn load_csv(path: &Path) -> Result<Bars, MarketError> {
    let file = path.display().to_string();
    let text = read(path)?;
    let mut rows = lines(&text);
    let fix = "give a header line and at least one row of bars";
    let Some((header_line, header)) = rows.next() else {
        return Err(MarketError::Empty {
            path: file,
            what: "the file is empty",
            fix,
        });
    };
    let names: Vec<String> = header
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_ascii_lowercase())
        .collect();
    let col = |column: &'static str| names.iter().position(|n| n == column);
    let missing = |column, fix| MarketError::MissingColumn {
        file: file.clone(),
        line: header_line,
        column,
        header: header.into(),
        fix,
    };
    if let Some(column) = duplicate(&names) {
        return Err(MarketError::DuplicateColumn {
            file,
            line: header_line,
            column: column.into(),
            header: header.into(),
        });
    }
    let mut required = [0; 6];
    for (slot, column) in
        required
            .iter_mut()
            .zip(["timestamp", "open", "high", "low", "close", "volume"])
    {
        let fix =
            "the first line must be a header naming timestamp, open, high, low, close, volume";
        *slot = col(column).ok_or_else(|| missing(column, fix))?;
    }
    let [t, o, h, l, c, v] = required;
    let quote_names = ["bid", "ask", "bid_size", "ask_size"];
    let quote = quote_names.map(col);
    let quote = match quote.iter().position(Option::is_none) {
        None => Some(quote.map(Option::unwrap)),
        Some(_) if quote.iter().all(Option::is_none) => None,
        Some(i) => {
            return Err(missing(
                quote_names[i],
                "give all four quote columns bid, ask, bid_size, ask_size, or none",
            ))
        }
    };

    let mut b = Builder::default();
    for (line, row) in rows {
        let f = fields(&file, line, row, names.len())?;
        let bad_time = |expected| MarketError::BadNumber {
            file: file.clone(),
            line,
            column: "timestamp",
            field: f[t].into(),
            expected,
        };
        let time = parse_time(f[t]).ok_or_else(|| {
            bad_time("epoch seconds, epoch ms, YYYY-MM-DD HH:MM[:SS] or YYYY-MM-DDTHH:MM:SS[Z]")
        })?;
        if !(0..LAST_TIME_MS).contains(&time) {
            return Err(bad_time("a time from 1970-01-01 to 9999-12-31 (an integer below 1e11 is epoch seconds, else epoch ms)"));
        }
        let num = |i: usize, column| number(&file, line, column, f[i]);
        let close = num(c, "close")?;
        let [bid, ask, bid_size, ask_size] = match quote {
            Some([qb, qa, qbs, qas]) => [
                num(qb, "bid")?,
                num(qa, "ask")?,
                num(qbs, "bid_size")?,
                num(qas, "ask_size")?,
            ],
            None => [close - CSV_TICK / 2.0, close + CSV_TICK / 2.0, 1.0, 1.0],
        };
        let (open, high, low, volume) = (
            num(o, "open")?,
            num(h, "high")?,
            num(l, "low")?,
            num(v, "volume")?,
        );
        b.push(
            &file,
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
    if b.bars.is_empty() {
        return Err(MarketError::Empty {
            path: file,
            what: "no rows after the header",
            fix,
        });
    }
    Ok(b.bars)
}

/// 10000-01-01 00:00 in epoch ms: CSV times are before it, and not before 1970.
const LAST_TIME_MS: i64 = 253_402_300_800_000;

/// The first column the loader reads that the header names twice.
fn duplicate(names: &[String]) -> Option<&str> {
    COLUMNS
        .into_iter()
        .find(|c| names.iter().filter(|n| n == c).count() > 1)
}

/// Every column the loader reads, in the order [`write_csv`] writes them.
const COLUMNS: [&str; 10] = [
    "timestamp",
    "open",
    "high",
    "low",
    "close",
    "volume",
    "bid",
    "ask",
    "bid_size",
    "ask_size",
];

/// Writes bars as CSV with all ten columns, time in epoch ms and prices in Rust's shortest
/// round-trip form, so that [`load_csv`] reads back equal bars (for times >= 1e11 ms).
pub fn write_csv(bars: &Bars, path: &Path) -> Result<(), MarketError> {
    let mut out = COLUMNS.join(",") + "\n";
    for i in 0..bars.len() {
        let r = bars.row(i);
        out += &format!(
            "{},{},{},{},{},{},{},{},{},{}\n",
            r.time, r.open, r.high, r.low, r.close, r.volume, r.bid, r.ask, r.bid_size, r.ask_size
        );
    }
    fs::File::create(path)
        .and_then(|mut f| f.write_all(out.as_bytes()))
        .map_err(|err| MarketError::Write {
            path: path.display().to_string(),
            err,
        })
}
