//! The outage breakers, one per failure domain (`crate::model::domains`), all
//! with the same settings; bounded at [`MAX_DOMAINS`].

use crate::config::BreakerConfig;
use crate::decide::breaker::{BreakerState, OutageBreaker, Sample};
use crate::model::domains::{CLUSTER, DomainBy, MAX_DOMAINS, OTHER};
use crate::model::view::{ResourceKey, ResourceView};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// A breaker per failure domain, all with the same settings.
#[derive(Clone, Debug)]
pub struct Breakers {
    by: DomainBy,
    cfg: BreakerConfig,
    map: BTreeMap<Arc<str>, OutageBreaker>,
}

impl Breakers {
    pub fn new(cfg: &BreakerConfig, by: DomainBy) -> Self {
        let mut map = BTreeMap::new();
        if by == DomainBy::Cluster {
            map.insert(Arc::from(CLUSTER), OutageBreaker::new(cfg));
        }
        Self {
            by,
            cfg: cfg.clone(),
            map,
        }
    }

    pub fn by(&self) -> &DomainBy {
        &self.by
    }

    /// The breaker `key` answers to, created (closed) if there is room.
    pub fn slot(&mut self, key: &ResourceKey, view: &ResourceView) -> Arc<str> {
        let name = self.by.of(key, view);
        self.slot_named(name)
    }

    /// As [`Self::slot`], for a domain name already worked out.
    pub fn slot_named(&mut self, name: &str) -> Arc<str> {
        let slot: Arc<str> = match self.map.get_key_value(self.slot_of(name)) {
            Some((k, _)) => return k.clone(),
            None => Arc::from(self.slot_of(name)),
        };
        self.map
            .entry(slot.clone())
            .or_insert_with(|| OutageBreaker::new(&self.cfg));
        slot
    }

    /// The breaker a domain named `name` answers to, without creating it:
    /// its own once it has one, or while there is room for one (closed
    /// until then), else [`OTHER`]. The one mapping of a domain to its
    /// breaker: every caller that asks about a domain (the tick's facts,
    /// the releases an opening breaker cancels, `explain`, the release
    /// line) goes through it, so a domain past the bound is `other`
    /// everywhere.
    pub fn slot_of<'a>(&'a self, name: &'a str) -> &'a str {
        match self.map.get_key_value(name) {
            Some((k, _)) => k,
            None if self.map.len() < MAX_DOMAINS - 1 => name,
            None => OTHER,
        }
    }

