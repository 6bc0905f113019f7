//! Recorded fixtures: `tallyho fixtures record` (GPU) runs the replay kernels on a seeded
//! scenario and saves, for each kernel call, its inputs and outputs as safetensors, with a
//! manifest (kernel source hash, seed, config, device, driver). `check` replays them through
//! the oracle (CPU CI) and `check_gpu` through the kernels; a kernel whose source hash no
//! longer matches its fixture is reported stale with the command to re-record.
//!
//! Files: `fixtures/manifest.json` and `fixtures/<kernel>.safetensors`, tensors named
//! `<call>/<in|out>/<name>` (e.g. `2/in/tree`).

use crate::error::{Error, Result};
use crate::parity::{compare_states, compare_transitions, random_transitions, sum_tree_build};
use crate::replay::{ctl_of_words, ctl_words, PerBuffer};
use crate::runtime::{kernel_source, Gpu};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use safetensors::tensor::{Dtype, SafeTensors, View};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use tallyho_oracle::per::{self, PerState, Transitions};
use tallyho_oracle::tolerance::{PER_IS_WEIGHT, PER_PRIORITY};
use tallyho_oracle::{compare_bitwise, compare_exact, compare_f32, philox, Comparison, PerConfig};

pub const KERNELS: [&str; 5] = ["philox", "per_insert", "per_sample", "per_gather", "per_update_priorities"];

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KernelEntry {
    pub sha256: String,
    pub file: String,
    pub calls: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: u32,
    pub seed: u64,
    pub config: PerConfig,
    pub device: String,
    pub driver: String,
    pub arch: String,
    pub kernels: BTreeMap<String, KernelEntry>,
}

/// The checkout's fixture folder: under `$CARGO_MANIFEST_DIR` when cargo or nextest runs us
/// (nextest remaps it for an archive run elsewhere), else `./fixtures` when present, else the
/// folder of the checkout this binary was built from.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        return PathBuf::from(dir).join("fixtures");
    }
    let here = PathBuf::from("fixtures");
    if here.join("manifest.json").is_file() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// The recorded scenario: small on purpose (fixtures stay a few hundred KB).
pub fn scenario_config() -> PerConfig {
    PerConfig { capacity: 96, state_dim: 5, batch: 16, seed: 2026, beta_steps: 50, ..PerConfig::default() }
}

// ---- tensors ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Tensor {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &Tensor {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn f32_tensor(v: &[f32]) -> Tensor {
    Tensor { dtype: Dtype::F32, shape: vec![v.len()], bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
}
fn u32_tensor(v: &[u32]) -> Tensor {
    Tensor { dtype: Dtype::U32, shape: vec![v.len()], bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
}
fn i32_tensor(v: &[i32]) -> Tensor {
    Tensor { dtype: Dtype::I32, shape: vec![v.len()], bytes: v.iter().flat_map(|x| x.to_le_bytes()).collect() }
}

/// One kernel call: named inputs and outputs.
#[derive(Default)]
struct Call {
    tensors: BTreeMap<String, Tensor>,
}

impl Call {
    fn put(&mut self, side: &str, name: &str, t: Tensor) {
        self.tensors.insert(format!("{side}/{name}"), t);
    }
    fn put_state(&mut self, side: &str, st: &PerState) {
        self.put(side, "tree", f32_tensor(&st.tree));
        self.put(side, "ctl", u32_tensor(&ctl_words(&st.ctl)));
        self.put_transitions(side, "store", &st.store);
    }
    fn put_transitions(&mut self, side: &str, prefix: &str, t: &Transitions) {
        self.put(side, &format!("{prefix}.states"), f32_tensor(&t.states));
        self.put(side, &format!("{prefix}.next_states"), f32_tensor(&t.next_states));
        self.put(side, &format!("{prefix}.actions"), i32_tensor(&t.actions));
        self.put(side, &format!("{prefix}.rewards"), f32_tensor(&t.rewards));
        self.put(side, &format!("{prefix}.dones"), f32_tensor(&t.dones));
    }
}

/// A recorded call, read back.
struct Recorded<'a> {
    kernel: &'a str,
    call: usize,
    st: &'a SafeTensors<'a>,
}

