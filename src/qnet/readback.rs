//! Verification read-back: the stage buffers a test or fixture replay loads and reads
//! (never on the hot path: each call copies and synchronises).

use super::*;

/// What the forward left on the device for one network, read back (tests, `verify`).
#[derive(Clone, Debug, PartialEq)]
pub struct ForwardOut {
    /// 2B x h1, rows s then s'.
    pub h1: Vec<f32>,
    pub h2: Vec<f32>,
    /// 2B x H.
    pub heads_hidden: Vec<f32>,
    /// 2B x O: the head-output rows (the GEMMs, before qnet_head adds the bias), value then
    /// each branch.
    pub y: Vec<f32>,
    /// 2B x (sum n_k NA), branch-major per row.
    pub logits: Vec<f32>,
    /// As logits; empty when NA = 1.
    pub log_probs: Vec<f32>,
    pub probs: Vec<f32>,
    /// 2B x (sum n_k).
    pub q: Vec<f32>,
}

/// What the loss left on the device, read back.
#[derive(Clone, Debug, PartialEq)]
pub struct LossOut {
    pub loss: f64,
    pub sample_loss: Vec<f64>,
    pub priorities: Vec<f32>,
    /// B x K.
    pub next_actions: Vec<i32>,
    /// B x (NA (1 + sum n_k)): the head-output gradient.
    pub head_grad: Vec<f32>,
}

impl QNet {
    /// Overwrite `a`'s head-output rows (`N x ow`, without bias), so that a fixture replay
    /// can run [`QNet::act_head`] on recorded inputs.
    pub fn load_acting_outputs(&self, a: &mut Acting, y: &[f32]) -> Result<()> {
        self.check_len("acting head outputs", y.len(), a.rows * self.d.ow)?;
        Ok(self.stream.memcpy_htod(y, &mut a.y)?)
    }

    /// The Q-values of the last [`QNet::act`].
    pub fn read_acting(&self, a: &Acting) -> Result<Vec<f32>> {
        Ok(self.stream.clone_dtoh(&a.q)?)
    }

    /// The head-output rows (`N x ow`, before the bias the head adds) of the last
    /// [`QNet::act`].
    pub fn read_acting_outputs(&self, a: &Acting) -> Result<Vec<f32>> {
        if !a.outputs {
            return Err(Error::Shape(
                "these activations act for Q only (Acting::q_only): make them with QNet::acting"
                    .into(),
            ));
        }
        Ok(self.stream.clone_dtoh(&a.y)?)
    }

    /// Read one network's forward outputs (`net` 0 online, 1 target).
    pub fn read_forward(&self, net: usize) -> Result<ForwardOut> {
        if net >= NETS {
            return Err(Error::Shape(format!(
                "network {net}: 0 is the online network, 1 the target"
            )));
        }
        let d = self.d;
        let r = d.rows;
        let s = &self.stream;
        let strip = |buf: &CudaSlice<f32>, width: usize, ld: usize| -> Result<Vec<f32>> {
            let all = s.clone_dtoh(&buf.slice(net * r * ld..(net + 1) * r * ld))?;
            Ok(all
                .chunks_exact(ld)
                .flat_map(|row| row[..width].iter().copied())
                .collect())
        };
        let c51 = d.na > 1;
        Ok(ForwardOut {
            h1: strip(&self.a1, d.h1, d.h1 + 1)?,
            h2: strip(&self.a2, d.h2, d.h2 + 1)?,
            heads_hidden: strip(&self.ah, d.hw, d.hw + 1)?,
            y: strip(&self.y, d.ow, d.ow)?,
            logits: strip(&self.logits, d.lw, d.lw)?,
            log_probs: if c51 {
                strip(&self.log_probs, d.lw, d.lw)?
            } else {
                Vec::new()
            },
            probs: if c51 {
                strip(&self.probs, d.lw, d.lw)?
            } else {
                Vec::new()
            },
            q: strip(&self.q, d.qw, d.qw)?,
        })
    }

