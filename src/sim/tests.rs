use super::*;
use clap::Parser;

/// One fifth of the default fleet with one fifth of the API quota (the same
/// pressure per call), a 15 min outage, then 1 h: fast in debug builds.
fn reduced(mode: Mode) -> Scenario {
    Scenario {
        resources: 2000,
        controllers: 10,
        api_limit: 20,
        outage: Duration::from_secs(15 * 60),
        after: Duration::from_secs(3600),
        ..Scenario::default_for(mode)
    }
}

fn by_name<'a>(reports: &'a [PolicyReport], name: &str) -> &'a PolicyReport {
    reports
        .iter()
        .find(|r| r.policy == name)
        .unwrap_or_else(|| panic!("no report for {name}"))
}

/// Correlated outage: remedy holds the zone, probes it, and releases it
/// as soon as it answers. The only calls above the limit are the
/// provider's own requeues in the seconds before the breaker opens.
fn assert_correlated(s: &Scenario) {
    let reports = run(s).expect("valid scenario");
    let remedy = by_name(&reports, "remedy");
    let client_go = by_name(&reports, "client-go default");
    assert!(
        remedy.calls_outage * 8 <= client_go.calls_outage,
        "remedy {} calls vs client-go {}",
        remedy.calls_outage,
        client_go.calls_outage
    );
    assert!(
        remedy.above_limit * 100 <= client_go.above_limit,
        "{} calls above the limit vs client-go {}",
        remedy.above_limit,
        client_go.above_limit
    );
    let t100 = remedy.t100_ms.expect("remedy recovers everyone");
    assert!(t100 <= 180_000, "100% after {t100} ms");
    assert!(remedy.healthy > 0, "the scenario has healthy resources");
    assert!(remedy.failing_at_end > 0, "the outage held resources");
}

/// Random outage (every call fails with p = 0.6): releases keep going at
/// an adaptive pace, so remedy ends the outage with at most twice
/// client-go's failing resources, with fewer calls and fewer above the
/// limit. (Ten times fewer calls cannot be had here: see
/// docs/simulation.md.)
fn assert_random(s: &Scenario) {
    let reports = run(s).expect("valid scenario");
    let remedy = by_name(&reports, "remedy");
    let client_go = by_name(&reports, "client-go default");
    assert!(
        remedy.failing_at_end <= 2 * client_go.failing_at_end.max(1),
        "failing at end: remedy {} vs client-go {}",
        remedy.failing_at_end,
        client_go.failing_at_end
    );
    assert!(remedy.calls_outage < client_go.calls_outage);
    // The pace remembers where the 429s began and saws below it instead
    // of doubling past it again.
    assert!(
        remedy.above_limit * 8 <= client_go.above_limit,
        "{} calls above the limit vs client-go {}",
        remedy.above_limit,
        client_go.above_limit
    );
    assert!(remedy.t100_ms.is_some(), "remedy recovers everyone");
}

#[test]
fn remedy_meets_the_targets_correlated() {
    assert_correlated(&reduced(Mode::Correlated));
}

#[test]
fn remedy_meets_the_targets_random() {
    assert_random(&reduced(Mode::Random));
}

#[test]
fn zones_hold_only_the_zone_that_stays_down() {
    let s = reduced(Mode::Zones);
    let reports = run(&s).expect("valid");
    let per_zone = by_name(&reports, "remedy");
    let one = by_name(&reports, "remedy, one breaker");
    // Zone 0 is down for the whole outage, so all of it fails; zone 1 came
    // back after a sixth of it and is fully released by its end.
    assert_eq!(
        per_zone.failing_at_end,
        s.resources / 2,
        "{}",
        per_zone.note
    );
    assert!(
        one.failing_at_end > per_zone.failing_at_end,
        "one breaker {} vs per zone {}",
        one.failing_at_end,
        per_zone.failing_at_end
    );
    // Zone 1 is clear long before the outage ends with a breaker per
    // zone; with one breaker it waits for zone 0.
    let clear = |r: &PolicyReport| -> u64 {
        let at = r.note.find("zone-1 clear from ").expect("zone note") + 18;
        r.note[at..].split(' ').next().unwrap().parse().unwrap()
    };
    let outage = s.outage.as_secs();
    assert!(clear(per_zone) < outage, "{}", per_zone.note);
    assert!(clear(one) >= outage, "{}", one.note);
}

