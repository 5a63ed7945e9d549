//! Watched objects as arbitrary JSON: every built-in profile's `project`
//! (and classification) must take anything the apiserver could send without
//! panicking, keep views bounded, and plans made from such objects must keep
//! the safety rules (never remove a pause remedy did not set).
#![no_main]

use kube::api::DynamicObject;
use libfuzzer_sys::fuzz_target;
use remedy::model::classify::{Classifier, default_rules};
use remedy::model::profile::{HoldMark, builtins};
use remedy::remediate::step::{Goal, Step, all_steps};
use remedy::model::view::PauseState;
use serde_json::Value;
use std::sync::LazyLock;

static CLASSIFIER: LazyLock<Option<Classifier>> =
    LazyLock::new(|| Classifier::new(&default_rules()).ok());

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    // Well-formed metadata when it parses as an object, else the JSON as the
    // body of an object without metadata.
    let obj =
        serde_json::from_value::<DynamicObject>(value.clone()).unwrap_or_else(|_| DynamicObject {
            types: None,
            metadata: Default::default(),
            data: value,
        });
    let Some(classifier) = CLASSIFIER.as_ref() else {
        panic!("seed rules must compile");
    };
    let hold = HoldMark {
        since: chrono::DateTime::UNIX_EPOCH,
        reason: "fuzz".into(),
        crash_count: 1,
        value: None,
    };
    for p in builtins() {
        let projection = p.project(&obj);
        let _ = classifier.classify(&p, &projection);
        let f = &projection.failure;
        for s in [&f.reason, &f.message, &f.state]
            .into_iter()
            .flatten()
        {
            assert!(s.len() <= 512, "kept {} bytes", s.len());
        }
        for goal in [Goal::Hold(hold.clone()), Goal::Release, Goal::Remediate] {
            let (steps, _) = all_steps(&p, &obj, &goal);
            assert!(steps.len() <= 8);
            if projection.view.pause == PauseState::Foreign {
                assert!(
                    !steps.contains(&Step::Unpause),
                    "{}: {goal:?} removes a pause remedy did not set: {steps:?}",
                    p.name
                );
            }
        }
    }
});
