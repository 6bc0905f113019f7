//! qnet_act's plan against the oracle: every parameter staged once where the forward uses
//! it, the aligned feed's copies in bounds, the default network's fit.

use super::*;
use crate::qnet::{head_matrix_index, heads_of};
use tallyho_oracle::qnet as spec;

/// The staged column of padded column `pc` that qnet_act writes out (past a segment's
/// lead, inside its width): (segment, staged column).
fn written(layer: &ActLayer, pc: usize) -> Option<(ActSegment, usize)> {
    let seg = layer.segment_of(pc);
    let local = pc.checked_sub(seg.pcol0 as usize)?;
    (pc < layer.pwidth as usize && local >= seg.lead as usize && local < seg.width as usize)
        .then_some((seg, local))
}

/// The weight of written padded column `pc` at input row `k` as qnet_act stages it: its
/// index in the layer's source, None for a zero-filled copy.
fn staged_index(layer: &ActLayer, pc: usize, k: usize) -> Option<usize> {
    let (seg, local) = written(layer, pc)?;
    (k < seg.fan_in as usize).then(|| seg.w as usize + k * seg.ld as usize + local)
}

/// The layers' sources as qnet_act reads them: the flat parameters (trunk) and the dense
/// head matrix qnet_head_matrix_scatter builds from them (heads' outputs), and for each dense
/// position the parameter it holds.
fn sources(cfg: &QNetConfig, params: &[f32]) -> (Vec<f32>, Vec<Option<usize>>) {
    let d = Dims::of(cfg, 1);
    let wv2 = spec::tensor(cfg, "wv2").unwrap().offset;
    let (mut dense, mut owner) = (vec![0.0; (d.hw + 1) * d.ow], vec![None; (d.hw + 1) * d.ow]);
    for (e, &pos) in head_matrix_index(cfg).iter().enumerate() {
        dense[pos as usize] = params[wv2 + e];
        owner[pos as usize] = Some(wv2 + e);
    }
    (dense, owner)
}

/// The forward as qnet_act computes it from its sources (its segments, slices, zero
/// fills, leads and biases), in f64: the head-output rows with their bias.
fn staged_forward(cfg: &QNetConfig, params: &[f32], states: &[f32]) -> Vec<f64> {
    let d = Dims::of(cfg, 1);
    let layers = layers_of(cfg, d, &heads_of(cfg)).unwrap();
    let widths = [d.h1, d.h2, d.hw, d.ow];
    let (dense, _) = sources(cfg, params);
    let mut act: Vec<Vec<f64>> = states
        .chunks_exact(d.s)
        .map(|r| r.iter().map(|&v| f64::from(v)).collect())
        .collect();
    for (l, (layer, &width)) in layers.iter().zip(&widths).enumerate() {
        let src = |i: usize| f64::from(if l == 3 { dense[i] } else { params[i] });
        act = act
            .iter()
            .map(|x| {
                let mut out = vec![0.0; width];
                for pc in 0..layer.passes() * COLS {
                    let Some((seg, local)) = written(layer, pc) else {
                        continue;
                    };
                    let mut sum = src(seg.bias as usize + local);
                    for k in 0..layer.slices as usize * KT {
                        // Past the layer's input: a finite value the zero weight cancels.
                        let xin = x.get(seg.x_off as usize + k).copied().unwrap_or(7.0);
                        sum += xin * staged_index(layer, pc, k).map_or(0.0, src);
                    }
                    out[seg.col0 as usize + local] = if l < 3 { sum.max(0.0) } else { sum };
                }
                out
            })
            .collect();
    }
    act.concat()
}

#[test]
fn qnet_act_stages_every_parameter_once_where_the_oracle_uses_it() {
    let small = QNetConfig {
        state_dim: 6,
        h1: 16,
        h2: 12,
        value_hidden: 8,
        adv_hidden: 6,
        atoms: 11,
        ..QNetConfig::default()
    };
    let odd = QNetConfig {
        state_dim: 31,
        h1: 37,
        h2: 300,
        value_hidden: 13,
        adv_hidden: 29,
        branches: vec![4, 1],
        atoms: 7,
        ..QNetConfig::default()
    };
    for cfg in [QNetConfig::default(), small, odd] {
        let params = spec::init_params(&cfg);
        let d = Dims::of(&cfg, 1);
        let layers = layers_of(&cfg, d, &heads_of(&cfg)).unwrap();
        let (_, owner) = sources(&cfg, &params);
        // The parameter a staged weight holds: itself (trunk), or the dense position's
        // (heads' outputs; None off the blocks, where the matrix holds zeros: the rows
        // staged before a head's first, for alignment).
        let param = |l: usize, i: usize| if l == 3 { owner[i] } else { Some(i) };
        let mut seen = vec![0u32; params.len()];
        for (l, layer) in layers.iter().enumerate() {
            for pc in 0..layer.passes() * COLS {
                for k in 0..layer.slices as usize * KT {
                    if let Some(p) = staged_index(layer, pc, k).and_then(|i| param(l, i)) {
                        seen[p] += 1;
                    }
                }
                if let Some((seg, local)) = written(layer, pc) {
                    seen[param(l, seg.bias as usize + local)
                        .expect("the bias row is on the blocks")] += 1;
                }
            }
            // A segment's warps never straddle two segments, its inputs start a block of
            // 8, and 16-byte copies start aligned.
            assert!(
                layer
                    .segments()
                    .iter()
                    .all(|s| s.pcol0 as usize % WARP_COLS == 0 && s.x_off % 8 == 0),
                "{cfg:?}"
            );
            assert!(
                layer.vec4 == 0
                    || layer
                        .segments()
                        .iter()
                        .all(|s| s.w % 4 == 0 && s.ld % 4 == 0),
                "{cfg:?}"
            );
        }
        assert!(
            seen.iter().all(|&n| n == 1),
            "{cfg:?}: a parameter staged {:?} times",
            seen.iter().find(|&&n| n != 1)
        );
        let states: Vec<f32> = (0..3 * cfg.state_dim)
            .map(|i| ((i * 7919) % 13) as f32 / 6.0 - 1.0)
            .collect();
        let want = spec::head_rows(&cfg, &spec::forward(&cfg, &params, &states));
        let got = staged_forward(&cfg, &params, &states);
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
                "{cfg:?}: {g} vs {w}"
            );
        }
    }
}