#[test]
fn a_quota_cut_slows_releases_down_instead_of_storming_it() {
    let s = reduced(Mode::Quota);
    let reports = run(&s).expect("valid");
    let remedy = by_name(&reports, "remedy");
    let client_go = by_name(&reports, "client-go default");
    // Releases answered with 429s halve the pace: remedy makes a small
    // share of client-go's calls above the (halved) quota.
    assert!(
        remedy.above_limit * 5 <= client_go.above_limit,
        "{} above the limit vs client-go {}",
        remedy.above_limit,
        client_go.above_limit
    );
    assert_eq!(remedy.failing_at_end, 0, "{}", remedy.note);
}

#[test]
fn a_plot_is_written_per_mode_and_a_bad_path_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("remedy-sim-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cli = Cli::parse_from([
        "sim",
        "--resources",
        "200",
        "--controllers",
        "4",
        "--api-limit",
        "10",
        "--outage",
        "2m",
        "--after",
        "5m",
        "--mode",
        "both",
        "--plot",
        dir.join("p.svg").to_str().unwrap(),
    ]);
    let out = run_cli(&cli.args).expect("runs");
    for mode in ["correlated", "random"] {
        let svg = std::fs::read_to_string(dir.join(format!("p-{mode}.svg"))).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("remedy"), "{mode}");
        assert!(out.contains(&format!("p-{mode}.svg")), "{out}");
    }
    let bad = Cli::parse_from([
        "sim",
        "--resources",
        "200",
        "--controllers",
        "4",
        "--mode",
        "random",
        "--plot",
        "/nonexistent/dir/p.svg",
    ]);
    let err = run_cli(&bad.args).unwrap_err();
    assert_eq!(err.label(), "plot");
    assert!(err.to_string().contains("/nonexistent/dir/p.svg"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_daemon_config_file_drives_the_remedy_row() {
    let dir = std::env::temp_dir().join(format!("remedy-sim-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("remedy.yaml");
    // A budget of 1 release/s: 1,200 held resources take 20 minutes.
    std::fs::write(
        &file,
        "budget: {refill_per_second: 1, burst: 1}\n\
         backoff: {base: 1s, cap: 5m, jitter: 0, quiet_window: 1h}\n\
         breaker: {open_ratio: 0.3, close_ratio: 0.1, min_resources: 5, window: 10s, cooldown: 20s, \
         release: {probe_every: 2s, window: 2s, step: 2, min_success: 0.2}}\n",
    )
    .unwrap();
    let args = |config: &str| {
        Cli::parse_from([
            "sim",
            "--resources",
            "2000",
            "--controllers",
            "10",
            "--api-limit",
            "20",
            "--outage",
            "15m",
            "--after",
            "1h",
            "--mode",
            "correlated",
            "--config",
            config,
        ])
        .args
    };
    let a = args(file.to_str().unwrap());
    let params = a.remedy().unwrap().expect("from the file");
    assert_eq!(params.core.budget.refill_per_second, 1.0);
    assert_eq!(
        params.core.breaker.release.probe_every,
        Some(Duration::from_secs(2))
    );
    let out = run_cli(&a).unwrap();
    assert!(
        out.starts_with("remedy runs with breaker, budget and backoff from"),
        "{out}"
    );
    let s = Scenario {
        remedy: Some(params),
        ..reduced(Mode::Correlated)
    };
    let slow = by_name(&run(&s).unwrap(), "remedy").clone();
    let fitted = by_name(&run(&reduced(Mode::Correlated)).unwrap(), "remedy").clone();
    let (slow_t, fitted_t) = (slow.t100_ms.unwrap_or(u64::MAX), fitted.t100_ms.unwrap());
    assert!(
        slow_t > 10 * fitted_t,
        "1/s budget {slow_t} ms vs fitted {fitted_t} ms"
    );
    let bad = run_cli(&args("/nonexistent/remedy.yaml")).unwrap_err();
    assert_eq!(bad.label(), "config");
    std::fs::write(&file, "budget: {refill_per_second: -1}\n").unwrap();
    let bad = run_cli(&args(file.to_str().unwrap())).unwrap_err();
    assert!(bad.to_string().contains("budget"), "{bad}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn results_are_deterministic_for_a_seed() {
    for mode in [Mode::Correlated, Mode::Random] {
        let s = reduced(mode);
        let a = run(&s).expect("valid");
        let b = run(&s).expect("valid");
        assert_eq!(a, b, "{}", mode.label());
        assert_eq!(table(&s, &a), table(&s, &b));
        let other = run(&Scenario { seed: 2, ..s }).expect("valid");
        assert_ne!(a, other, "another seed gives another run");
    }
}

#[test]
fn every_policy_reports_once_in_order() {
    let reports = run(&reduced(Mode::Correlated)).expect("valid");
    let names: Vec<_> = reports.iter().map(|r| r.policy).collect();
    assert_eq!(
        names,
        [
            "client-go default",
            "full-jitter 1s..5m",
            "brupop 2^n min",
            "aws retry quota",
            "sre adaptive K=2",
            "remedy"
        ]
    );
    for r in &reports {
        assert!(r.retries_outage <= r.calls_outage, "{}", r.policy);
        assert!(r.calls_outage <= r.calls_total, "{}", r.policy);
        assert!(r.above_limit <= r.calls_total, "{}", r.policy);
        if let (Some(t99), Some(t100)) = (r.t99_ms, r.t100_ms) {
            assert!(t99 <= t100, "{}", r.policy);
        }
        if let Some(j) = r.jain {
            assert!(j > 0.0 && j <= 1.0 + 1e-12, "{}: {j}", r.policy);
        }
    }
}

#[test]
fn remedy_holds_failing_resources_during_the_outage() {
    let s = reduced(Mode::Correlated);
    let reports = run(&s).expect("valid");
    let remedy = by_name(&reports, "remedy");
    // While the zone is down only probes (one per 2 s) leave, each with
    // the provider's requeues before it is held again.
    let probes = s.outage.as_secs() / 2 + 1;
    assert!(
        remedy.retries_outage <= 10 * probes + u64::from(s.resources) / 10,
        "{} retries in the outage",
        remedy.retries_outage
    );
    assert!(remedy.note.contains("opened 1 time(s)"), "{}", remedy.note);
    assert!(
        remedy.held_series.iter().any(|h| *h > 0),
        "held resources are plotted"
    );
}

#[test]
fn without_an_outage_nobody_retries_or_waits() {
    let s = Scenario {
        failing: 0.0,
        ..reduced(Mode::Random)
    };
    for r in run(&s).expect("valid") {
        assert_eq!(r.retries_outage, 0, "{}", r.policy);
        assert_eq!(r.above_limit, 0, "{}", r.policy);
        assert_eq!(r.failing_at_end, 0, "{}", r.policy);
        assert_eq!(r.t100_ms, Some(0), "{}", r.policy);
        assert_eq!(r.healthy_delayed, 0, "{}", r.policy);
        assert_eq!(r.healthy, s.resources, "{}", r.policy);
        assert_eq!(r.jain, None, "{}", r.policy);
    }
}

#[test]
fn a_horizon_too_short_to_recover_reports_never() {
    let s = Scenario {
        resources: 600,
        controllers: 3,
        outage: Duration::from_secs(600),
        after: Duration::from_secs(5),
        ..Scenario::default_for(Mode::Correlated)
    };
    let reports = run(&s).expect("valid");
    let brupop = by_name(&reports, "brupop 2^n min");
    assert_eq!(brupop.t100_ms, None);
    let text = table(&s, &reports);
    assert!(text.contains("never"), "{text}");
}

#[test]
fn table_is_aligned_and_names_the_scenario() {
    let s = reduced(Mode::Random);
    let text = table(&s, &run(&s).expect("valid"));
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("mode random: 2000 resources, 10 controllers"));
    let header = lines[1];
    assert!(header.starts_with("policy"));
    // Header, rule and the six rows share one width.
    for l in &lines[2..9] {
        assert_eq!(l.len(), header.len(), "{l:?}");
    }
    assert!(lines[8].starts_with("remedy"));
    assert!(lines[9].starts_with("  remedy: breaker opened"));
}

#[test]
fn invalid_scenarios_are_rejected_with_the_field() {
    let base = reduced(Mode::Correlated);
    let cases = [
        (
            Scenario {
                resources: 0,
                ..base.clone()
            },
            "resources",
        ),
        (
            Scenario {
                controllers: 0,
                ..base.clone()
            },
            "controllers",
        ),
        (
            Scenario {
                controllers: 3000,
                ..base.clone()
            },
            "controllers",
        ),
        (
            Scenario {
                failing: f64::NAN,
                ..base.clone()
            },
            "failing",
        ),
        (
            Scenario {
                failing: 1.5,
                ..base.clone()
            },
            "failing",
        ),
        (
            Scenario {
                outage: Duration::from_millis(1500),
                ..base.clone()
            },
            "outage",
        ),
        (
            Scenario {
                after: Duration::ZERO,
                ..base.clone()
            },
            "after",
        ),
        (
            Scenario {
                api_limit: 0,
                ..base.clone()
            },
            "api_limit",
        ),
    ];
    for (s, field) in cases {
        let e = run(&s).expect_err(field);
        assert_eq!(e.label(), "invalid");
        assert!(
            matches!(&e, SimError::Invalid { field: f, .. } if *f == field),
            "{e}"
        );
        assert!(e.to_string().contains(field));
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: SimArgs,
}

#[test]
fn cli_arguments_map_to_scenarios() {
    let defaults = Cli::parse_from(["sim"]).args.scenarios();
    assert_eq!(
        defaults,
        vec![
            Scenario::default_for(Mode::Correlated),
            Scenario::default_for(Mode::Random)
        ]
    );
    let cli = Cli::parse_from([
        "sim",
        "--seed",
        "7",
        "--resources",
        "500",
        "--controllers",
        "5",
        "--outage",
        "10m",
        "--after",
        "2h",
        "--failing",
        "0.5",
        "--mode",
        "random",
    ]);
    let s = cli.args.scenarios();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].mode, Mode::Random);
    assert_eq!(s[0].seed, 7);
    assert_eq!(s[0].resources, 500);
    assert_eq!(s[0].controllers, 5);
    assert_eq!(s[0].outage, Duration::from_secs(600));
    assert_eq!(s[0].after, Duration::from_secs(7200));
    assert_eq!(s[0].failing, 0.5);
    assert!(Cli::try_parse_from(["sim", "--mode", "sideways"]).is_err());
    assert!(Cli::try_parse_from(["sim", "--outage", "soon"]).is_err());
}

#[test]
fn run_cli_prints_one_table_per_mode_and_reports_bad_input() {
    let mut args = Cli::parse_from(["sim", "--resources", "300", "--controllers", "3"]).args;
    args.after = Duration::from_secs(600);
    let out = run_cli(&args).expect("valid");
    assert_eq!(out.matches("\nremedy ").count(), 2, "{out}");
    assert!(out.contains("mode correlated:") && out.contains("mode random:"));
    args.failing = 2.0;
    assert_eq!(run_cli(&args).expect_err("invalid").label(), "invalid");
}

/// The full default scenario; run with
/// `cargo test --release --lib sim -- --ignored`.
#[test]
#[ignore = "full-size scenario: about a second in release, slow in debug"]
fn remedy_meets_the_targets_full_size() {
    assert_correlated(&Scenario::default_for(Mode::Correlated));
    assert_random(&Scenario::default_for(Mode::Random));
}
