use super::*;
use crate::sim::Mode;

#[test]
fn params_fit_the_quota_and_zones_get_a_breaker_each() {
    let s = Scenario::default_for(Mode::Correlated);
    let p = RemedyParams::for_scenario(&s);
    // 97 usable − ceil(10000/600) = 17 resyncs per second.
    assert_eq!(p.core.budget.refill_per_second, 80.0);
    assert_eq!(p.core.budget.burst, 80);
    assert!(p.backoff.validate().is_ok());
    assert_eq!(p.core.breaker.domain, DomainBy::Cluster);
    let zoned = RemedyParams::for_scenario(&Scenario::default_for(Mode::Zones));
    assert_eq!(
        zoned.core.breaker.domain,
        DomainBy::Label(ZONE_LABEL.into())
    );
    assert_eq!(zoned.one_breaker().core.breaker.domain, DomainBy::Cluster);
    let tiny = Scenario { api_limit: 1, ..s };
    assert_eq!(RemedyParams::for_scenario(&tiny).core.budget.burst, 1);
}

#[test]
fn the_provider_skips_paused_and_failed_resources() {
    let s = Scenario::default_for(Mode::Correlated);
    let p = Remedy::new(RemedyParams::for_scenario(&s), &s);
    let mut r = Resource::test_new(1, 0);
    assert!(!p.skips(&r));
    r.paused = true;
    assert!(p.skips(&r));
    r.paused = false;
    r.failed_status = true;
    assert!(p.skips(&r));
}