    /// As [`Self::slot_of`], for a resource.
    pub fn slot_for<'a>(&'a self, key: &'a ResourceKey, view: &'a ResourceView) -> &'a str {
        self.slot_of(self.by.of(key, view))
    }

    pub fn is_open(&self, domain: &str) -> bool {
        self.map.get(domain).is_some_and(OutageBreaker::is_open)
    }

    /// Open proper: not cooling (where [`Self::is_open`] is still true).
    pub fn is_open_proper(&self, domain: &str) -> bool {
        self.open_since(domain).is_some()
    }

    pub fn any_open(&self) -> bool {
        self.map.values().any(OutageBreaker::is_open)
    }

    /// Since when `domain`'s breaker is open proper (not cooling).
    pub fn open_since(&self, domain: &str) -> Option<Duration> {
        match self.map.get(domain)?.state() {
            BreakerState::Open { since, .. } => Some(since),
            _ => None,
        }
    }

    /// Whether some breaker is open proper (not cooling).
    pub fn any_open_proper(&self) -> bool {
        self.map
            .values()
            .any(|b| matches!(b.state(), BreakerState::Open { .. }))
    }

    /// Feeds each breaker its domain's sample (an empty one where a domain
    /// had none this time: its window empties and it closes in time). The
    /// fleet-wide `external` ratio counts only for `domain: cluster`: it
    /// says nothing about which domain fails.
    pub fn observe(
        &mut self,
        now: Duration,
        mut samples: BTreeMap<Arc<str>, Sample>,
        external: Option<f64>,
    ) -> Vec<(Arc<str>, BreakerState, BreakerState)> {
        let mut changed = Vec::new();
        let cluster = self.by == DomainBy::Cluster;
        for (name, breaker) in &mut self.map {
            let mut s = samples.remove(name).unwrap_or_default();
            if cluster {
                s.external_ratio = external;
            }
            let before = breaker.state();
            let after = breaker.observe(now, s);
            if before.is_open() != after.is_open() {
                changed.push((name.clone(), before, after));
            }
        }
        changed
    }

    /// A new leader found breaker holds in `domain`: it serves the full
    /// cooldown there (see [`OutageBreaker::resume`]).
    pub fn resume(&mut self, now: Duration, domain: &str) {
        if let Some(b) = self.map.get_mut(domain) {
            b.resume(now);
        }
    }

    pub fn states(&self) -> impl Iterator<Item = (&Arc<str>, BreakerState)> {
        self.map.iter().map(|(k, b)| (k, b.state()))
    }

    /// Each domain's state with its windowed failing ratio and failing
    /// count ([`OutageBreaker::judged`]).
    pub fn judged(&self) -> impl Iterator<Item = (&Arc<str>, BreakerState, f64, u32)> {
        self.map.iter().map(|(k, b)| {
            let (ratio, failing) = b.judged();
            (k, b.state(), ratio, failing)
        })
    }

    /// Domains whose breaker is cooling (open, below `close_ratio`).
    pub fn cooling(&self) -> BTreeSet<Arc<str>> {
        self.map
            .iter()
            .filter(|(_, b)| matches!(b.state(), BreakerState::Cooling { .. }))
            .map(|(d, _)| d.clone())
            .collect()
    }

    /// Domains whose breaker is open, for /status.
    pub fn open(&self) -> Vec<String> {
        self.map
            .iter()
            .filter(|(_, b)| b.is_open())
            .map(|(k, _)| k.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::domains::NONE;
    use crate::model::view::Labels;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            open_ratio: 0.5,
            close_ratio: 0.1,
            min_resources: 2,
            window: Duration::from_secs(1),
            cooldown: Duration::from_secs(5),
            query: None,
            domain: crate::config::DomainBy::Cluster,
            release: Default::default(),
            hold: Default::default(),
        }
    }

    fn zoned(name: &str, zone: Option<&str>) -> (ResourceKey, ResourceView) {
        let view = ResourceView {
            labels: Labels::from_pairs(zone.map(|z| ("topology.kubernetes.io/zone", z))),
            ..ResourceView::default()
        };
        (ResourceKey::new("Machine", "ns", name), view)
    }

    #[test]
    fn an_outage_in_one_zone_opens_that_zone_only() {
        let mut b = Breakers::new(
            &cfg(),
            DomainBy::Label("topology.kubernetes.io/zone".into()),
        );
        let (ka, va) = zoned("a", Some("zone-a"));
        let (kb, vb) = zoned("b", Some("zone-b"));
        let a = b.slot(&ka, &va);
        let z = b.slot(&kb, &vb);
        let t = Duration::from_secs(10);
        // zone-b has two failing of ten: below open_ratio by itself, and the
        // fleet-wide external ratio (1.0) says nothing about zone-b.
        let samples = BTreeMap::from([
            (a.clone(), Sample::failing(4, 4)),
            (z.clone(), Sample::failing(10, 2)),
        ]);
        let changed = b.observe(t, samples, Some(1.0));
        assert_eq!(changed.len(), 1);
        assert!(b.is_open("zone-a") && !b.is_open("zone-b"));
        assert_eq!(b.open(), vec!["zone-a".to_string()]);
        // A zone with nothing to report cools and closes in time.
        let mut t = t;
        for _ in 0..8 {
            t += Duration::from_secs(1);
            b.observe(t, BTreeMap::new(), None);
        }
        assert!(!b.any_open());
    }

    #[test]
    fn domains_are_bounded_and_missing_values_share_none() {
        let mut b = Breakers::new(&cfg(), DomainBy::Label("zone".into()));
        let view = ResourceView::default();
        assert_eq!(&*b.slot(&ResourceKey::new("M", "ns", "x"), &view), NONE);
        for i in 0..200 {
            let v = ResourceView {
                labels: Labels::from_pairs([("zone", format!("z{i}").as_str())]),
                ..ResourceView::default()
            };
            b.slot(&ResourceKey::new("M", "ns", "x"), &v);
        }
        assert_eq!(b.states().count(), MAX_DOMAINS);
        let v = ResourceView {
            labels: Labels::from_pairs([("zone", "z199")]),
            ..ResourceView::default()
        };
        assert_eq!(&*b.slot(&ResourceKey::new("M", "ns", "x"), &v), OTHER);
        // Looked up without creating: the same answer.
        assert_eq!(b.slot_of("z199"), OTHER);
        assert_eq!(b.slot_of("z0"), "z0");
        assert_eq!(b.slot_for(&ResourceKey::new("M", "ns", "x"), &v), OTHER);
        let fresh = Breakers::new(&cfg(), DomainBy::Label("zone".into()));
        assert_eq!(fresh.slot_of("z7"), "z7");
        assert_eq!(fresh.states().count(), 0, "a look-up creates nothing");
    }

    #[test]
    fn the_cluster_domain_is_the_old_single_breaker() {
        let mut b = Breakers::new(&cfg(), DomainBy::Cluster);
        let (k, v) = zoned("a", Some("zone-a"));
        assert_eq!(&*b.slot(&k, &v), CLUSTER);
        let samples = BTreeMap::from([(Arc::from(CLUSTER), Sample::failing(10, 2))]);
        b.observe(Duration::from_secs(1), samples, Some(0.9));
        assert!(b.is_open(CLUSTER), "the external ratio counts here");
        assert_eq!(DomainBy::Kind.of(&k, &v), "Machine");
        assert_eq!(DomainBy::Namespace.of(&k, &v), "ns");
    }
}
