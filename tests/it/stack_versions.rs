//! Which Prometheus and Alertmanager the signal tests ran against. The
//! default run must be on the releases users run today (Prometheus 3.x,
//! Alertmanager 0.3x, built by testenv/prometheus.sh); scripts/test runs the
//! signal tests once more on Debian's 2.42/0.25 and says so through
//! `REMEDY_EXPECT_PROMETHEUS` and `REMEDY_EXPECT_ALERTMANAGER`. A run that
//! silently fell back to another binary fails here.

use crate::support::procs::{alertmanager_bin, prometheus_bin, promtool_bin, require_binary};
use std::process::Command;

/// "3.16.0" from "prometheus, version 3.16.0 (branch: ...)".
fn version_of(bin: &str) -> String {
    require_binary(bin, "run `bash testenv/prometheus.sh`");
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{bin} --version: {e}"));
    // Prometheus and promtool print it on stdout, Alertmanager 0.25 on stderr.
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)
        .unwrap_or_else(|| panic!("no version in {bin} --version: {text}"))
        .to_string()
}

fn expect(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

#[test]
fn the_signal_tests_run_the_intended_prometheus_and_alertmanager() {
    let prometheus = expect("REMEDY_EXPECT_PROMETHEUS", "3.");
    let alertmanager = expect("REMEDY_EXPECT_ALERTMANAGER", "0.3");
    for (bin, want) in [
        (prometheus_bin(), &prometheus),
        (promtool_bin(), &prometheus),
        (alertmanager_bin(), &alertmanager),
    ] {
        let got = version_of(&bin);
        assert!(
            got.starts_with(want.as_str()),
            "{bin} is version {got}, not {want}*"
        );
        eprintln!("{bin}: {got}");
    }
}
