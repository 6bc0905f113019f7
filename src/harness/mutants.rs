//! `tallyho mutants`: mutation testing of the kernels. Planted faults in the cuda/ sources,
//! one at a time (a swapped operator, an off-by-one bound, a changed constant, a dropped
//! barrier, a wrong index or stride, a changed reduction order), each run through the
//! `tallyho verify` groups that cover the kernel files it changes: a mutant is caught when
//! a row fails, the checks stop with an error or the process dies or hangs, and missed when
//! every row passes. The score is caught / (caught + missed); a mutant NVRTC refuses is
//! unviable and not counted.
//!
//! The faults are made in the checkout's cuda/ tree and inlined with build.rs's own rule
//! ([`crate::kernel_inline`]); the tree must inline to the sources this binary embeds (the
//! same build), which [`Tree::read`] checks. Each mutant runs in a process of its own (a
//! fault may leave the CUDA context unusable), which loads the mutated kernel files in place
//! of the embedded ones ([`Gpu::replace_source`]) and reads every other kernel's PTX from a
//! shared cache.

use crate::error::{Error, Result};
use crate::harness::verify;
use crate::kernel_inline::inline;
use crate::runtime::{compile_source, KERNELS};
use crate::Gpu;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The kind of a planted fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// `__syncthreads()`, `__syncwarp()` or `__threadfence()` removed.
    Barrier,
    /// A warp shuffle of one pattern turned into another: the reduction pairs other lanes.
    Reduction,
    /// An array subscript, thread index or grid stride off by one.
    Index,
    /// A comparison's bound moved by one: `<` and `<=`, `>` and `>=`.
    Bound,
    /// An arithmetic, logical or equality operator swapped for its counterpart.
    Operator,
    /// A literal changed: an integer plus one, a float doubled (zero made one).
    Constant,
}

/// One planted fault: where (a file of the cuda/ tree, 1-based line and byte column), what
/// it was and what it becomes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mutant {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub kind: Kind,
    pub from: String,
    pub to: String,
}

impl Mutant {
    pub fn describe(&self) -> String {
        format!(
            "cuda/{}:{}:{}: {:?} `{}` -> `{}`",
            self.file, self.line, self.col, self.kind, self.from, self.to
        )
    }
}

/// The checkout's kernel tree: every file under cuda/, by its path relative to cuda/.
pub struct Tree {
    files: BTreeMap<String, String>,
}

impl Tree {
    /// Read `cuda_dir` and check that it inlines to the kernel sources this binary embeds.
    pub fn read(cuda_dir: &Path) -> Result<Tree> {
        let mut files = BTreeMap::new();
        read_dir(cuda_dir, cuda_dir, &mut files)?;
        let tree = Tree { files };
        for k in KERNELS {
            let source = tree.inlined(k.name, None)?;
            if source != k.source {
                return Err(Error::Shape(format!(
                    "cuda/{}.cu in {} is not the source this binary was built from: run `tallyho mutants` from the checkout it was built from, or rebuild it (cargo build --release)",
                    k.name,
                    cuda_dir.display()
                )));
            }
        }
        Ok(tree)
    }

    /// Kernel file `kernel` inlined, with `mutant` applied where given.
    pub fn inlined(&self, kernel: &str, mutant: Option<&Mutant>) -> Result<String> {
        let mut read = |rel: &str| -> std::result::Result<String, String> {
            let text = self
                .files
                .get(rel)
                .ok_or_else(|| format!("cuda/{rel} does not exist"))?;
            match mutant {
                Some(m) if m.file == rel => apply(text, m),
                _ => Ok(text.clone()),
            }
        };
        inline(&format!("{kernel}.cu"), &mut read, &mut BTreeSet::new()).map_err(Error::Shape)
    }

    /// The kernel files whose source includes `rel` (itself, for a .cu file).
    pub fn kernels_including(&self, rel: &str) -> Vec<&'static str> {
        let marker = format!("// ---- begin {rel}\n");
        KERNELS
            .iter()
            .filter(|k| format!("{}.cu", k.name) == rel || k.source.contains(&marker))
            .map(|k| k.name)
            .collect()
    }
}

