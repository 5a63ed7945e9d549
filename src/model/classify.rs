//! Transient vs terminal classification. Pure: a view and rules in, a verdict
//! out. Unknown states are never terminal: only an explicit terminal rule or a
//! profile's terminal state makes a resource terminal.

use crate::model::profile::Profile;
use crate::model::view::{FailureText, Projection};
use regex::Regex;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Healthy,
    /// Worth retrying; `reason` is a rule name (a bounded metric label).
    Transient {
        reason: String,
    },
    /// Broken for this resource. `not_found` failures are also counted by
    /// the outage breaker: many at once mean credentials or an outage.
    Terminal {
        reason: String,
        not_found: bool,
    },
    /// A profile field had the wrong type; the resource is never touched.
    Unclassifiable {
        field: &'static str,
    },
}

impl Verdict {
    pub fn state_label(&self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Transient { .. } => "transient",
            Self::Terminal { .. } => "terminal",
            Self::Unclassifiable { .. } => "unclassifiable",
        }
    }

    pub fn is_failing(&self) -> bool {
        matches!(self, Self::Transient { .. } | Self::Terminal { .. })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RuleVerdict {
    Transient,
    Terminal,
    /// Terminal for the resource, and a signal for the outage breaker.
    NotFound,
}

/// A rule as written in config. All given matchers must match.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// The `reason` label of the error metrics: lowercase `[a-z0-9_]+`.
    pub name: String,
    /// What a failure this rule matches is.
    pub verdict: RuleVerdict,
    /// Regex over failure reason, failure message and non-True condition
    /// reasons/messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Regex over the failure reason only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ClassifyError {
    #[error("rule {rule:?}: invalid regex in {field}: {source}")]
    Regex {
        rule: String,
        field: &'static str,
        #[source]
        source: Box<regex::Error>,
    },
    #[error("rule {0:?}: needs `text` or `reason`")]
    NoMatcher(String),
    #[error("rule name {0:?} must be lowercase [a-z0-9_]+ (it is a metric label)")]
    BadName(String),
}

#[derive(Debug, Clone)]
struct Rule {
    name: String,
    verdict: RuleVerdict,
    text: Option<Regex>,
    reason: Option<Regex>,
}

#[derive(Debug, Clone)]
pub struct Classifier {
    rules: Vec<Rule>,
}

/// Seed rules, derived from what the providers write (CAPO v0.7-v0.14,
/// CAPA v2.13, CAPZ v1.21, CAPI v1.10, brupop) and from the cloud SDK errors
/// they wrap (gophercloud v1/v2, aws-sdk-go-v2, azcore/azidentity); each
/// wording is a fixture in tests/fixtures/wordings.yaml naming its source.
/// Transient rules come first so a message that mentions both a timeout and
/// "not found" is retried rather than given up on.
pub fn default_rules() -> Vec<RuleSpec> {
    let r = |name: &str, verdict, text: &str| RuleSpec {
        name: name.into(),
        verdict,
        text: Some(text.into()),
        reason: None,
    };
    use RuleVerdict::*;
    vec![
        r(
            "throttled",
            Transient,
            r"(?i)throttl|rate.?limit|too many requests|\b429\b|RequestLimitExceeded|SlowDown",
        ),
        r(
            "quota",
            Transient,
            r"(?i)quota|insufficient.?capacity|SkuNotAvailable|AllocationFailed",
        ),
        // gophercloud v1 words 503 without the code ("temporary overloading
        // or maintenance"), so the text is matched too.
        r(
            "server_error",
            Transient,
            r"(?i)\b5\d\d\b|internal server error|internal error|bad gateway|service unavailable|gateway time-?out|ServerBusy|unable to handle the request due to a temporary overloading",
        ),
        r(
            "timeout",
            Transient,
            r"(?i)timed? ?out|timeout|deadline exceeded",
        ),
        r(
            "connection",
            Transient,
            r"(?i)connection (refused|reset)|no route to host|\bEOF\b|broken pipe|tls handshake|dial tcp|no such host|temporar",
        ),
        // Rejected credentials or permissions are not a fault of the machine:
        // every machine using them fails alike. Counted like `not_found`, so a
        // burst opens the breaker at once and holds the fleet instead of
        // retrying into a locked account; a lone one is left alone (terminal
        // for remedy, which never clears it, while the controller keeps
        // retrying on its own because providers report these in conditions,
        // not failure fields). After the transient rules, so a timeout while
        // authenticating is still retried.
        r(
            "credentials",
            NotFound,
            r"(?i)authentication failed|unable to re-authenticate|request forbidden|got 40[13] instead|StatusCode: 40[13]\b|RESPONSE 40[13]\b|AuthFailure|UnauthorizedOperation|AuthorizationFailed|InvalidClientTokenId|InvalidAccessKeyId|UnrecognizedClientException|NoCredentialProviders|InvalidAuthenticationToken",
        ),
        // CAPA v2.13 replaces any DescribeInstances error by this one
        // wording (ErrDescribeInstance; the SDK error goes to an Event), so
        // a throttled or unreachable EC2 API looks the same: the cloud API
        // failing, not the machine. Before `not_found`, since CAPA files it
        // under reason `InstanceNotFound`; after `credentials`, whose
        // wordings CAPA keeps when it queries by tags.
        r(
            "describe_failed",
            Transient,
            r"(?i)failed to describe instance by id",
        ),
        // The provider saw the instance itself broken (CAPO/CAPA copy this
        // into the Machine's failureMessage): terminal for that resource.
        // CAPO v0.11+ formats the state pointer ("instance state 0xc000... is
        // unexpected"), reached only for ERROR. CAPA's "is undefined" (an
        // unknown state) stays unmatched: unknown is never terminal.
        r(
            "instance_error",
            Terminal,
            r#"(?i)InstanceStateError|instance state ("?(error|terminated)"?|0x[0-9a-f]+) is unexpected|instance is in error state"#,
        ),
        // The instance is gone. CAPO says so in four wordings across v0.7-v0.14
        // ("OpenStack instance not found", "virtual machine no longer
        // exists", "The server was unexpectedly deleted", reason
        // InstanceDeleted / "Instance has been deleted"), CAPZ "VM ... has been
        // deleted". Many at once mean an outage or a wrong project, not N
        // broken machines: the breaker counts them.
        r(
            "not_found",
            NotFound,
            r"(?i)not.?found|\b404\b|does not exist|no longer exists|unexpectedly deleted|InstanceDeleted|has been deleted|InvalidInstanceID",
        ),
    ]
}

