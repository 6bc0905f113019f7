//! The shared reference data folder (`random123-kat/`, `lean-es-minute-2013-10/`, ...),
//! resolved at run time: `$TALLYHO_SHARED_DATA` when set, else the `shared/data` beside the
//! checkout, found by walking up from the run-time `CARGO_MANIFEST_DIR`. Cargo and nextest
//! set that variable when they run a test (nextest also when it runs an archive with
//! `--workspace-remap`), so a test binary built in one folder finds the data from wherever
//! it runs; a path compiled in (`env!`) would not.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The variable that overrides the search.
pub const ENV_VAR: &str = "TALLYHO_SHARED_DATA";

/// Why the shared data folder was not found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SharedDataError {
    #[error("TALLYHO_SHARED_DATA = {} is not a folder: set it to the shared data folder (the one holding random123-kat/)", path.display())]
    NotAFolder { path: PathBuf },
    #[error("CARGO_MANIFEST_DIR is not set, so there is no checkout to search from (cargo and nextest set it when they run tests): set TALLYHO_SHARED_DATA to the shared data folder")]
    NoManifestDir,
    #[error("no shared/data folder beside the checkout: tried {}: set TALLYHO_SHARED_DATA to the shared data folder", tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NotFound { tried: Vec<PathBuf> },
}

/// The shared data folder: `$TALLYHO_SHARED_DATA` if set (it must be a folder), else the
/// first `A/shared/data` that is a folder, for A = the run-time `$CARGO_MANIFEST_DIR` and each
/// of its ancestors in turn (for a crate of the checkout `X/tallyho`, that is `X/shared/data`).
pub fn dir() -> Result<PathBuf, SharedDataError> {
    resolve(
        std::env::var_os(ENV_VAR),
        std::env::var_os("CARGO_MANIFEST_DIR"),
    )
}

/// [`dir`] with the two variables given: `shared` for `$TALLYHO_SHARED_DATA`, `manifest_dir`
/// for `$CARGO_MANIFEST_DIR`.
pub fn resolve(
    shared: Option<OsString>,
    manifest_dir: Option<OsString>,
) -> Result<PathBuf, SharedDataError> {
    if let Some(path) = shared {
        let path = PathBuf::from(path);
        return if path.is_dir() {
            Ok(path)
        } else {
            Err(SharedDataError::NotAFolder { path })
        };
    }
    let start = manifest_dir.ok_or(SharedDataError::NoManifestDir)?;
    beside(Path::new(&start))
}

/// The first `A/shared/data` that is a folder, for A = `start` and each of its ancestors.
pub fn beside(start: &Path) -> Result<PathBuf, SharedDataError> {
    let mut tried = Vec::new();
    for a in start.ancestors() {
        let candidate = a.join("shared").join("data");
        if candidate.is_dir() {
            return Ok(candidate);
        }
        tried.push(candidate);
    }
    Err(SharedDataError::NotFound { tried })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh, empty folder under the system temp dir, unique per test and process.
    fn scratch(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tallyho-oracle-shared-data-{test}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_data_beside_the_checkout_is_found_from_a_crate_inside_it() {
        let root = scratch("beside");
        let data = root.join("shared").join("data");
        let krate = root.join("checkout").join("oracle");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(&krate).unwrap();
        assert_eq!(resolve(None, Some(krate.into_os_string())).unwrap(), data);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_variable_wins_and_must_name_a_folder() {
        let root = scratch("variable");
        assert_eq!(
            resolve(Some(root.clone().into_os_string()), None).unwrap(),
            root
        );
        let missing = root.join("missing");
        let err = resolve(Some(missing.clone().into_os_string()), None).unwrap_err();
        assert_eq!(err, SharedDataError::NotAFolder { path: missing });
        assert!(
            err.to_string().contains("set it to the shared data folder"),
            "{err}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_failed_search_names_every_folder_tried_and_the_fix() {
        let root = scratch("not-found");
        let krate = root.join("a").join("b");
        std::fs::create_dir_all(&krate).unwrap();
        match beside(&krate) {
            Err(SharedDataError::NotFound { tried }) => {
                assert_eq!(tried[0], krate.join("shared").join("data"));
                assert_eq!(tried[1], root.join("a").join("shared").join("data"));
                let msg = SharedDataError::NotFound { tried }.to_string();
                assert!(
                    msg.starts_with("no shared/data folder beside the checkout: tried "),
                    "{msg}"
                );
                assert!(
                    msg.ends_with(": set TALLYHO_SHARED_DATA to the shared data folder"),
                    "{msg}"
                );
            }
            // A shared/data above the system temp dir would end the search early.
            other => assert!(other.is_ok(), "{other:?}"),
        }
        let err = resolve(None, None).unwrap_err();
        assert_eq!(err, SharedDataError::NoManifestDir);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn this_checkout_finds_its_shared_data() {
        // Cargo and nextest set CARGO_MANIFEST_DIR for the test process.
        if std::env::var_os(ENV_VAR).is_none() {
            let d = dir().unwrap();
            assert!(d.ends_with("shared/data"), "{}", d.display());
        }
    }
}