#[test]
fn the_default_network_fits_32_row_blocks_in_the_h200s_shared_memory() {
    let cfg = QNetConfig::default();
    let d = Dims::of(&cfg, 1);
    let layers = layers_of(&cfg, d, &heads_of(&cfg)).unwrap();
    // 227 KiB: the opt-in shared memory per block of sm_90.
    let smem = Plan::of(d, &layers, 32).smem;
    assert!(smem <= 227 * 1024, "{smem} bytes");
}

/// The aligned feed's copies of the pass at p0, as runs: (segment, padded columns [lo,
/// hi)), a segment's chunks of 4 from its first up to its width rounded up to 4.
fn aligned_runs(layer: &ActLayer, p0: usize) -> Vec<(ActSegment, usize, usize)> {
    let piece = |s: &ActSegment| {
        (s.pcol0 as usize).max(p0)
            ..(s.pcol0 as usize + (s.width as usize).next_multiple_of(4)).min(p0 + COLS)
    };
    layer
        .segments()
        .iter()
        .map(|s| (*s, piece(s)))
        .filter(|(_, r)| !r.is_empty())
        .map(|(s, r)| (s, r.start, r.end))
        .collect()
}

#[test]
fn the_aligned_feed_copies_whole_16_byte_chunks_in_bounds_covering_every_written_column() {
    let aligned = QNetConfig {
        state_dim: 7,
        h1: 36,
        h2: 300,
        value_hidden: 12,
        adv_hidden: 20,
        branches: vec![3, 2, 2],
        atoms: 51,
        ..QNetConfig::default()
    };
    let scalar = QNetConfig {
        state_dim: 5,
        h1: 8,
        h2: 16,
        value_hidden: 4,
        adv_hidden: 8,
        branches: vec![3],
        atoms: 4,
        ..QNetConfig::default()
    };
    for cfg in [QNetConfig::default(), aligned, scalar] {
        let d = Dims::of(&cfg, 1);
        let layers = layers_of(&cfg, d, &heads_of(&cfg)).unwrap();
        assert!(aligned_fits(&layers, source_lens(d)), "{cfg:?}");
        for (l, layer) in layers.iter().enumerate() {
            let len = source_lens(d)[l];
            for p0 in (0..layer.passes()).map(|p| p * COLS) {
                let pieces = aligned_runs(layer, p0);
                for &(s, lo, hi) in &pieces {
                    // 16-byte source and destination, in bounds on the segment's last row.
                    let first = s.w as usize + (lo - s.pcol0 as usize);
                    assert!(
                        first % 4 == 0
                            && (lo - p0) % 4 == 0
                            && (hi - lo) % 4 == 0
                            && STAGE_LD % 4 == 0,
                        "{cfg:?} layer {l}"
                    );
                    assert!(
                        first + (s.fan_in as usize - 1) * s.ld as usize + (hi - lo) <= len,
                        "{cfg:?} layer {l}: past the source"
                    );
                }
                // Every written column of the pass is in its own segment's piece.
                for pc in p0..p0 + COLS {
                    if let Some((seg, _)) = written(layer, pc) {
                        assert!(
                            pieces
                                .iter()
                                .any(|&(s, lo, hi)| s.pcol0 == seg.pcol0 && (lo..hi).contains(&pc)),
                            "{cfg:?} layer {l} column {pc}"
                        );
                    }
                }
            }
        }
    }
    // Rows of 4-byte alignment (a state width of 31 feeding 37 columns) take the general feed.
    let odd = QNetConfig {
        state_dim: 31,
        h1: 37,
        h2: 300,
        value_hidden: 13,
        adv_hidden: 29,
        branches: vec![4, 1],
        atoms: 7,
        ..QNetConfig::default()
    };
    let d = Dims::of(&odd, 1);
    assert!(!aligned_fits(
        &layers_of(&odd, d, &heads_of(&odd)).unwrap(),
        source_lens(d)
    ));
}

#[test]
fn the_default_network_stages_every_layer_with_16_byte_copies() {
    let cfg = QNetConfig::default();
    let d = Dims::of(&cfg, 1);
    let layers = layers_of(&cfg, d, &heads_of(&cfg)).unwrap();
    for (l, layer) in layers.iter().enumerate() {
        assert_eq!(layer.vec4, 1, "layer {l}: {:?}", layer.segments());
    }
}
