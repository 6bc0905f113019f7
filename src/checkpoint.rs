//! Checkpoints: a training run's whole state after step k, one safetensors file
//! (`DIR/checkpoints/step-<k>.safetensors`, readable with `safetensors.numpy.load_file`),
//! from which `tallyho train --resume` continues exactly: the run resumed at k and run to n
//! ends with a checkpoint bitwise equal to the one of the run that went on.
//!
//! The state is the oracle trainer's ([`OracleTrainer`]; the CUDA trainer's is copied into
//! that form, so one format serves both backends). Tensors, each flat unless a shape is
//! given:
//!
//! | tensor | dtype | what |
//! |---|---|---|
//! | `online`, `target` | F32 | the two networks' parameters (the layout of `qnet::layout`) |
//! | `adam.m`, `adam.v` | F64 | Adam's moments (the CUDA trainer's f32 ones, widened exactly) |
//! | `adam.step` | U32 [1] | updates applied (the target-sync cadence and bias corrections) |
//! | `epsilon.step` | U32 [1] | the epsilon schedule's counter |
//! | `env.bar`, `env.steps`, `env.clock` | U32 [N] | bar, episode step, Philox clock of each env |
//! | `env.position` | I32 [N] | contracts held |
//! | `env.entry`, `env.realized`, `env.fees`, `env.equity` | F32 [N] | the accounts |
//! | `reward.prev_position` | I32 [N] | the reward pipeline's per-env state ... |
//! | `reward.steps_since_done` | U32 [N] | |
//! | `reward.outcome_ema`, `reward.dsr_a`, `reward.dsr_b` | F32 [N] | |
//! | `reward.global` | F32 [8] | ema_duration, ema_abs_pnl, ema_outcome, scale, hold_bonus, dispersion, dones, updates |
//! | `ring.states`, `ring.next_states` | F32 [n, N, S] | the n-step assembly's window |
//! | `ring.actions` | I32 [n, N, 3] | |
//! | `ring.rewards` | F32 [n, N] | |
//! | `ring.reasons` | I32 [n, N] | |
//! | `ring.counts` | U32 [N] | |
//! | `replay.states`, `replay.next_states` | F32 [size, S] | the replay's filled rows |
//! | `replay.actions` | I32 [size, 3] | |
//! | `replay.rewards`, `replay.discounts` | F32 [size] | |
//! | `replay.tree` | F32 | the priority sum tree |
//! | `replay.ctl` | U32 [3] | cursor, size, sample step (the Philox step and beta's clock) |
//! | `replay.max_priority` | F32 [1] | |
//!
//! The metadata holds one key, `tallyho`: JSON of [`Header`] (format and version, step,
//! backend, the market's identity and the whole config). Metric sums are not saved: a
//! checkpoint always closes a metrics window, so they are 0. The files are written
//! atomically and only the newest `run.keep_checkpoints` are kept.

use crate::error::{Error, Result};
use crate::tensor_file::{read, tensor, write_atomic, Element, Tensor};
use safetensors::tensor::SafeTensors;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tallyho_oracle::features::Market;
use tallyho_oracle::trainer::OracleTrainer;
use tallyho_oracle::TrainConfig;

/// The format's name and version; a file of another version is refused.
pub const FORMAT: &str = "tallyho-checkpoint";
pub const VERSION: u32 = 1;

/// The source a checkpoint records for the embedded synthetic market.
pub const SYNTHETIC: &str = "synthetic";

/// Which market a run trained on: where it came from and a digest of what the envs see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarketId {
    /// The `--data` path, or `synthetic` for the embedded default.
    pub source: String,
    pub bars: usize,
    pub feature_dim: usize,
    /// SHA-256 (hex) of the features and prices the envs read.
    pub digest: String,
}

impl MarketId {
    /// The `--data` path it came from; None for the embedded synthetic market.
    pub fn data(&self) -> Option<PathBuf> {
        (self.source != SYNTHETIC).then(|| PathBuf::from(&self.source))
    }

    pub fn of(market: &Market, source: &str) -> MarketId {
        let mut h = Sha256::new();
        for v in [
            &market.features,
            &market.close,
            &market.high,
            &market.low,
            &market.bid,
            &market.ask,
        ] {
            for x in v.iter() {
                h.update(x.to_le_bytes());
            }
        }
        MarketId {
            source: source.to_string(),
            bars: market.bars,
            feature_dim: market.feature_dim,
            digest: format!("{:x}", h.finalize()),
        }
    }
}