impl Recorded<'_> {
    fn view(&self, side: &str, name: &str, dtype: Dtype) -> Result<Vec<u8>> {
        let key = format!("{}/{side}/{name}", self.call);
        let v = self
            .st
            .tensor(&key)
            .map_err(|e| Error::Fixture(format!("{}: tensor {key} is missing or unreadable: {e}", self.kernel)))?;
        if v.dtype() != dtype {
            return Err(Error::Fixture(format!("{}: tensor {key} is {:?}, expected {dtype:?}", self.kernel, v.dtype())));
        }
        Ok(v.data().to_vec())
    }
    fn f32(&self, side: &str, name: &str) -> Result<Vec<f32>> {
        Ok(self.view(side, name, Dtype::F32)?.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }
    fn u32(&self, side: &str, name: &str) -> Result<Vec<u32>> {
        Ok(self.view(side, name, Dtype::U32)?.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }
    fn i32(&self, side: &str, name: &str) -> Result<Vec<i32>> {
        Ok(self.view(side, name, Dtype::I32)?.chunks_exact(4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }
    fn transitions(&self, side: &str, prefix: &str) -> Result<Transitions> {
        Ok(Transitions {
            states: self.f32(side, &format!("{prefix}.states"))?,
            next_states: self.f32(side, &format!("{prefix}.next_states"))?,
            actions: self.i32(side, &format!("{prefix}.actions"))?,
            rewards: self.f32(side, &format!("{prefix}.rewards"))?,
            dones: self.f32(side, &format!("{prefix}.dones"))?,
        })
    }
    fn state(&self, side: &str, cfg: &PerConfig) -> Result<PerState> {
        let w = self.u32(side, "ctl")?;
        if w.len() != 4 {
            return Err(Error::Fixture(format!("{}: call {} ctl has {} words, expected 4", self.kernel, self.call, w.len())));
        }
        let st = PerState {
            cfg: cfg.clone(),
            tree: self.f32(side, "tree")?,
            ctl: ctl_of_words(&w),
            store: self.transitions(side, "store")?,
        };
        let (c, s, l) = (cfg.capacity, cfg.state_dim, cfg.leaves());
        let shaped = st.tree.len() == 2 * l
            && st.store.states.len() == c * s
            && st.store.next_states.len() == c * s
            && st.store.actions.len() == 3 * c
            && st.store.rewards.len() == c
            && st.store.dones.len() == c;
        if !shaped {
            return Err(Error::Fixture(format!("{}: call {}: state shapes do not match the manifest's config", self.kernel, self.call)));
        }
        Ok(st)
    }
}

// ---- record ----------------------------------------------------------------------------

/// Run the scenario on the GPU and write every kernel call's inputs and outputs to `dir`.
pub fn record(gpu: &Gpu, dir: &Path) -> Result<Manifest> {
    let cfg = scenario_config();
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut calls: BTreeMap<&str, Vec<Call>> = KERNELS.iter().map(|&k| (k, Vec::new())).collect();
    let mut push = |k: &'static str, c: Call| calls.get_mut(k).map(|v| v.push(c));

    // philox: random counters and keys, and the known-answer ones' shape.
    let counters: Vec<[u32; 4]> = (0..64).map(|_| rng.gen()).collect();
    let keys: Vec<[u32; 2]> = (0..64).map(|_| rng.gen()).collect();
    let words = crate::philox::philox_kat(gpu, &counters, &keys)?;
    let mut c = Call::default();
    c.put("in", "counters", u32_tensor(&counters.concat()));
    c.put("in", "keys", u32_tensor(&keys.concat()));
    c.put("out", "words", u32_tensor(&words.concat()));
    push("philox", c);

    let mut buf = PerBuffer::new(gpu, &cfg, 40)?;
    // Three inserts of 40 into 96 slots: the third wraps around the ring.
    for _ in 0..3 {
        let before = buf.download_state()?;
        let t = random_transitions(&mut rng, 40, cfg.state_dim);
        buf.insert_host(&t)?;
        let mut c = Call::default();
        c.put_state("in", &before);
        c.put_transitions("in", "batch", &t);
        c.put_state("out", &buf.download_state()?);
        push("per_insert", c);
    }
    // Three update steps: sample, gather, priority update with seeded |td|.
    for _ in 0..3 {
        let before = buf.download_state()?;
        buf.poison_outputs()?;
        buf.sample()?;
        let (idx, w) = buf.read_sample()?;
        let mut c = Call::default();
        c.put_state("in", &before);
        c.put("out", "indices", u32_tensor(&idx));
        c.put("out", "weights", f32_tensor(&w));
        c.put("out", "ctl", u32_tensor(&ctl_words(&buf.ctl()?)));
        push("per_sample", c);

        buf.gather()?;
        let mut c = Call::default();
        c.put_state("in", &buf.download_state()?);
        c.put("in", "indices", u32_tensor(&idx));
        c.put_transitions("out", "batch", &buf.batch.download(&gpu.stream)?);
        push("per_gather", c);

        let td: Vec<f32> = (0..cfg.batch).map(|_| rng.gen_range(0.0..2.0)).collect();
        let before = buf.download_state()?;
        buf.update_priorities(&gpu.stream.clone_htod(&td)?)?;
        let mut c = Call::default();
        c.put_state("in", &before);
        c.put("in", "indices", u32_tensor(&idx));
        c.put("in", "td_abs", f32_tensor(&td));
        c.put("out", "tree", f32_tensor(&buf.tree()?));
        c.put("out", "ctl", u32_tensor(&ctl_words(&buf.ctl()?)));
        push("per_update_priorities", c);
    }

    std::fs::create_dir_all(dir).map_err(|e| Error::Io { what: format!("creating {}", dir.display()), err: e })?;
    let mut kernels = BTreeMap::new();
    for (kernel, list) in &calls {
        let mut named: Vec<(String, &Tensor)> = Vec::new();
        for (i, call) in list.iter().enumerate() {
            named.extend(call.tensors.iter().map(|(k, t)| (format!("{i}/{k}"), t)));
        }
        let bytes = safetensors::serialize(named, &None).map_err(|e| Error::Fixture(format!("{kernel}: {e}")))?;
        let file = format!("{kernel}.safetensors");
        write(&dir.join(&file), &bytes)?;
        let sha256 = kernel_source(kernel)?.sha256.to_string();
        kernels.insert(kernel.to_string(), KernelEntry { sha256, file, calls: list.len() });
    }
    let manifest = Manifest {
        format: 1,
        seed: cfg.seed,
        config: cfg,
        device: gpu.name(),
        driver: gpu.driver_version(),
        arch: gpu.arch().to_string(),
        kernels,
    };
    let json = serde_json::to_string_pretty(&manifest).map_err(|e| Error::Fixture(e.to_string()))?;
    write(&dir.join("manifest.json"), format!("{json}\n").as_bytes())?;
    Ok(manifest)
}

/// Write through a temporary file and rename, so an interrupted record loses nothing.
fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| Error::Io { what: format!("writing {}", tmp.display()), err: e })?;
    std::fs::rename(&tmp, path).map_err(|e| Error::Io { what: format!("renaming to {}", path.display()), err: e })
}

// ---- check -----------------------------------------------------------------------------

pub fn load_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(|e| Error::Io {
        what: format!("reading {} (record fixtures with `tallyho fixtures record` on a GPU)", path.display()),
        err: e,
    })?;
    serde_json::from_str(&text).map_err(|e| Error::Fixture(format!("{} is not a fixture manifest: {e}", path.display())))
}

