//! Alertmanager webhook bodies: `parse` (JSON + validation) must return an
//! error for bad input, never panic, and what it accepts must satisfy the
//! limits the rest of remedy relies on. Accepted alerts then go through the
//! deduplication that the webhook applies.
#![no_main]

use chrono::Utc;
use libfuzzer_sys::fuzz_target;
use remedy::signals::Dedupe;
use remedy::signals::webhook::{
    MAX_ALERTS, MAX_FINGERPRINT_BYTES, MAX_LABEL_BYTES, MAX_LABELS, parse,
};

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok((n, alerts)) => {
            assert_eq!(n.version, "4");
            assert_eq!(alerts.len(), n.alerts.len());
            assert!(alerts.len() <= MAX_ALERTS);
            let mut dedupe = Dedupe::new(64);
            let now = Utc::now();
            for a in &alerts {
                assert!(!a.fingerprint.is_empty() && a.fingerprint.len() <= MAX_FINGERPRINT_BYTES);
                assert!(a.fingerprint.bytes().all(|b| b.is_ascii_alphanumeric()));
                assert!(a.labels.len() <= MAX_LABELS);
                for (k, v) in &a.labels {
                    assert!(k.len() <= MAX_LABEL_BYTES && v.len() <= MAX_LABEL_BYTES);
                    assert!(remedy::signals::valid_label_name(k));
                }
                assert_eq!(a.alertname.as_ref(), a.labels.get("alertname"));
                // Forwarded once, then a duplicate: the webhook's idempotency.
                if dedupe.check(&a.fingerprint, a.status, a.starts_at, now)
                    == remedy::signals::Delivery::New
                {
                    dedupe.remember(&a.fingerprint, a.status, a.starts_at, now);
                    assert_ne!(
                        dedupe.check(&a.fingerprint, a.status, a.starts_at, now),
                        remedy::signals::Delivery::New
                    );
                }
            }
        }
        Err(e) => {
            assert!(matches!(e.label(), "rejected" | "too_large"), "{e:?}");
            // Reasons echo input; they are capped so logs stay bounded.
            assert!(e.to_string().chars().count() < 400, "{e}");
        }
    }
});