fn read_dir(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<()> {
    let io = |e, what: &Path| Error::Io {
        what: format!("reading {}", what.display()),
        err: e,
    };
    for entry in std::fs::read_dir(dir).map_err(|e| io(e, dir))? {
        let path = entry.map_err(|e| io(e, dir))?.path();
        if path.is_dir() {
            read_dir(root, &path, out)?;
        } else if path.extension().is_some_and(|x| x == "cu" || x == "cuh") {
            let rel = path
                .strip_prefix(root)
                .map_err(|e| Error::Shape(e.to_string()))?
                .to_string_lossy()
                .replace('\\', "/");
            let text = std::fs::read_to_string(&path).map_err(|e| io(e, &path))?;
            out.insert(rel, text);
        }
    }
    Ok(())
}

/// `text` with `m` applied: its `from` replaced by its `to` at its line and column.
fn apply(text: &str, m: &Mutant) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(text.len() + m.to.len());
    let mut found = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if i + 1 == m.line {
            let at = m.col - 1;
            if line.get(at..at + m.from.len()) != Some(m.from.as_str()) {
                return Err(format!(
                    "cuda/{}:{}:{} does not read `{}`: the tree changed since the mutants were listed",
                    m.file, m.line, m.col, m.from
                ));
            }
            out.push_str(&line[..at]);
            out.push_str(&m.to);
            out.push_str(&line[at + m.from.len()..]);
            found = true;
        } else {
            out.push_str(line);
        }
    }
    if found {
        Ok(out)
    } else {
        Err(format!("cuda/{} has no line {}", m.file, m.line))
    }
}

/// One token of a line of code: its byte column (0-based) and text.
#[derive(Clone, Copy, Debug)]
struct Token<'a> {
    at: usize,
    text: &'a str,
}

/// Operators, longest first.
const OPERATORS: &[&str] = &[
    "<<=", ">>=", "->", "::", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=", "*=",
    "/=", "++", "--",
];

/// The code tokens of `line` (comments, string and character literals skipped);
/// `in_comment` carries a block comment from line to line.
fn tokens<'a>(line: &'a str, in_comment: &mut bool) -> Vec<Token<'a>> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if *in_comment {
            match line[i..].find("*/") {
                Some(end) => {
                    *in_comment = false;
                    i += end + 2;
                }
                None => break,
            }
            continue;
        }
        let c = b[i];
        let rest = &line[i..];
        if rest.starts_with("//") {
            break;
        }
        if rest.starts_with("/*") {
            *in_comment = true;
            i += 2;
            continue;
        }
        let start = i;
        if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < b.len() {
                let d = b[i];
                let exponent_sign = (d == b'+' || d == b'-')
                    && matches!(b[i - 1], b'e' | b'E')
                    && !line[start..i].starts_with("0x");
                if d.is_ascii_alphanumeric() || d == b'.' || exponent_sign {
                    i += 1;
                } else {
                    break;
                }
            }
        } else {
            i += OPERATORS
                .iter()
                .find(|op| rest.starts_with(*op))
                .map_or(1, |op| op.len());
        }
        out.push(Token {
            at: start,
            text: &line[start..i],
        });
    }
    out
}

/// Does a token end an operand (so that an operator after it is binary)? Not a keyword, nor
/// a type name (`float*` declares a pointer): the CUDA scalar and vector types and the
/// project's own types, which are capitalised.
fn ends_operand(t: Option<&Token>) -> bool {
    t.is_some_and(|t| {
        let c = t.text.as_bytes()[0];
        let type_name = c.is_ascii_uppercase() && t.text.chars().any(|c| c.is_ascii_lowercase())
            || matches!(
                t.text,
                "float"
                    | "double"
                    | "int"
                    | "unsigned"
                    | "char"
                    | "void"
                    | "bool"
                    | "long"
                    | "short"
                    | "size_t"
                    | "uint2"
                    | "uint4"
                    | "float2"
                    | "float4"
                    | "int2"
                    | "__half"
                    | "T"
                    | "auto"
            );
        (c.is_ascii_alphanumeric() || c == b'_' || t.text == ")" || t.text == "]")
            && !type_name
            && !matches!(
                t.text,
                "return" | "case" | "else" | "const" | "__restrict__"
            )
    })
}