/// Refuse fixtures whose kernel source changed since they were recorded.
pub fn check_fresh(m: &Manifest) -> Result<()> {
    for (kernel, entry) in &m.kernels {
        let now = kernel_source(kernel)?.sha256;
        if now != entry.sha256 {
            return Err(Error::Fixture(format!(
                "stale: cuda/{kernel}.cu changed since fixtures/{} was recorded (recorded sha256 {}, now {}): \
                 re-record with `tallyho fixtures record` on a GPU, review with `cargo insta review`, commit",
                entry.file,
                &entry.sha256[..12.min(entry.sha256.len())],
                &now[..12]
            )));
        }
    }
    for k in KERNELS {
        if !m.kernels.contains_key(k) {
            return Err(Error::Fixture(format!("manifest has no entry for {k}: re-record with `tallyho fixtures record` on a GPU")));
        }
    }
    Ok(())
}

/// Which side replays the recorded inputs.
#[derive(Clone, Copy)]
pub enum Replayer<'g> {
    Oracle,
    Gpu(&'g Gpu),
}

/// Replay every recorded call and compare with the recorded outputs: through the oracle
/// with each kernel's declared tolerance, or through the kernels bitwise (same inputs, same
/// deterministic kernels). Returns (kernel, comparison) pairs.
pub fn check(dir: &Path, replayer: Replayer) -> Result<Vec<(String, Comparison)>> {
    let m = load_manifest(dir)?;
    check_fresh(&m)?;
    let mut out = Vec::new();
    for (kernel, entry) in &m.kernels {
        let path = dir.join(&entry.file);
        let bytes = std::fs::read(&path).map_err(|e| Error::Io { what: format!("reading {}", path.display()), err: e })?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| Error::Fixture(format!("{}: {e}", path.display())))?;
        for call in 0..entry.calls {
            let r = Recorded { kernel, call, st: &st };
            let comparisons = match replayer {
                Replayer::Oracle => replay_oracle(&r, &m.config)?,
                Replayer::Gpu(gpu) => replay_gpu(gpu, &r, &m.config)?,
            };
            out.extend(comparisons.into_iter().map(|c| (kernel.clone(), c)));
        }
    }
    Ok(out)
}