impl Classifier {
    pub fn new(specs: &[RuleSpec]) -> Result<Self, ClassifyError> {
        let compile = |rule: &str, field, re: &Option<String>| {
            re.as_deref()
                .map(|s| {
                    Regex::new(s).map_err(|e| ClassifyError::Regex {
                        rule: rule.to_string(),
                        field,
                        source: Box::new(e),
                    })
                })
                .transpose()
        };
        let mut rules = Vec::with_capacity(specs.len());
        for s in specs {
            let valid_name = !s.name.is_empty()
                && s.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if !valid_name {
                return Err(ClassifyError::BadName(s.name.clone()));
            }
            if s.text.is_none() && s.reason.is_none() {
                return Err(ClassifyError::NoMatcher(s.name.clone()));
            }
            rules.push(Rule {
                name: s.name.clone(),
                verdict: s.verdict,
                text: compile(&s.name, "text", &s.text)?,
                reason: compile(&s.name, "reason", &s.reason)?,
            });
        }
        Ok(Self { rules })
    }

    pub fn classify(&self, profile: &Profile, p: &Projection) -> Verdict {
        let (view, failure) = (&p.view, &p.failure);
        if let Some(field) = view.malformed.first() {
            return Verdict::Unclassifiable { field };
        }
        if let Some(state) = failure.state.as_deref()
            && profile.terminal_states.iter().any(|s| s == state)
        {
            // A terminal state the provider set because a cloud call failed
            // (CAPO's OpenStackServer: ERROR after a create answered 503)
            // says nothing of the instance: what the call failed with
            // decides. Otherwise the instance itself is broken.
            return match self.match_rules(failure, failure.has_failure(), &[]) {
                Some(v @ Verdict::Transient { .. })
                | Some(
                    v @ Verdict::Terminal {
                        not_found: true, ..
                    },
                ) => v,
                _ => Verdict::Terminal {
                    reason: "instance_error".into(),
                    not_found: false,
                },
            };
        }
        if failure.has_failure() {
            return self
                .match_rules(failure, true, &profile.unknown_conditions)
                .unwrap_or(Verdict::Transient {
                    // Unknown failures are retried, never given up on.
                    reason: "unmatched".into(),
                });
        }
        if let Some(v) = self.match_rules(failure, false, &profile.unknown_conditions) {
            return v;
        }
        // remedy's own counter (kinds without a native one) records past
        // holds, not a current failure.
        if profile.has_native_counter() && view.crash_count.is_some_and(|n| n > 0) {
            return Verdict::Transient {
                reason: "crash_loop".into(),
            };
        }
        Verdict::Healthy
    }

