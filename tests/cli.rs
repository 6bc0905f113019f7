//! The command line: exit codes and error messages a user sees.

use std::process::Command;

/// The binary under test: nextest names it at run time (also in an archive run elsewhere).
fn tallyho(args: &[&str]) -> (bool, String, String) {
    let bin = std::env::var_os("NEXTEST_BIN_EXE_tallyho")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_tallyho").into());
    let out = Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {bin:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fixtures_check_passes_on_the_committed_fixtures() {
    let (ok, stdout, stderr) = tallyho(&["fixtures", "check"]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("reproduce the recorded GPU results"),
        "{stdout}"
    );
}

#[test]
fn fixtures_check_of_a_missing_folder_fails_and_names_the_fix() {
    let (ok, _, stderr) = tallyho(&["fixtures", "check", "--dir", "/nonexistent/fixtures"]);
    assert!(!ok);
    assert!(stderr.contains("tallyho fixtures record"), "{stderr}");
}

#[test]
fn verify_with_zero_cases_is_refused() {
    let (ok, _, stderr) = tallyho(&["verify", "--cases", "0"]);
    assert!(!ok);
    assert!(stderr.contains("--cases 0 checks nothing"), "{stderr}");
}

#[test]
fn kernels_command_compiles_every_kernel_for_sm90() {
    let (ok, stdout, stderr) = tallyho(&["kernels", "--arch", "sm_90"]);
    assert!(ok, "{stderr}");
    for k in tallyho::runtime::KERNELS {
        assert!(
            stdout.contains(&format!("compiled cuda/{}.cu for sm_90", k.name)),
            "{stdout}"
        );
    }
}

mod gpu {
    use super::*;

    #[test]
    fn verify_prints_a_passing_parity_table() {
        let (ok, stdout, stderr) = tallyho(&["verify", "--cases", "3"]);
        assert!(ok, "{stdout}\n{stderr}");
        for k in [
            "philox",
            "replay_insert",
            "replay_sample",
            "replay_gather",
            "replay_update_priorities",
        ] {
            assert!(stdout.contains(k), "{k} missing from:\n{stdout}");
        }
        assert!(
            stdout.contains("kernel outputs within tolerance"),
            "{stdout}"
        );
    }
}