fn replay_oracle(r: &Recorded, cfg: &PerConfig) -> Result<Vec<Comparison>> {
    Ok(match r.kernel {
        "philox" => {
            let (c, k) = (r.u32("in", "counters")?, r.u32("in", "keys")?);
            let want: Vec<u32> = c
                .chunks_exact(4)
                .zip(k.chunks_exact(2))
                .flat_map(|(c, k)| philox::philox4x32_10([c[0], c[1], c[2], c[3]], [k[0], k[1]]))
                .collect();
            vec![compare_exact("words", &r.u32("out", "words")?, &want)]
        }
        "per_insert" => {
            let mut want = r.state("in", cfg)?;
            per::per_insert(&mut want, &r.transitions("in", "batch")?);
            compare_states(&r.state("out", cfg)?, &want)
        }
        "per_sample" => {
            let mut want = r.state("in", cfg)?;
            let s = per::per_sample(&mut want);
            vec![
                compare_exact("indices", &r.u32("out", "indices")?, &s.indices),
                compare_f32("weights", &r.f32("out", "weights")?, &s.weights, PER_IS_WEIGHT),
                compare_exact("ctl", &r.u32("out", "ctl")?, &ctl_words(&want.ctl)),
            ]
        }
        "per_gather" => {
            let st = r.state("in", cfg)?;
            compare_transitions(&r.transitions("out", "batch")?, &per::per_gather(&st, &valid_indices(r, cfg)?))
        }
        "per_update_priorities" => {
            let before = r.state("in", cfg)?;
            let (idx, td) = (valid_indices(r, cfg)?, r.f32("in", "td_abs")?);
            let mut want = before.clone();
            let p = per::per_update_priorities(&mut want, &idx, &td);
            let l = cfg.leaves();
            let mut want_leaves: Vec<f64> = before.tree[l..].iter().map(|&x| f64::from(x)).collect();
            for (&i, &pj) in idx.iter().zip(&p) {
                want_leaves[i as usize] = pj;
            }
            let got = r.f32("out", "tree")?;
            let mut rebuilt = got.clone();
            sum_tree_build(&mut rebuilt);
            let ctl = r.u32("out", "ctl")?;
            let want_max = p.iter().copied().fold(f64::from(before.ctl.max_priority), f64::max);
            vec![
                compare_f32("leaves", &got[l.min(got.len())..], &want_leaves, PER_PRIORITY),
                compare_bitwise("tree", &got, &rebuilt),
                compare_f32("max_priority", &[f32::from_bits(ctl[3])], &[want_max], PER_PRIORITY),
            ]
        }
        other => return Err(Error::Fixture(format!("no oracle replay for kernel {other}"))),
    })
}