    /// With `with_failure` false only conditions are looked at (a failing
    /// condition without failure fields, as in CAPI v1beta2). `Unknown`
    /// conditions of the profile's `unknown_conditions` types are read by
    /// every rule but the terminal ones: unknown is never terminal.
    fn match_rules(
        &self,
        failure: &FailureText,
        with_failure: bool,
        unknown_types: &[String],
    ) -> Option<Verdict> {
        let mut texts: Vec<&str> = Vec::new();
        if with_failure {
            texts.extend(failure.reason.as_deref());
            texts.extend(failure.message.as_deref());
        }
        let mut unknown: Vec<&str> = Vec::new();
        for c in &failure.conditions {
            let into = match c.status.as_ref() {
                "False" => &mut texts,
                "Unknown" if unknown_types.iter().any(|t| t == c.type_.as_ref()) => &mut unknown,
                _ => continue,
            };
            into.extend(c.reason.as_deref());
            into.extend(c.message.as_deref());
        }
        if texts.is_empty() && unknown.is_empty() {
            return None;
        }
        let reason = failure.reason.as_deref().filter(|_| with_failure);
        self.rules.iter().find_map(|rule| {
            let read_unknown = rule.verdict != RuleVerdict::Terminal;
            let text_ok = rule.text.as_ref().is_none_or(|re| {
                texts.iter().any(|t| re.is_match(t))
                    || (read_unknown && unknown.iter().any(|t| re.is_match(t)))
            });
            let reason_ok = rule
                .reason
                .as_ref()
                .is_none_or(|re| reason.is_some_and(|r| re.is_match(r)));
            (text_ok && reason_ok).then(|| match rule.verdict {
                RuleVerdict::Transient => Verdict::Transient {
                    reason: rule.name.clone(),
                },
                RuleVerdict::Terminal => Verdict::Terminal {
                    reason: rule.name.clone(),
                    not_found: false,
                },
                RuleVerdict::NotFound => Verdict::Terminal {
                    reason: rule.name.clone(),
                    not_found: true,
                },
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::profile::builtin;
    use crate::model::view::{ConditionView, ResourceView};

    use crate::testkit::classifier;

    fn failing(reason: &str, message: &str) -> Projection {
        text(FailureText {
            reason: Some(reason.into()),
            message: Some(message.into()),
            ..FailureText::default()
        })
    }

    fn text(failure: FailureText) -> Projection {
        Projection {
            failure,
            ..Projection::default()
        }
    }

    fn view(view: ResourceView) -> Projection {
        Projection {
            view,
            ..Projection::default()
        }
    }

    fn transient(reason: &str) -> Verdict {
        Verdict::Transient {
            reason: reason.into(),
        }
    }

    #[test]
    fn cloud_errors_are_transient() {
        let p = builtin("openstack-machine").unwrap();
        let c = classifier();
        let cases = [
            (
                "CreateError",
                "Expected HTTP response code [200 202] when accessing [POST https://nova:8774/v2.1/servers], but got 503 instead",
                "server_error",
            ),
            (
                "CreateError",
                "Request forbidden: Quota exceeded for instances: Requested 1, but already used 100 of 100 instances",
                "quota",
            ),
            (
                "UpdateError",
                "RequestLimitExceeded: Request limit exceeded.",
                "throttled",
            ),
            (
                "CreateError",
                "Get \"https://keystone:5000/v3\": dial tcp 10.0.0.1:5000: connect: connection refused",
                "connection",
            ),
            ("CreateError", "context deadline exceeded", "timeout"),
        ];
        for (reason, msg, want) in cases {
            assert_eq!(
                c.classify(&p, &failing(reason, msg)),
                transient(want),
                "{msg}"
            );
        }
    }

    #[test]
    fn not_found_is_terminal_and_flagged_for_the_breaker() {
        let p = builtin("aws-machine").unwrap();
        let v = classifier().classify(
            &p,
            &failing(
                "UpdateError",
                "InvalidInstanceID.NotFound: The instance ID 'i-0abc' does not exist",
            ),
        );
        assert_eq!(
            v,
            Verdict::Terminal {
                reason: "not_found".into(),
                not_found: true
            }
        );
    }

    #[test]
    fn a_machine_whose_instance_broke_is_terminal() {
        let p = builtin("capi-machine").unwrap();
        let msg = "Failure detected from referenced resource infrastructure.cluster.x-k8s.io/v1beta2, Kind=AWSMachine with name \"m\": EC2 instance state \"terminated\" is unexpected";
        assert!(matches!(
            classifier().classify(&p, &failing("UpdateError", msg)),
            Verdict::Terminal { ref reason, not_found: false } if reason == "instance_error"
        ));
        let capo = "OpenStack instance state \"ERROR\" is unexpected";
        assert!(matches!(
            classifier().classify(&p, &failing("UpdateError", capo)),
            Verdict::Terminal { .. }
        ));
    }

    #[test]
    fn timeout_wins_over_not_found() {
        let p = builtin("openstack-machine").unwrap();
        let v = classifier().classify(
            &p,
            &failing("CreateError", "timeout waiting for port: not found"),
        );
        assert_eq!(v, transient("timeout"));
    }

    #[test]
    fn error_instance_state_is_terminal_but_unknown_state_is_not() {
        let p = builtin("openstack-machine").unwrap();
        let c = classifier();
        let mut v = text(FailureText {
            state: Some("ERROR".into()),
            ..FailureText::default()
        });
        assert!(
            matches!(c.classify(&p, &v), Verdict::Terminal { ref reason, not_found: false } if reason == "instance_error")
        );
        v.failure.state = Some("SOME_NEW_STATE".into());
        assert_eq!(c.classify(&p, &v), Verdict::Healthy);
        let mut failed = failing("CreateError", "something nobody has seen before");
        failed.failure.state = Some("SOME_NEW_STATE".into());
        assert_eq!(c.classify(&p, &failed), transient("unmatched"));
    }

    #[test]
    fn crash_count_without_failure_is_transient() {
        let p = builtin("bottlerocket-shadow").unwrap();
        let v = view(ResourceView {
            crash_count: Some(3),
            ..ResourceView::default()
        });
        assert_eq!(classifier().classify(&p, &v), transient("crash_loop"));
        let ok = view(ResourceView {
            crash_count: Some(0),
            ..ResourceView::default()
        });
        assert_eq!(classifier().classify(&p, &ok), Verdict::Healthy);
    }

    #[test]
    fn false_condition_matching_a_rule_is_classified() {
        let p = builtin("capi-machine").unwrap();
        let v = text(FailureText {
            conditions: vec![ConditionView {
                type_: "InfrastructureReady".into(),
                status: "False".into(),
                reason: Some("InstanceProvisionFailed".into()),
                message: Some("503 Service Unavailable".into()),
            }],
            ..FailureText::default()
        });
        assert_eq!(classifier().classify(&p, &v), transient("server_error"));
        let provisioning = text(FailureText {
            conditions: vec![ConditionView {
                type_: "Ready".into(),
                status: "False".into(),
                reason: Some("WaitingForBootstrapData".into()),
                message: None,
            }],
            ..FailureText::default()
        });
        assert_eq!(classifier().classify(&p, &provisioning), Verdict::Healthy);
    }

    fn unknown(type_: &str, message: &str) -> Projection {
        text(FailureText {
            conditions: vec![ConditionView {
                type_: type_.into(),
                status: "Unknown".into(),
                reason: Some("InstanceNotFound".into()),
                message: Some(message.into()),
            }],
            ..FailureText::default()
        })
    }

    #[test]
    fn unknown_conditions_count_only_where_the_profile_lists_them() {
        let c = classifier();
        let aws = builtin("aws-machine").unwrap();
        let describe = unknown("InstanceReady", "failed to describe instance by id");
        assert_eq!(c.classify(&aws, &describe), transient("describe_failed"));
        // The same condition on a kind whose profile does not list it, or a
        // type the profile does not list: an Unknown condition says nothing.
        let capo = builtin("openstack-machine").unwrap();
        assert_eq!(c.classify(&capo, &describe), Verdict::Healthy);
        let other = unknown("ELBAttached", "dial tcp: i/o timeout");
        assert_eq!(c.classify(&aws, &other), Verdict::Healthy);
    }

    #[test]
    fn an_unknown_condition_is_never_terminal() {
        let specs = vec![RuleSpec {
            name: "kaput".into(),
            verdict: RuleVerdict::Terminal,
            text: Some("kaput".into()),
            reason: None,
        }];
        let c = Classifier::new(&specs).unwrap();
        let aws = builtin("aws-machine").unwrap();
        assert_eq!(
            c.classify(&aws, &unknown("InstanceReady", "kaput")),
            Verdict::Healthy
        );
        let mut gone = unknown("InstanceReady", "kaput");
        gone.failure.conditions[0].status = "False".into();
        assert!(matches!(
            c.classify(&aws, &gone),
            Verdict::Terminal { ref reason, not_found: false } if reason == "kaput"
        ));
    }

    #[test]
    fn remedys_own_crash_counter_is_not_a_failure() {
        let p = builtin("openstack-machine").unwrap();
        let v = Projection {
            view: ResourceView {
                crash_count: Some(4),
                ..ResourceView::default()
            },
            failure: FailureText {
                state: Some("ACTIVE".into()),
                ..FailureText::default()
            },
        };
        assert_eq!(classifier().classify(&p, &v), Verdict::Healthy);
    }

    #[test]
    fn malformed_is_unclassifiable() {
        let p = builtin("bottlerocket-shadow").unwrap();
        let v = view(ResourceView {
            malformed: vec!["crash_count"],
            crash_count: None,
            ..ResourceView::default()
        });
        assert_eq!(
            classifier().classify(&p, &v),
            Verdict::Unclassifiable {
                field: "crash_count"
            }
        );
    }

    #[test]
    fn reason_matcher_and_text_matcher_both_must_match() {
        let specs = vec![RuleSpec {
            name: "gone".into(),
            verdict: RuleVerdict::Terminal,
            text: Some("(?i)deleted".into()),
            reason: Some("^DeleteError$".into()),
        }];
        let c = Classifier::new(&specs).unwrap();
        let p = builtin("capi-machine").unwrap();
        assert!(matches!(
            c.classify(&p, &failing("DeleteError", "server deleted")),
            Verdict::Terminal { .. }
        ));
        assert_eq!(
            c.classify(&p, &failing("CreateError", "server deleted")),
            transient("unmatched")
        );
    }

    /// One provider wording, as read from the provider's source at a
    /// release (tests/fixtures/wordings.yaml names release and file).
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wording {
        provider: String,
        version: String,
        source: String,
        profile: String,
        status: serde_json::Value,
        expect: String,
        verdict: String,
    }

    #[test]
    fn provider_wordings_classify_as_expected() {
        let table: Vec<Wording> =
            serde_yaml_ng::from_str(include_str!("../../tests/fixtures/wordings.yaml"))
                .expect("wordings table parses");
        assert!(table.len() >= 20, "the table lost entries");
        let c = classifier();
        let mut wrong = Vec::new();
        for w in &table {
            let p = builtin(&w.profile).expect("known profile");
            // A realistic object of the profile's kind, so the real field
            // paths and projection are exercised, not a hand-made view.
            let obj: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
                "apiVersion": p.api_version(),
                "kind": p.kind,
                "metadata": {"name": "m-0", "namespace": "default", "uid": "u"},
                "status": w.status,
            }))
            .expect("object");
            let got = c.classify(&p, &p.project(&obj));
            let (verdict, rule) = match &got {
                Verdict::Healthy => ("healthy", "healthy"),
                Verdict::Transient { reason } => ("transient", reason.as_str()),
                Verdict::Terminal {
                    reason,
                    not_found: true,
                } => ("not_found", reason.as_str()),
                Verdict::Terminal { reason, .. } => ("terminal", reason.as_str()),
                Verdict::Unclassifiable { .. } => ("unclassifiable", ""),
            };
            if verdict != w.verdict || rule != w.expect {
                wrong.push(format!(
                    "{} {} ({}): want {}/{}, got {got:?}",
                    w.provider, w.version, w.source, w.verdict, w.expect
                ));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn bad_rules_are_rejected_by_kind() {
        let mut spec = default_rules()[0].clone();
        spec.text = Some("(unclosed".into());
        let e = Classifier::new(&[spec.clone()]).unwrap_err();
        assert!(matches!(e, ClassifyError::Regex { .. }), "{e}");
        spec.name = "Bad Name".into();
        assert!(matches!(
            Classifier::new(&[spec.clone()]),
            Err(ClassifyError::BadName(_))
        ));
        spec.name = "ok".into();
        spec.text = None;
        assert!(matches!(
            Classifier::new(&[spec]),
            Err(ClassifyError::NoMatcher(_))
        ));
    }
}