/// A literal's changed value: an integer plus one, a float doubled (zero made one), its
/// suffix kept; None for what is not a plain decimal literal.
fn changed_literal(text: &str) -> Option<String> {
    let digits_end = text
        .find(|c: char| {
            !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')
        })
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(digits_end);
    if text.starts_with("0x") || number.is_empty() {
        return None;
    }
    if !number.contains(['.', 'e', 'E']) && !suffix.contains(['f', 'F']) {
        let n: u64 = number.parse().ok()?;
        return Some(format!("{}{suffix}", n + 1));
    }
    let v: f64 = number.parse().ok()?;
    let changed = if v == 0.0 { 1.0 } else { v * 2.0 };
    Some(format!("{changed:?}{suffix}"))
}

/// Every fault that can be planted in `text` (file `rel` of the tree), in source order.
pub fn candidates(rel: &str, text: &str) -> Vec<Mutant> {
    let mut out = Vec::new();
    let mut in_comment = false;
    for (i, line) in text.lines().enumerate() {
        let toks = tokens(line, &mut in_comment);
        if line.trim_start().starts_with('#') {
            continue;
        }
        let mut push = |t: &Token, kind: Kind, from: &str, to: String| {
            out.push(Mutant {
                file: rel.to_string(),
                line: i + 1,
                col: t.at + 1,
                kind,
                from: from.to_string(),
                to,
            })
        };
        for (j, t) in toks.iter().enumerate() {
            let (prev, next) = (j.checked_sub(1).map(|p| &toks[p]), toks.get(j + 1));
            let binary = ends_operand(prev);
            let swap = match t.text {
                "+" | "-" | "*" | "/" | "&" | "|" if binary => Some(match t.text {
                    "+" => "-",
                    "-" => "+",
                    "*" => "/",
                    "/" => "*",
                    "&" => "|",
                    _ => "&",
                }),
                "==" => Some("!="),
                "!=" => Some("=="),
                "&&" => Some("||"),
                "||" => Some("&&"),
                "+=" => Some("-="),
                "-=" => Some("+="),
                "<<" if binary => Some(">>"),
                ">>" if binary => Some("<<"),
                _ => None,
            };
            if let Some(to) = swap {
                push(t, Kind::Operator, t.text, to.to_string());
            }
            let bound = match t.text {
                "<" if binary => Some("<="),
                "<=" => Some("<"),
                ">" if binary => Some(">="),
                ">=" => Some(">"),
                _ => None,
            };
            if let Some(to) = bound {
                push(t, Kind::Bound, t.text, to.to_string());
            }
            if t.text.as_bytes()[0].is_ascii_digit() || t.text.starts_with('.') {
                if let Some(to) = changed_literal(t.text) {
                    push(t, Kind::Constant, t.text, to);
                }
            }
            match t.text {
                "__syncthreads" | "__syncwarp" | "__threadfence" => {
                    // The whole call and its semicolon: `name(...);`.
                    let call = &line[t.at..];
                    if let Some(end) = call.find(");") {
                        push(t, Kind::Barrier, &call[..end + 2], String::new());
                    }
                }
                "__shfl_down_sync" => push(t, Kind::Reduction, t.text, "__shfl_xor_sync".into()),
                "__shfl_xor_sync" => push(t, Kind::Reduction, t.text, "__shfl_down_sync".into()),
                "__shfl_up_sync" => push(t, Kind::Reduction, t.text, "__shfl_down_sync".into()),
                "threadIdx" | "blockIdx" | "gridDim"
                    if next.is_some_and(|n| n.text == ".")
                        && toks.get(j + 2).is_some_and(|x| x.text == "x") =>
                {
                    let from = &line[t.at..toks[j + 2].at + 1];
                    push(t, Kind::Index, from, format!("({from} + 1)"));
                }
                "[" if binary => push(t, Kind::Index, "[", "[1 + ".into()),
                _ => {}
            }
        }
    }
    out
}