    /// Overwrite one stage buffer of network `net` with `data` (all 2B rows of that
    /// network; for `Buffer::Input` and `Buffer::HeadGrad`, which are shared, `net` must be
    /// 0): fixture replays feed a stage its recorded inputs this way. Activations keep their
    /// ones column.
    pub fn load(&mut self, buffer: Buffer, net: usize, data: &[f32]) -> Result<()> {
        let d = self.d;
        let shared = matches!(buffer, Buffer::Input | Buffer::HeadGrad);
        if net >= NETS || (shared && net != 0) {
            return Err(Error::Shape(format!(
                "load {buffer:?} into network {net}: 0 is online, 1 target; shared buffers take 0"
            )));
        }
        let (buf, width, ones, rows) = match buffer {
            Buffer::Input => (&mut self.x, d.s, true, d.rows),
            Buffer::H1 => (&mut self.a1, d.h1, true, d.rows),
            Buffer::H2 => (&mut self.a2, d.h2, true, d.rows),
            Buffer::HeadsHidden => (&mut self.ah, d.hw, true, d.rows),
            Buffer::HeadOutputs => (&mut self.y, d.ow, false, d.rows),
            Buffer::LogProbs => (&mut self.log_probs, d.lw, false, d.rows),
            Buffer::Probs => (&mut self.probs, d.lw, false, d.rows),
            Buffer::Q => (&mut self.q, d.qw, false, d.rows),
            Buffer::HeadGrad => (&mut self.dy, d.ow, false, d.b),
        };
        if data.len() != rows * width {
            return Err(Error::Shape(format!(
                "load {buffer:?}: {} values, expected {rows} rows x {width}",
                data.len()
            )));
        }
        let ld = width + usize::from(ones);
        let mut rowed = Vec::with_capacity(rows * ld);
        for row in data.chunks_exact(width) {
            rowed.extend_from_slice(row);
            if ones {
                rowed.push(1.0);
            }
        }
        let at = net * rows * ld;
        self.stream
            .memcpy_htod(&rowed, &mut buf.slice_mut(at..at + rows * ld))?;
        Ok(())
    }

    pub fn read_loss(&self) -> Result<LossOut> {
        let s = &self.stream;
        Ok(LossOut {
            loss: s.clone_dtoh(&self.loss)?[0],
            sample_loss: s.clone_dtoh(&self.sample_loss)?,
            priorities: s.clone_dtoh(&self.priorities)?,
            next_actions: s.clone_dtoh(&self.next_actions)?,
            head_grad: s.clone_dtoh(&self.dy)?,
        })
    }

    /// Fill every output buffer with NaN (ints with -1), so a check can see that a launch
    /// wrote every element.
    pub fn poison_outputs(&mut self) -> Result<()> {
        let s = self.stream.clone();
        let (d, all) = (self.d, NETS * self.d.rows);
        // The activations' ones columns are constants of the layout (set at allocation,
        // rewritten by `load`), not outputs: they keep their ones.
        for (buf, width, rows) in [
            (&mut self.a1, d.h1, all),
            (&mut self.a2, d.h2, all),
            (&mut self.ah, d.hw, all),
            (&mut self.x, d.s, d.rows),
        ] {
            s.memcpy_htod(&with_ones(rows, width, f32::NAN), buf)?;
        }
        for buf in [
            &mut self.y,
            &mut self.logits,
            &mut self.log_probs,
            &mut self.probs,
            &mut self.q,
            &mut self.priorities,
            &mut self.dy,
            &mut self.dhh,
            &mut self.dh2,
            &mut self.dh1,
            &mut self.grads,
        ] {
            let nan = vec![f32::NAN; buf.len()];
            s.memcpy_htod(&nan, buf)?;
        }
        s.memcpy_htod(
            &vec![-1i32; self.next_actions.len()],
            &mut self.next_actions,
        )?;
        s.memcpy_htod(
            &vec![f64::NAN; self.sample_loss.len()],
            &mut self.sample_loss,
        )?;
        s.memcpy_htod(&[f64::NAN], &mut self.loss)?;
        Ok(())
    }
}