/// What a checkpoint says about itself (the metadata key `tallyho`, as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    /// Steps run when it was written.
    pub step: u64,
    /// The backend that wrote it (`cuda` or `cpu`).
    pub backend: String,
    pub market: MarketId,
    pub config: TrainConfig,
}

impl Header {
    /// The header of this version's checkpoint of a `backend` run of `config` on `market`
    /// (read from `source`) after `step` steps.
    pub fn new(
        step: u64,
        backend: &str,
        market: &Market,
        source: &str,
        config: &TrainConfig,
    ) -> Header {
        Header {
            format: FORMAT.into(),
            version: VERSION,
            step,
            backend: backend.into(),
            market: MarketId::of(market, source),
            config: config.clone(),
        }
    }
}

/// The bytes of the checkpoint of `o` after `header.step` steps.
pub fn serialize(header: &Header, o: &OracleTrainer) -> Result<Vec<u8>> {
    let named = tensors(o)?;
    let json = serde_json::to_string(header)
        .map_err(|e| Error::Checkpoint(format!("the checkpoint header: {e}")))?;
    let meta: HashMap<String, String> = [("tallyho".to_string(), json)].into();
    safetensors::serialize(named.iter().map(|(n, t)| (*n, t)), &Some(meta))
        .map_err(|e| Error::Checkpoint(format!("serialising the checkpoint: {e}")))
}

fn shaped(t: Tensor, shape: &[usize]) -> Tensor {
    Tensor {
        shape: shape.to_vec(),
        ..t
    }
}

fn tensors(o: &OracleTrainer) -> Result<Vec<(&'static str, Tensor)>> {
    let (n, s) = (o.env.len(), o.cfg.qnet.state_dim);
    let window = o.ring.cfg.n;
    let rows = o.replay.ctl.size as usize;
    let g = &o.reward_global;
    let st = &o.replay.store;
    let heads = o.cfg.qnet.branches.len();
    Ok(vec![
        ("online", tensor(&o.online)),
        ("target", tensor(&o.target)),
        ("adam.m", tensor(&o.adam.m)),
        ("adam.v", tensor(&o.adam.v)),
        ("adam.step", tensor(&[o.adam.step])),
        ("epsilon.step", tensor(&[o.epsilon_step])),
        ("env.bar", tensor(&o.env.bar)),
        ("env.steps", tensor(&o.env.steps)),
        ("env.clock", tensor(&o.env.clock)),
        ("env.position", tensor(&o.env.position)),
        ("env.entry", tensor(&o.env.entry)),
        ("env.realized", tensor(&o.env.realized)),
        ("env.fees", tensor(&o.env.fees)),
        ("env.equity", tensor(&o.env.equity)),
        ("reward.prev_position", tensor(&o.reward_envs.prev_position)),
        (
            "reward.steps_since_done",
            tensor(&o.reward_envs.steps_since_done),
        ),
        ("reward.outcome_ema", tensor(&o.reward_envs.outcome_ema)),
        ("reward.dsr_a", tensor(&o.reward_envs.dsr_a)),
        ("reward.dsr_b", tensor(&o.reward_envs.dsr_b)),
        (
            "reward.global",
            tensor(&[
                g.ema_duration,
                g.ema_abs_pnl,
                g.ema_outcome,
                g.scale,
                g.hold_bonus,
                g.dispersion,
                g.dones,
                g.updates,
            ]),
        ),
        (
            "ring.states",
            shaped(tensor(&o.ring.states), &[window, n, s]),
        ),
        (
            "ring.next_states",
            shaped(tensor(&o.ring.next_states), &[window, n, s]),
        ),
        (
            "ring.actions",
            shaped(tensor(&o.ring.actions), &[window, n, heads]),
        ),
        (
            "ring.rewards",
            shaped(tensor(&o.ring.rewards), &[window, n]),
        ),
        (
            "ring.reasons",
            shaped(tensor(&o.ring.reasons), &[window, n]),
        ),
        ("ring.counts", tensor(&o.ring.counts)),
        (
            "replay.states",
            shaped(tensor(prefix(&st.states, rows * s)?), &[rows, s]),
        ),
        (
            "replay.next_states",
            shaped(tensor(prefix(&st.next_states, rows * s)?), &[rows, s]),
        ),
        (
            "replay.actions",
            shaped(tensor(prefix(&st.actions, rows * heads)?), &[rows, heads]),
        ),
        ("replay.rewards", tensor(prefix(&st.rewards, rows)?)),
        ("replay.discounts", tensor(prefix(&st.discounts, rows)?)),
        ("replay.tree", tensor(&o.replay.tree)),
        (
            "replay.ctl",
            tensor(&[
                o.replay.ctl.cursor,
                o.replay.ctl.size,
                o.replay.ctl.sample_step,
            ]),
        ),
        ("replay.max_priority", tensor(&[o.replay.ctl.max_priority])),
    ])
}