/// A deterministic sample of the tree's faults: at most `per_file` of each file, taken
/// round robin over the kinds (the rarer kinds first, so that each is represented), each
/// kind's order shuffled by `seed`.
pub fn generate(tree: &Tree, per_file: usize, seed: u64) -> Vec<Mutant> {
    let mut out = Vec::new();
    for (rel, text) in &tree.files {
        let mut by_kind: BTreeMap<Kind, Vec<Mutant>> = BTreeMap::new();
        for m in candidates(rel, text) {
            by_kind.entry(m.kind).or_default().push(m);
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ fnv(rel));
        for list in by_kind.values_mut() {
            list.shuffle(&mut rng);
            list.reverse();
        }
        let mut taken = Vec::new();
        while taken.len() < per_file && by_kind.values().any(|l| !l.is_empty()) {
            for list in by_kind.values_mut() {
                if taken.len() < per_file {
                    taken.extend(list.pop());
                }
            }
        }
        taken.sort_by_key(|m| (m.line, m.col));
        out.extend(taken);
    }
    out
}

/// FNV-1a of a file name: each file's own shuffle, whatever files come before it.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A mutant's mutated kernel sources: (kernel file, source) for every kernel including it.
pub fn mutated_sources(tree: &Tree, m: &Mutant) -> Result<Vec<(&'static str, String)>> {
    tree.kernels_including(&m.file)
        .into_iter()
        .map(|k| Ok((k, tree.inlined(k, Some(m))?)))
        .collect()
}

/// Does NVRTC compile every kernel a mutant changes (for `arch`)? Err holds its first error.
pub fn compiles(tree: &Tree, m: &Mutant, arch: &'static str) -> Result<()> {
    for (kernel, source) in mutated_sources(tree, m)? {
        compile_source(kernel, &source, arch)?;
    }
    Ok(())
}

/// What became of a mutant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// NVRTC refused it: not counted.
    Unviable(String),
    /// A verify row failed, the checks stopped with an error, or the process died or hung.
    Caught(String),
    /// Every row of the groups covering it passed.
    Missed,
}

/// One mutant's outcome.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Outcome {
    pub mutant: Mutant,
    pub verdict: Verdict,
    pub seconds: f64,
}

/// The `--only` filters of a mutant's verify run: the kernel files it changes (every group
/// checking one of them runs).
pub fn groups_for(tree: &Tree, m: &Mutant) -> Vec<String> {
    tree.kernels_including(&m.file)
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// Exit codes of a mutant's process (`tallyho mutants --apply`).
pub mod exit {
    /// Every row passed: the mutant survived.
    pub const PASSED: i32 = 0;
    /// A row failed.
    pub const ROW_FAILED: i32 = 10;
    /// The checks stopped with an error (a CUDA fault, a shape refused).
    pub const CHECK_ERROR: i32 = 11;
    /// NVRTC refused the mutated source.
    pub const UNVIABLE: i32 = 12;
    /// The process could not set up (no GPU, the tree not this build's): the run stops.
    pub const SETUP: i32 = 13;
}

/// In a mutant's process: load the mutated kernel files (none for the baseline) and run the
/// verify groups covering them (every group for the baseline). Returns the exit code and a
/// line saying why.
pub fn run_one(
    gpu: &Gpu,
    tree: &Tree,
    mutant: Option<&Mutant>,
    opts: &verify::Options,
) -> (i32, String) {
    let mut opts = opts.clone();
    if let Some(m) = mutant {
        let sources = match mutated_sources(tree, m) {
            Ok(s) => s,
            Err(e) => return (exit::SETUP, e.to_string()),
        };
        for (kernel, source) in &sources {
            if let Err(e) = gpu.replace_source(kernel, source) {
                return match e {
                    Error::Compile { .. } => (exit::UNVIABLE, first_line(&e.to_string())),
                    other => (exit::CHECK_ERROR, first_line(&other.to_string())),
                };
            }
        }
        opts.only = groups_for(tree, m);
    }
    match verify::run(gpu, &opts, |_| {}) {
        Ok(report) => match report.rows.iter().find(|r| !r.passed) {
            Some(r) => (
                exit::ROW_FAILED,
                format!(
                    "{} / {}: {}",
                    r.kernel,
                    r.output,
                    r.first_failure.as_deref().unwrap_or("failed")
                ),
            ),
            None => (exit::PASSED, format!("{} rows passed", report.rows.len())),
        },
        Err(e) => (exit::CHECK_ERROR, first_line(&e.to_string())),
    }
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    line.chars().take(300).collect()
}

/// Per-file and total counts, the score, and the survivors.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub mutants: usize,
    pub unviable: usize,
    pub caught: usize,
    pub missed: usize,
    /// caught / (caught + missed).
    pub score: f64,
    pub by_file: BTreeMap<String, [usize; 3]>,
    pub by_kind: BTreeMap<String, [usize; 3]>,
    pub survivors: Vec<String>,
}

