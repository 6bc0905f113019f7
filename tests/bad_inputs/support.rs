//! What `tests/bad_inputs.rs` and `tests/fuzz.rs` build their inputs from: scratch folders,
//! a small valid CSV, LEAN zips written in the test (stored, with their CRC-32, so that no
//! zip crate is needed here), a short CPU run's checkpoint, a copy of the fixtures.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use tallyho::checkpoint::{self, Header, MarketId};
use tallyho_oracle::features::Market;
use tallyho_oracle::trainer::{train, Keep, OracleTrainer};

/// A fresh, empty folder under the system temp dir, unique per call and process.
pub fn scratch(name: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "tallyho-bad-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The repository root at run time (nextest remaps it for an archive run elsewhere).
pub fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The real ES LEAN folder of the shared data.
pub fn es_dir() -> PathBuf {
    tallyho_oracle::shared_data::dir()
        .unwrap()
        .join("lean-es-minute-2013-10")
}

pub const CSV_HEADER: &str = "timestamp,open,high,low,close,volume,bid,ask,bid_size,ask_size";

/// `n` valid rows of the headed CSV, one minute apart from 2013-10-07 00:00.
pub fn csv_rows(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let p = 1676.5 + 0.25 * (i % 5) as f64;
            format!(
                "{},{p},{},{},{p},{},{},{},{},{}",
                1_381_104_000_000i64 + 60_000 * i as i64,
                p + 0.25,
                p - 0.25,
                10 + i,
                p - 0.25,
                p,
                50 + i,
                60 + i
            )
        })
        .collect()
}

/// A CSV text of the header and `rows`.
pub fn csv_text(rows: &[String]) -> String {
    let mut t = CSV_HEADER.to_string() + "\n";
    for r in rows {
        t += r;
        t += "\n";
    }
    t
}

/// CRC-32 (IEEE), as zip stores it.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// A zip archive of `entries` (name, bytes), stored without compression.
pub fn zip_bytes(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let (mut out, mut central) = (Vec::new(), Vec::new());
    let le16 = |v: &mut Vec<u8>, x: u16| v.extend_from_slice(&x.to_le_bytes());
    let le32 = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_le_bytes());
    for (name, data) in entries {
        let offset = out.len() as u32;
        let (crc, len, nlen) = (crc32(data), data.len() as u32, name.len() as u16);
        le32(&mut out, 0x0403_4b50);
        for x in [20u16, 0, 0, 0, 0x21] {
            le16(&mut out, x);
        }
        for x in [crc, len, len] {
            le32(&mut out, x);
        }
        le16(&mut out, nlen);
        le16(&mut out, 0);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        le32(&mut central, 0x0201_4b50);
        for x in [20u16, 20, 0, 0, 0, 0x21] {
            le16(&mut central, x);
        }
        for x in [crc, len, len] {
            le32(&mut central, x);
        }
        for x in [nlen, 0, 0, 0, 0] {
            le16(&mut central, x);
        }
        le32(&mut central, 0);
        le32(&mut central, offset);
        central.extend_from_slice(name.as_bytes());
    }
    let (cd_offset, cd_len) = (out.len() as u32, central.len() as u32);
    out.extend_from_slice(&central);
    le32(&mut out, 0x0605_4b50);
    for x in [0u16, 0, entries.len() as u16, entries.len() as u16] {
        le16(&mut out, x);
    }
    le32(&mut out, cd_len);
    le32(&mut out, cd_offset);
    le16(&mut out, 0);
    out
}

/// One LEAN futures day: trade rows `ms,open,high,low,close,volume` and quote rows (11
/// fields) of contract 201312 of symbol es.
pub struct LeanDay {
    pub date: &'static str,
    pub trade: Vec<String>,
    pub quote: Vec<String>,
}

impl LeanDay {
    /// A valid day of `n` bars, a minute apart from 00:01.
    pub fn valid(date: &'static str, n: usize) -> LeanDay {
        let (mut trade, mut quote) = (Vec::new(), Vec::new());
        for i in 0..n {
            let ms = 60_000 * (i + 1);
            let p = 1676.5 + 0.25 * (i % 3) as f64;
            trade.push(format!("{ms},{p},{},{p},{},{}", p + 0.25, p + 0.25, 5 + i));
            quote.push(format!(
                "{ms},{p},{p},{p},{p},{},{},{},{},{},{}",
                40 + i,
                p + 0.25,
                p + 0.25,
                p + 0.25,
                p + 0.25,
                30 + i
            ));
        }
        LeanDay { date, trade, quote }
    }

    pub fn trade_name(&self) -> String {
        format!("{}_es_minute_trade_201312.csv", self.date)
    }

    pub fn quote_name(&self) -> String {
        format!("{}_es_minute_quote_201312.csv", self.date)
    }

    pub fn trade_zip(&self) -> Vec<u8> {
        zip_bytes(&[(&self.trade_name(), self.trade.join("\n").as_bytes())])
    }

    pub fn quote_zip(&self) -> Vec<u8> {
        zip_bytes(&[(&self.quote_name(), self.quote.join("\n").as_bytes())])
    }

    /// Writes `DATE_trade.zip` and `DATE_quote.zip` into `dir`.
    pub fn write(&self, dir: &Path) {
        std::fs::write(
            dir.join(format!("{}_trade.zip", self.date)),
            self.trade_zip(),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("{}_quote.zip", self.date)),
            self.quote_zip(),
        )
        .unwrap();
    }
}

/// A short CPU run on the synthetic market (30 steps of 8 envs, updates from step 8) and
/// the header of its checkpoint.
pub fn short_run() -> (Market, Header, OracleTrainer) {
    let market = tallyho::env::load_market(None).unwrap();
    let mut cfg = tallyho::train::Preset::Cpu.config(30, Some(8), Some(3), market.feature_dim);
    cfg.schedule.learn_start = 64;
    let mut t = OracleTrainer::new(&cfg, &market).unwrap();
    train(&cfg, 0, &mut t, &mut Keep::default()).unwrap();
    let header = Header {
        format: checkpoint::FORMAT.into(),
        version: checkpoint::VERSION,
        step: 30,
        backend: "cpu".into(),
        market: MarketId::of(&market, checkpoint::SYNTHETIC),
        config: cfg,
    };
    (market, header, t)
}

/// A copy of the repository's fixtures in a scratch folder.
pub fn fixtures_copy(name: &str) -> PathBuf {
    let dir = scratch(name);
    for e in std::fs::read_dir(repo().join("fixtures")).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
        }
    }
    dir
}