fn valid_indices(r: &Recorded, cfg: &PerConfig) -> Result<Vec<u32>> {
    let idx = r.u32("in", "indices")?;
    if idx.len() != cfg.batch || idx.iter().any(|&i| i as usize >= cfg.capacity) {
        return Err(Error::Fixture(format!("{}: call {}: indices are not {} values below {}", r.kernel, r.call, cfg.batch, cfg.capacity)));
    }
    Ok(idx)
}

fn replay_gpu(gpu: &Gpu, r: &Recorded, cfg: &PerConfig) -> Result<Vec<Comparison>> {
    let mut buf = PerBuffer::new(gpu, cfg, cfg.capacity)?;
    Ok(match r.kernel {
        "philox" => {
            let (c, k) = (r.u32("in", "counters")?, r.u32("in", "keys")?);
            let counters: Vec<[u32; 4]> = c.chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]).collect();
            let keys: Vec<[u32; 2]> = k.chunks_exact(2).map(|k| [k[0], k[1]]).collect();
            let got: Vec<u32> = crate::philox::philox_kat(gpu, &counters, &keys)?.concat();
            vec![compare_exact("words", &got, &r.u32("out", "words")?)]
        }
        "per_insert" => {
            buf.upload_state(&r.state("in", cfg)?)?;
            buf.insert_host(&r.transitions("in", "batch")?)?;
            compare_states(&buf.download_state()?, &r.state("out", cfg)?)
        }
        "per_sample" => {
            buf.upload_state(&r.state("in", cfg)?)?;
            buf.poison_outputs()?;
            buf.sample()?;
            let (idx, w) = buf.read_sample()?;
            vec![
                compare_exact("indices", &idx, &r.u32("out", "indices")?),
                compare_bitwise("weights", &w, &r.f32("out", "weights")?),
                compare_exact("ctl", &ctl_words(&buf.ctl()?), &r.u32("out", "ctl")?),
            ]
        }
        "per_gather" => {
            buf.upload_state(&r.state("in", cfg)?)?;
            buf.poison_outputs()?;
            buf.set_indices(&valid_indices(r, cfg)?)?;
            buf.gather()?;
            compare_transitions(&buf.batch.download(&gpu.stream)?, &r.transitions("out", "batch")?)
        }
        "per_update_priorities" => {
            buf.upload_state(&r.state("in", cfg)?)?;
            buf.set_indices(&valid_indices(r, cfg)?)?;
            buf.update_priorities(&gpu.stream.clone_htod(&r.f32("in", "td_abs")?)?)?;
            vec![
                compare_bitwise("tree", &buf.tree()?, &r.f32("out", "tree")?),
                compare_exact("ctl", &ctl_words(&buf.ctl()?), &r.u32("out", "ctl")?),
            ]
        }
        other => return Err(Error::Fixture(format!("no GPU replay for kernel {other}"))),
    })
}

/// A reviewable, deterministic summary of the fixtures for insta: the manifest's kernels and
/// hashes, and per tensor its dtype, shape and content hash.
pub fn summary(dir: &Path) -> Result<String> {
    let m = load_manifest(dir)?;
    let mut s = format!("seed {} config {:?}\n", m.seed, m.config);
    for (kernel, entry) in &m.kernels {
        s += &format!("{kernel}: {} calls, source {}\n", entry.calls, &entry.sha256[..16.min(entry.sha256.len())]);
        let path = dir.join(&entry.file);
        let bytes = std::fs::read(&path).map_err(|e| Error::Io { what: format!("reading {}", path.display()), err: e })?;
        let st = SafeTensors::deserialize(&bytes).map_err(|e| Error::Fixture(format!("{}: {e}", path.display())))?;
        let mut names: Vec<String> = st.names().into_iter().cloned().collect();
        names.sort_by_key(|n| {
            let (call, rest) = n.split_once('/').unwrap_or(("0", n));
            (call.parse::<usize>().unwrap_or(0), rest.to_string())
        });
        for name in names {
            let v = st.tensor(&name).map_err(|e| Error::Fixture(e.to_string()))?;
            let hash: String = Sha256::digest(v.data()).iter().take(8).map(|b| format!("{b:02x}")).collect();
            s += &format!("  {name}: {:?} {:?} {hash}\n", v.dtype(), v.shape());
        }
    }
    Ok(s)
}