pub fn summarize(outcomes: &[Outcome]) -> Summary {
    let mut s = Summary {
        mutants: outcomes.len(),
        ..Summary::default()
    };
    for o in outcomes {
        let slot = match o.verdict {
            Verdict::Unviable(_) => 0,
            Verdict::Caught(_) => 1,
            Verdict::Missed => 2,
        };
        s.by_file.entry(o.mutant.file.clone()).or_default()[slot] += 1;
        s.by_kind.entry(format!("{:?}", o.mutant.kind)).or_default()[slot] += 1;
        match o.verdict {
            Verdict::Unviable(_) => s.unviable += 1,
            Verdict::Caught(_) => s.caught += 1,
            Verdict::Missed => {
                s.missed += 1;
                s.survivors.push(o.mutant.describe());
            }
        }
    }
    let counted = s.caught + s.missed;
    s.score = if counted == 0 {
        0.0
    } else {
        s.caught as f64 / counted as f64
    };
    s
}

/// The table `tallyho mutants` prints: per file and per kind, unviable / caught / missed,
/// then the score and the survivors.
pub fn table(s: &Summary) -> String {
    let mut out = format!(
        "{:<28} {:>8} {:>6} {:>6}\n",
        "file / kind", "unviable", "caught", "missed"
    );
    for (name, [u, c, m]) in s.by_file.iter().chain(&s.by_kind) {
        out += &format!("{name:<28} {u:>8} {c:>6} {m:>6}\n");
    }
    out += &format!(
        "{} mutants: {} unviable, {} caught, {} missed; score {:.1}% caught\n",
        s.mutants,
        s.unviable,
        s.caught,
        s.missed,
        100.0 * s.score
    );
    for survivor in &s.survivors {
        out += &format!("missed {survivor}\n");
    }
    out
}

/// The checkout's cuda/ folder: beside the fixtures (see [`crate::harness::fixtures::default_dir`]).
pub fn default_cuda_dir() -> PathBuf {
    let fixtures = crate::harness::fixtures::default_dir();
    fixtures
        .parent()
        .map_or_else(|| PathBuf::from("cuda"), |p| p.join("cuda"))
}

/// How `tallyho mutants` runs the mutants' processes.
pub struct RunOptions<'a> {
    /// This program, run as `EXE mutants --apply JSON ARGS...` for each mutant.
    pub exe: &'a Path,
    /// The arguments every mutant's process gets after `--apply JSON`.
    pub args: Vec<String>,
    /// Processes at once.
    pub jobs: usize,
    /// A mutant's process still running after this is killed: caught (a hang).
    pub timeout: std::time::Duration,
    /// The PTX cache the processes share.
    pub ptx_cache: PathBuf,
    /// No mutant is started after this long: the rest are left untested (and said so).
    pub budget: Option<std::time::Duration>,
}

/// Run one process: `--apply JSON` of `mutant`, or `--baseline`. Returns its exit code (None
/// where it died by a signal or was killed at the timeout), its last line and the seconds.
fn spawn_one(
    run: &RunOptions,
    mutant: Option<&Mutant>,
) -> Result<(Option<i32>, String, f64, bool)> {
    let start = std::time::Instant::now();
    let mut cmd = std::process::Command::new(run.exe);
    cmd.arg("mutants");
    match mutant {
        Some(m) => cmd
            .arg("--apply")
            .arg(serde_json::to_string(m).map_err(|e| Error::Shape(e.to_string()))?),
        None => cmd.arg("--baseline"),
    };
    cmd.args(&run.args)
        .env("TALLYHO_PTX_CACHE", &run.ptx_cache)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| Error::Io {
        what: format!("starting {}", run.exe.display()),
        err: e,
    })?;
    // The pipes are drained by threads so that a chatty process cannot block on them.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut s);
            }
            s
        })
    };
    use std::io::Read;
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| Error::Io {
            what: "waiting for a mutant's process".into(),
            err: e,
        })? {
            break s;
        }
        if start.elapsed() > run.timeout {
            let _ = child.kill();
            timed_out = true;
            break child.wait().map_err(|e| Error::Io {
                what: "waiting for a killed mutant's process".into(),
                err: e,
            })?;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    let last = stdout
        .lines()
        .chain(stderr.lines())
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("")
        .to_string();
    Ok((
        status.code(),
        last,
        start.elapsed().as_secs_f64(),
        timed_out,
    ))
}

