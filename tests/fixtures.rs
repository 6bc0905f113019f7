//! The recorded GPU fixtures: the oracle reproduces them on every CI run (CPU), the kernels
//! reproduce them bitwise on a GPU, a changed kernel makes its fixture stale, and the
//! reviewable summary is an insta snapshot.

mod common;

use std::path::{Path, PathBuf};
use tallyho::harness::fixtures::{self, Replayer};

fn temp_copy_of_fixtures(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tallyho-fixtures-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixtures::default_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    dir
}

#[test]
fn recorded_fixtures_replay_through_the_oracle() {
    let pairs = fixtures::check(&fixtures::default_dir(), Replayer::Oracle)
        .unwrap_or_else(|e| panic!("{e}"));
    let comparisons: Vec<_> = pairs.iter().map(|(_, c)| c.clone()).collect();
    common::assert_all(&comparisons);
    for k in fixtures::kernels() {
        assert!(
            pairs.iter().any(|(kk, _)| kk == k),
            "no fixture replayed for {k}"
        );
    }
}

#[test]
fn fixture_summary_matches_its_snapshot() {
    let summary =
        fixtures::manifest::summary(&fixtures::default_dir()).unwrap_or_else(|e| panic!("{e}"));
    insta::with_settings!({ snapshot_path => fixtures::default_dir().join("snapshots") }, {
        insta::assert_snapshot!("fixture_summary", summary);
    });
}

#[test]
fn a_changed_kernel_source_makes_its_fixture_stale_with_the_command_to_re_record() {
    let dir = temp_copy_of_fixtures("stale");
    let path = dir.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    m["kernels"]["replay_sample"]["sha256"] = serde_json::Value::String("0".repeat(64));
    std::fs::write(&path, m.to_string()).unwrap();
    let err = fixtures::check(&dir, Replayer::Oracle)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("stale: cuda/replay_sample.cu changed"),
        "{err}"
    );
    assert!(
        err.contains("re-record with `tallyho fixtures record`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_tampered_fixture_output_fails_the_oracle_replay() {
    use safetensors::tensor::{SafeTensors, TensorView};
    let dir = temp_copy_of_fixtures("tampered");
    // Change one recorded sample index: the oracle replay must notice.
    let path = dir.join("replay_sample.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    let (_, _, _, data) = tensors
        .iter_mut()
        .find(|(n, ..)| n == "0/out/indices")
        .unwrap();
    let first = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
    data[..4].copy_from_slice(&((first + 1) % 96).to_le_bytes());
    let views: Vec<(String, TensorView)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(&path, safetensors::serialize(views, &None).unwrap()).unwrap();
    let pairs = fixtures::check(&dir, Replayer::Oracle).unwrap();
    let bad: Vec<_> = pairs.iter().filter(|(_, c)| !c.passed()).collect();
    assert_eq!(
        bad.len(),
        1,
        "exactly the tampered output must fail: {bad:?}"
    );
    assert_eq!(
        (bad[0].0.as_str(), bad[0].1.output.as_str()),
        ("replay_sample", "indices")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_fixture_folder_names_the_record_command() {
    let err = fixtures::check(Path::new("/nonexistent/fixtures"), Replayer::Oracle)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tallyho fixtures record"), "{err}");
}

mod gpu {
    use super::*;

    #[test]
    fn recorded_fixtures_replay_bitwise_through_the_kernels() {
        let gpu = common::gpu();
        let pairs = fixtures::check(&fixtures::default_dir(), Replayer::Gpu(&gpu))
            .unwrap_or_else(|e| panic!("{e}"));
        let comparisons: Vec<_> = pairs.iter().map(|(_, c)| c.clone()).collect();
        common::assert_all(&comparisons);
    }
}
