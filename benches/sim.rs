//! `cargo bench --bench sim`: the default scenario's tables (as printed by
//! `remedy simulate`) with the wall time of each policy, then a criterion
//! measurement of one full reduced-size run for regressions.

use criterion::Criterion;
use remedy::sim::{self, Mode, Scenario};
use std::hint::black_box;
use std::time::{Duration, Instant};

fn print_default_tables() {
    let total = Instant::now();
    for mode in [Mode::Correlated, Mode::Random] {
        let s = Scenario::default_for(mode);
        let mut times: Vec<(&'static str, Duration)> = Vec::new();
        let mut last = Instant::now();
        let reports = sim::run_with(&s, |_, r| {
            times.push((r.policy, last.elapsed()));
            last = Instant::now();
        });
        match reports {
            Ok(reports) => print!("{}", sim::table(&s, &reports)),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
        let per_policy: Vec<String> = times
            .iter()
            .map(|(p, d)| format!("{p} {:.0} ms", d.as_secs_f64() * 1000.0))
            .collect();
        println!("  wall time: {}\n", per_policy.join(", "));
    }
    println!(
        "default scenario, both modes, 6 policies: {:.2} s\n",
        total.elapsed().as_secs_f64()
    );
}

fn main() {
    print_default_tables();
    let mut c = Criterion::default().sample_size(10).configure_from_args();
    let reduced = Scenario {
        resources: 2000,
        controllers: 10,
        api_limit: 20,
        outage: Duration::from_secs(15 * 60),
        after: Duration::from_secs(3600),
        ..Scenario::default_for(Mode::Correlated)
    };
    c.bench_function("sim reduced correlated, 6 policies", |b| {
        b.iter(|| sim::run(black_box(&reduced)))
    });
    c.final_summary();
}