/// The unmutated tree through every group: it must pass, or no verdict would mean anything.
pub fn baseline(run: &RunOptions) -> Result<f64> {
    let (code, last, seconds, timed_out) = spawn_one(run, None)?;
    if code != Some(exit::PASSED) || timed_out {
        return Err(Error::Shape(format!(
            "the unmutated kernels do not pass their verify groups (exit {code:?}{}): {last}; fix that first (`tallyho verify`)",
            if timed_out { ", timed out" } else { "" }
        )));
    }
    Ok(seconds)
}

/// Run every mutant in `viable` in a process of its own, `run.jobs` at once, reporting each
/// outcome to `progress` as it comes.
pub fn run_all(
    run: &RunOptions,
    viable: &[Mutant],
    progress: &(dyn Fn(usize, &Outcome) + Sync),
) -> Result<Vec<Outcome>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    let failure = std::sync::Mutex::new(None::<Error>);
    let start = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..run.jobs.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(m) = viable.get(i) else { break };
                if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    break;
                }
                if run.budget.is_some_and(|b| start.elapsed() > b) {
                    break;
                }
                match spawn_one(run, Some(m)) {
                    Ok((code, last, seconds, timed_out)) => {
                        let verdict = match code {
                            _ if timed_out => {
                                Verdict::Caught(format!("timed out after {seconds:.0} s"))
                            }
                            Some(exit::PASSED) => Verdict::Missed,
                            Some(exit::ROW_FAILED) => Verdict::Caught(last),
                            Some(exit::CHECK_ERROR) => Verdict::Caught(format!("error: {last}")),
                            Some(exit::UNVIABLE) => Verdict::Unviable(last),
                            None => Verdict::Caught(format!("the process died: {last}")),
                            Some(code) => {
                                if let Ok(mut f) = failure.lock() {
                                    f.get_or_insert(Error::Shape(format!(
                                        "a mutant's process could not run (exit {code}): {last}"
                                    )));
                                }
                                break;
                            }
                        };
                        let o = Outcome {
                            mutant: m.clone(),
                            verdict,
                            seconds,
                        };
                        progress(i, &o);
                        if let Ok(mut r) = results.lock() {
                            r.push((i, o));
                        }
                    }
                    Err(e) => {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    let mut r = results
        .into_inner()
        .map_err(|_| Error::Shape("a mutant worker panicked".into()))?;
    r.sort_by_key(|(i, _)| *i);
    Ok(r.into_iter().map(|(_, o)| o).collect())
}

/// NVRTC on every mutant (for `arch`), `threads` at once: (viable, unviable outcomes).
pub fn sort_viable(
    tree: &Tree,
    mutants: Vec<Mutant>,
    arch: &'static str,
    threads: usize,
) -> (Vec<Mutant>, Vec<Outcome>) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let verdicts: Vec<std::sync::Mutex<Option<std::result::Result<(), String>>>> = mutants
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(m) = mutants.get(i) else { break };
                let v = compiles(tree, m, arch).map_err(|e| first_line(&e.to_string()));
                if let Ok(mut slot) = verdicts[i].lock() {
                    *slot = Some(v);
                }
            });
        }
    });
    let (mut viable, mut unviable) = (Vec::new(), Vec::new());
    for (m, v) in mutants.into_iter().zip(verdicts) {
        match v.into_inner().ok().flatten() {
            Some(Ok(())) => viable.push(m),
            Some(Err(why)) => unviable.push(Outcome {
                mutant: m,
                verdict: Verdict::Unviable(why),
                seconds: 0.0,
            }),
            None => unviable.push(Outcome {
                mutant: m,
                verdict: Verdict::Unviable("not compiled".into()),
                seconds: 0.0,
            }),
        }
    }
    (viable, unviable)
}