fn prefix<T>(v: &[T], len: usize) -> Result<&[T]> {
    v.get(..len).ok_or_else(|| {
        Error::Checkpoint(format!(
            "the replay holds {} values where its size says {len}: the state is inconsistent",
            v.len()
        ))
    })
}

/// A checkpoint file, read.
pub struct Checkpoint {
    pub path: PathBuf,
    pub header: Header,
    bytes: Vec<u8>,
}

impl Checkpoint {
    /// Read `path` and its header, refusing a file of another format or version.
    pub fn read(path: &Path) -> Result<Checkpoint> {
        let bytes = std::fs::read(path).map_err(|err| Error::Io {
            what: format!("reading the checkpoint {}", path.display()),
            err,
        })?;
        let shown = path.display();
        let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| {
            Error::Checkpoint(format!(
                "{shown} is not a safetensors file ({e}; {} bytes): it was cut short or altered, or is not a checkpoint; point --resume (or tallyho eval) at a checkpoint of tallyho train (an older one of the run if this one is damaged)",
                bytes.len()
            ))
        })?;
        SafeTensors::deserialize(&bytes).map_err(|e| {
            Error::Checkpoint(format!(
                "{shown} is damaged ({e}; {} bytes): it was cut short or altered; resume from an older checkpoint of the run",
                bytes.len()
            ))
        })?;
        let json = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("tallyho"))
            .ok_or_else(|| {
                Error::Checkpoint(format!(
                    "{shown} has no tallyho header: it is not a checkpoint of tallyho train"
                ))
            })?;
        let header: Header = serde_json::from_str(json).map_err(|e| {
            Error::Checkpoint(format!(
                "{shown}: its header is not one this tallyho reads ({e}): resume it with the tallyho that wrote it"
            ))
        })?;
        if header.format != FORMAT || header.version != VERSION {
            return Err(Error::Checkpoint(format!(
                "{shown} is {} version {}; this tallyho reads {FORMAT} version {VERSION}: resume it with the tallyho that wrote it, or start a new run",
                header.format, header.version
            )));
        }
        header
            .config
            .validate(header.market.feature_dim)
            .map_err(|e| {
                Error::Checkpoint(format!(
                    "{shown}: its config is refused ({e}): the file is damaged or was edited; resume from another checkpoint of the run"
                ))
            })?;
        Ok(Checkpoint {
            path: path.to_path_buf(),
            header,
            bytes,
        })
    }

    /// The newest checkpoint of a run folder (`DIR/checkpoints/step-*.safetensors`), or the
    /// file itself.
    pub fn find(path: &Path) -> Result<PathBuf> {
        if path.is_file() {
            return Ok(path.to_path_buf());
        }
        let listed = list(&path.join("checkpoints"))?;
        listed.last().map(|(_, p)| p.clone()).ok_or_else(|| {
            Error::Checkpoint(format!(
                "{} holds no checkpoint (no checkpoints/step-*.safetensors): give a run folder of tallyho train or a checkpoint file",
                path.display()
            ))
        })
    }

    /// A trainer for `market` in this checkpoint's state; the market must be the one it
    /// trained on.
    pub fn trainer(&self, market: &Market, source: &str) -> Result<OracleTrainer> {
        let id = MarketId::of(market, source);
        let saved = &self.header.market;
        if (id.bars, id.feature_dim, &id.digest) != (saved.bars, saved.feature_dim, &saved.digest) {
            let short = |d: &str| d.chars().take(12).collect::<String>();
            return Err(Error::Checkpoint(format!(
                "{} trained on {} ({} bars, {} features, digest {}), not on {} ({} bars, {} features, digest {}): resume with --data {}",
                self.path.display(),
                saved.source,
                saved.bars,
                saved.feature_dim,
                short(&saved.digest),
                id.source,
                id.bars,
                id.feature_dim,
                short(&id.digest),
                saved.source
            )));
        }
        self.check_sizes()?;
        let mut o = OracleTrainer::new(&self.header.config, market)
            .map_err(|e| Error::Checkpoint(format!("{}: {e}", self.path.display())))?;
        self.restore_into(&mut o)?;
        Ok(o)
    }

    /// The parameters of the online network alone (evaluation needs no market check).
    pub fn online(&self) -> Result<Vec<f32>> {
        let st = self.tensors()?;
        self.get(
            &st,
            "online",
            tallyho_oracle::qnet::param_count(&self.header.config.qnet),
        )
    }

    fn tensors(&self) -> Result<SafeTensors<'_>> {
        SafeTensors::deserialize(&self.bytes).map_err(|e| {
            Error::Checkpoint(format!(
                "{} is damaged ({e}): resume from an older checkpoint of the run",
                self.path.display()
            ))
        })
    }

    /// The tensors whose lengths the config sets most of the state by (the networks, the
    /// envs, the replay's tree) hold the values the config says, checked before a trainer of
    /// that config is allocated: a damaged header cannot make it allocate the replay of
    /// another size.
    fn check_sizes(&self) -> Result<()> {
        let st = self.tensors()?;
        let cfg = &self.header.config;
        let sizes = [
            ("online", tallyho_oracle::qnet::param_count(&cfg.qnet), 4),
            ("env.bar", cfg.env.envs, 4),
            ("replay.tree", 2 * cfg.replay.leaves(), 4),
        ];
        for (name, len, size) in sizes {
            let found = st.tensor(name).map(|v| v.data().len() / size).map_err(|e| {
                Error::Checkpoint(format!(
                    "{}: tensor {name} is missing or unreadable ({e}): the file is damaged or not a checkpoint of tallyho train",
                    self.path.display()
                ))
            })?;
            if found != len {
                return Err(self.length_mismatch(name, found, len));
            }
        }
        Ok(())
    }

    fn length_mismatch(&self, name: &str, found: usize, len: usize) -> Error {
        Error::Checkpoint(format!(
            "{}: tensor {name} has {found} values, its config says {len}: the file is damaged or its header is of another run; resume from another checkpoint of the run",
            self.path.display()
        ))
    }

    fn get<T: Element>(&self, st: &SafeTensors, name: &str, len: usize) -> Result<Vec<T>> {
        let v: Vec<T> = read(st, name, &self.path.display().to_string()).map_err(|e| {
            Error::Checkpoint(format!(
                "{e}: the file is damaged or not a checkpoint of this tallyho; resume from another checkpoint of the run"
            ))
        })?;
        if v.len() != len {
            return Err(self.length_mismatch(name, v.len(), len));
        }
        Ok(v)
    }

    /// Fill `o` (a trainer of this checkpoint's config) with the saved state.
    fn restore_into(&self, o: &mut OracleTrainer) -> Result<()> {
        let st = self.tensors()?;
        o.online = self.get(&st, "online", o.online.len())?;
        o.target = self.get(&st, "target", o.target.len())?;
        o.adam.m = self.get(&st, "adam.m", o.adam.m.len())?;
        o.adam.v = self.get(&st, "adam.v", o.adam.v.len())?;
        o.adam.step = self.get::<u32>(&st, "adam.step", 1)?[0];
        o.epsilon_step = self.get::<u32>(&st, "epsilon.step", 1)?[0];
        let e = &mut o.env;
        let n = e.bar.len();
        e.bar = self.get(&st, "env.bar", n)?;
        e.steps = self.get(&st, "env.steps", n)?;
        e.clock = self.get(&st, "env.clock", n)?;
        e.position = self.get(&st, "env.position", n)?;
        e.entry = self.get(&st, "env.entry", n)?;
        e.realized = self.get(&st, "env.realized", n)?;
        e.fees = self.get(&st, "env.fees", n)?;
        e.equity = self.get(&st, "env.equity", n)?;
        let r = &mut o.reward_envs;
        r.prev_position = self.get(&st, "reward.prev_position", n)?;
        r.steps_since_done = self.get(&st, "reward.steps_since_done", n)?;
        r.outcome_ema = self.get(&st, "reward.outcome_ema", n)?;
        r.dsr_a = self.get(&st, "reward.dsr_a", n)?;
        r.dsr_b = self.get(&st, "reward.dsr_b", n)?;
        let g: Vec<f32> = self.get(&st, "reward.global", 8)?;
        let gl = &mut o.reward_global;
        (
            gl.ema_duration,
            gl.ema_abs_pnl,
            gl.ema_outcome,
            gl.scale,
            gl.hold_bonus,
            gl.dispersion,
            gl.dones,
            gl.updates,
        ) = (g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
        let ring = &mut o.ring;
        ring.states = self.get(&st, "ring.states", ring.states.len())?;
        ring.next_states = self.get(&st, "ring.next_states", ring.next_states.len())?;
        ring.actions = self.get(&st, "ring.actions", ring.actions.len())?;
        ring.rewards = self.get(&st, "ring.rewards", ring.rewards.len())?;
        ring.reasons = self.get(&st, "ring.reasons", ring.reasons.len())?;
        ring.counts = self.get(&st, "ring.counts", ring.counts.len())?;
        let ctl: Vec<u32> = self.get(&st, "replay.ctl", 3)?;
        let capacity = o.replay.cfg.capacity;
        let rows = ctl[1] as usize;
        if rows > capacity || ctl[0] as usize >= capacity.max(1) {
            return Err(Error::Checkpoint(format!(
                "{}: replay cursor {} / size {rows} do not fit its capacity {capacity}: the file is damaged",
                self.path.display(),
                ctl[0]
            )));
        }
        let (s, heads) = (o.cfg.qnet.state_dim, o.cfg.qnet.branches.len());
        let store = &mut o.replay.store;
        store.states[..rows * s].copy_from_slice(&self.get::<f32>(
            &st,
            "replay.states",
            rows * s,
        )?);
        store.next_states[..rows * s].copy_from_slice(&self.get::<f32>(
            &st,
            "replay.next_states",
            rows * s,
        )?);
        store.actions[..rows * heads].copy_from_slice(&self.get::<i32>(
            &st,
            "replay.actions",
            rows * heads,
        )?);
        store.rewards[..rows].copy_from_slice(&self.get::<f32>(&st, "replay.rewards", rows)?);
        store.discounts[..rows].copy_from_slice(&self.get::<f32>(&st, "replay.discounts", rows)?);
        o.replay.tree = self.get(&st, "replay.tree", o.replay.tree.len())?;
        (
            o.replay.ctl.cursor,
            o.replay.ctl.size,
            o.replay.ctl.sample_step,
        ) = (ctl[0], ctl[1], ctl[2]);
        o.replay.ctl.max_priority = self.get::<f32>(&st, "replay.max_priority", 1)?[0];
        Ok(())
    }
}

/// The checkpoints of `dir` (`step-<k>.safetensors`), oldest first; none if `dir` is absent.
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let step = name
            .to_str()
            .and_then(|n| n.strip_prefix("step-"))
            .and_then(|n| n.strip_suffix(".safetensors"))
            .and_then(|k| k.parse::<u64>().ok());
        if let Some(k) = step {
            out.push((k, path));
        }
    }
    out.sort();
    Ok(out)
}

/// Write the checkpoint of `o` after `header.step` steps into `dir` (atomically), then
/// remove all but the newest `keep`; returns its path.
pub fn write(dir: &Path, header: &Header, o: &OracleTrainer, keep: usize) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|err| Error::Io {
        what: format!("creating the checkpoint folder {}", dir.display()),
        err,
    })?;
    let path = dir.join(format!("step-{:010}.safetensors", header.step));
    write_atomic(&path, &serialize(header, o)?)?;
    let listed = list(dir)?;
    for (_, old) in listed.iter().take(listed.len().saturating_sub(keep.max(1))) {
        std::fs::remove_file(old).map_err(|err| Error::Io {
            what: format!("removing the old checkpoint {}", old.display()),
            err,
        })?;
    }
    Ok(path)
}
