//! The generated reference pages under docs/reference/ and the JSON Schemas
//! users' tools read: rendered from the config types (their JSON Schema),
//! the clap commands and the built-in profiles, so they cannot drift from
//! the code. The test below regenerates every file and fails when one
//! differs; `REMEDY_BLESS=1 cargo test --lib reference` writes them.

use crate::config::Config;
use crate::model::profile::{self, Profile};
use serde_json::{Map, Value};
use std::fmt::Write as _;

/// The config's JSON Schema, as `remedy config-schema` prints it.
pub const CONFIG_SCHEMA: &str = "docs/reference/config.schema.json";
/// The Helm chart's values schema: its own part is written by hand, its
/// `config` property is the config schema (filled in by [`values_schema`]).
pub const VALUES_SCHEMA: &str = "deploy/helm/remedy/values.schema.json";

const GENERATED: &str = "<!-- Generated from the code by src/cli/reference.rs: edit the code, then run\n     `REMEDY_BLESS=1 cargo test --lib reference` (a test fails while this page differs). -->\n";

/// Every generated file: its path in the repository and its text. The
/// values schema is built on `values_schema_now`, the checked-in file.
pub fn pages(values_schema_now: &str) -> Result<Vec<(&'static str, String)>, String> {
    let schema = Config::json_schema();
    Ok(vec![
        (CONFIG_SCHEMA, json_text(&schema)?),
        (VALUES_SCHEMA, values_schema(values_schema_now, &schema)?),
        ("docs/reference/configuration.md", configuration(&schema)),
        ("docs/reference/cli.md", cli(super::command())),
        (
            "docs/reference/profiles.md",
            profiles(&profile::builtins())?,
        ),
    ])
}

fn json_text(v: &Value) -> Result<String, String> {
    serde_json::to_string_pretty(v)
        .map(|t| t + "\n")
        .map_err(|e| e.to_string())
}

/// The chart's values schema with its `config` property and `$defs`
/// replaced by the config schema's, so `helm lint` and `helm install`
/// check `config:` as remedy will.
pub fn values_schema(now: &str, config: &Value) -> Result<String, String> {
    let mut values: Value =
        serde_json::from_str(now).map_err(|e| format!("{VALUES_SCHEMA}: {e}"))?;
    let mut root = config.clone();
    let root_map = root
        .as_object_mut()
        .ok_or("config schema is not an object")?;
    let defs = root_map.remove("$defs").unwrap_or_default();
    root_map.remove("$schema");
    root_map.remove("title");
    root_map.insert(
        "description".into(),
        "remedy's configuration, written to the ConfigMap as /etc/remedy/config.yaml (docs/reference/configuration.md).".into(),
    );
    let v = values
        .as_object_mut()
        .ok_or(format!("{VALUES_SCHEMA}: not an object"))?;
    v.insert("$defs".into(), defs);
    v.get_mut("properties")
        .and_then(Value::as_object_mut)
        .ok_or(format!("{VALUES_SCHEMA}: no properties"))?
        .insert("config".into(), root);
    json_text(&values)
}

// ---- configuration ----

/// One table row per key, depth first, from the schema.
fn configuration(schema: &Value) -> String {
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    let mut out = String::new();
    out.push_str("# Configuration\n\n");
    out.push_str(GENERATED);
    out.push_str(
        "\nremedy reads one YAML file (`remedy serve --config FILE`, mounted from a ConfigMap). \
         Unknown keys are errors; `remedy check-config FILE` validates a file and prints the \
         profiles it resolves to. Durations are written with their unit (`30s`, `5m`, `1h 30m`). \
         Editors check a file against the JSON Schema [`config.schema.json`](config.schema.json) \
         (`remedy config-schema` prints it): `deploy/base/config.yaml` names it in its \
         `yaml-language-server` comment.\n\n\
         Every key, its type, its default (empty: none, or required where marked) and what it does. \
         The `profiles[].` keys are those of a built-in with some settings replaced \
         (`{builtin: NAME, ...}`); a custom profile's keys are under [Profile](#profile).\n",
    );
    let mut rows = Vec::new();
    walk(schema, "", &defs, &mut rows, &mut Vec::new());
    push_table(&mut out, &rows);
    // A custom profile is large and has its own section.
    if let Some(p) = defs.get("Profile") {
        out.push_str("\n## Profile\n\nA custom profile: an entry of `profiles` that is a whole profile for any CRD (the built-ins are in [Built-in profiles](profiles.md)). ");
        out.push_str(&one_line(p["description"].as_str().unwrap_or("")));
        out.push('\n');
        let mut rows = Vec::new();
        walk(p, "", &defs, &mut rows, &mut vec!["Profile".into()]);
        push_table(&mut out, &rows);
    }
    out
}

struct Row {
    key: String,
    ty: String,
    default: String,
    doc: String,
}

fn push_table(out: &mut String, rows: &[Row]) {
    out.push_str("\n| key | type | default | description |\n|---|---|---|---|\n");
    for r in rows {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} |",
            r.key,
            cell(&r.ty),
            cell(&r.default),
            cell(&r.doc)
        );
    }
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Resolves a `$ref` to its definition's name and schema.
fn deref<'a>(s: &'a Value, defs: &'a Map<String, Value>) -> (Option<&'a str>, &'a Value) {
    match s["$ref"].as_str().and_then(|r| r.strip_prefix("#/$defs/")) {
        Some(name) => (Some(name), defs.get(name).unwrap_or(&Value::Null)),
        None => (None, s),
    }
}

/// An object with named keys (a config section), not a map.
fn is_section(s: &Value) -> bool {
    s["properties"].is_object()
}

fn walk(
    s: &Value,
    prefix: &str,
    defs: &Map<String, Value>,
    rows: &mut Vec<Row>,
    seen: &mut Vec<String>,
) {
    let Some(props) = s["properties"].as_object() else {
        return;
    };
    let required: Vec<&str> = s["required"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (key, field) in props {
        let path = format!("{prefix}{key}");
        let (name, target) = deref(optional_of(field).unwrap_or(field), defs);
        let doc = field["description"]
            .as_str()
            .or(target["description"].as_str())
            .map(one_line)
            .unwrap_or_default();
        let default = if required.contains(&key.as_str()) {
            "required".to_string()
        } else if is_section(target) {
            // Its keys below say theirs.
            String::new()
        } else {
            default_text(&field["default"])
        };
        rows.push(Row {
            key: path.clone(),
            ty: type_text(field, defs),
            default,
            doc,
        });
        // Into a section, a list's items, and each form of an untagged
        // enum (a built-in override among `profiles`) that is a section.
        let (inner, inner_path) = if is_section(target) || target["items"].is_null() {
            (target, format!("{path}."))
        } else {
            (deref(&target["items"], defs).1, format!("{path}[]."))
        };
        let (inner_name, inner) = match inner["$ref"].as_str() {
            Some(_) => deref(inner, defs),
            None => (name, inner),
        };
        let mut subs = vec![(inner_name, inner)];
        for key in ["anyOf", "oneOf"] {
            for alt in inner[key].as_array().into_iter().flatten() {
                subs.push(deref(alt, defs));
            }
        }
        for (sub_name, sub) in subs {
            let name = sub_name.unwrap_or("").to_string();
            // A custom profile has its own section; no schema loops.
            if !is_section(sub) || name == "Profile" || seen.contains(&name) {
                continue;
            }
            seen.push(name);
            walk(sub, &inner_path, defs, rows, seen);
            seen.pop();
        }
    }
}

/// `anyOf: [X, null]` (an `Option` of a section) is X, optional.
fn optional_of(s: &Value) -> Option<&Value> {
    match s["anyOf"].as_array().map(Vec::as_slice) {
        Some([x, null]) if null["type"] == "null" => Some(x),
        _ => None,
    }
}

fn default_text(d: &Value) -> String {
    match d {
        Value::Null => String::new(),
        Value::Array(a) if a.is_empty() => "`[]`".into(),
        Value::Object(o) if o.is_empty() => "`{}`".into(),
        Value::String(t) if t.is_empty() => "`\"\"`".into(),
        Value::String(t) => format!("`{t}`"),
        other => {
            let t = other.to_string();
            if t.len() > 60 {
                "(long: `remedy config-schema` has it)".into()
            } else {
                format!("`{t}`")
            }
        }
    }
}

fn type_text(s: &Value, defs: &Map<String, Value>) -> String {
    if let Some(x) = optional_of(s) {
        return format!("{} (optional)", type_text(x, defs));
    }
    let (name, s) = deref(s, defs);
    if name == Some("Duration") {
        return "duration".into();
    }
    if let Some(e) = s["enum"].as_array() {
        return e
            .iter()
            .map(|v| {
                format!(
                    "`{}`",
                    v.as_str().map_or_else(|| v.to_string(), String::from)
                )
            })
            .collect::<Vec<_>>()
            .join(" | ");
    }
    if let Some(c) = s["const"].as_str() {
        return format!("`{c}`");
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = s[key].as_array() {
            return alts
                .iter()
                .map(|a| alternative_text(a, defs))
                .collect::<Vec<_>>()
                .join(", or ");
        }
    }
    let types: Vec<&str> = match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let optional = types.contains(&"null");
    let t = match types.iter().find(|t| **t != "null").copied() {
        Some("array") => format!("list of {}", type_text(&s["items"], defs)),
        Some("object") if !is_section(s) => match &s["additionalProperties"] {
            Value::Object(_) => format!("map of {}", type_text(&s["additionalProperties"], defs)),
            _ => "object".into(),
        },
        Some("object") if name == Some("Profile") => "a custom profile ([below](#profile))".into(),
        Some("object") => "object".into(),
        Some("integer") => "integer".into(),
        Some("number") => "number".into(),
        Some(t) => t.to_string(),
        None if s.as_object().is_some_and(Map::is_empty) => "any".into(),
        None => name.unwrap_or("any").to_string(),
    };
    if optional {
        format!("{t} (optional)")
    } else {
        t
    }
}

/// One form of an untagged enum: a one-key object (`{label: KEY}`) is
/// spelled out, as the config writes it.
fn alternative_text(a: &Value, defs: &Map<String, Value>) -> String {
    let (_, t) = deref(a, defs);
    match t["properties"].as_object() {
        Some(p) if p.len() == 1 => {
            let (k, v) = p
                .iter()
                .next()
                .map(|(k, v)| (k.clone(), v))
                .unwrap_or_default();
            format!("`{{{k}: {}}}`", type_text(v, defs))
        }
        _ => type_text(a, defs),
    }
}

// ---- CLI ----

fn cli(mut cmd: clap::Command) -> String {
    cmd.build();
    let mut out = String::new();
    out.push_str("# Command line\n\n");
    out.push_str(GENERATED);
    out.push_str(
        "\nEvery command and flag of `remedy`, from its clap definition. Run as `kubectl-remedy` \
         (a copy or link on PATH), it is the kubectl plugin: `kubectl remedy status`. \
         Exit status: 0 on success, 2 for a config or argument that cannot be used, 1 for a \
         failure while running; errors print as `error[LABEL]: message`.\n",
    );
    let _ = writeln!(
        out,
        "\n```text\n{}\n```",
        cmd.render_long_help().to_string().trim_end()
    );
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" || sub.is_hide_set() {
            continue;
        }
        let _ = writeln!(out, "\n## remedy {}\n", sub.get_name());
        if let Some(about) = sub.get_long_about().or(sub.get_about()) {
            let _ = writeln!(out, "{}\n", one_line(&about.to_string()));
        }
        let mut sub = sub.clone().bin_name(format!("remedy {}", sub.get_name()));
        let usage = sub.render_usage().to_string();
        let _ = writeln!(out, "```text\n{}\n```\n", usage.trim_end());
        out.push_str("| argument | default | env | description |\n|---|---|---|---|\n");
        for a in sub.get_arguments() {
            // Global flags are in the overview above.
            if a.is_hide_set()
                || a.is_global_set()
                || matches!(a.get_id().as_str(), "help" | "version")
            {
                continue;
            }
            let name = match (a.get_long(), a.get_value_names()) {
                (Some(l), Some(v)) if a.get_num_args().is_none_or(|n| n.takes_values()) => {
                    format!("--{l} <{}>", v.join(" "))
                }
                (Some(l), _) => format!("--{l}"),
                (None, Some(v)) => format!("<{}>", v.join(" ")),
                (None, None) => format!("<{}>", a.get_id().as_str().to_uppercase()),
            };
            let defaults: Vec<String> = a
                .get_default_values()
                .iter()
                .map(|d| format!("`{}`", d.to_string_lossy()))
                .collect();
            let env = a
                .get_env()
                .map(|e| format!("`{}`", e.to_string_lossy()))
                .unwrap_or_default();
            let mut help = a
                .get_long_help()
                .or(a.get_help())
                .map(|h| one_line(&h.to_string()))
                .unwrap_or_default();
            let values: Vec<String> = a
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| format!("`{}`", v.get_name()))
                .collect();
            if !values.is_empty() && a.get_action().takes_values() {
                help = format!("{help} One of {}.", values.join(", "))
                    .trim()
                    .to_string();
            }
            if a.is_required_set() {
                help = format!("Required. {help}").trim().to_string();
            }
            let _ = writeln!(
                out,
                "| `{name}` | {} | {env} | {} |",
                defaults.join(", "),
                cell(&help)
            );
        }
    }
    out
}

// ---- built-in profiles ----

fn profiles(builtins: &[Profile]) -> Result<String, String> {
    let mut out = String::new();
    out.push_str("# Built-in profiles\n\n");
    out.push_str(GENERATED);
    out.push_str(
        "\nWhat `remedy profiles` prints: the kinds remedy knows, where it reads their failure, \
         how it holds them and what remediation writes. A config names them in `profiles`, \
         overrides a few settings (`{builtin: capi-machine, version: v1beta2}`), or adds a \
         custom profile for any CRD ([Configuration](configuration.md#profile)).\n\n\
         | profile | group/version, kind | fields read | hold | remediation |\n|---|---|---|---|---|\n",
    );
    for p in builtins {
        let f = &p.fields;
        let mut read = Vec::new();
        for (name, paths) in [
            ("failure_reason", &f.failure_reason),
            ("failure_message", &f.failure_message),
            ("conditions", &f.conditions),
            ("state", &f.state),
            ("crash_count", &f.crash_count),
            ("failure_time", &f.failure_time),
            ("failure_domain", &f.failure_domain),
            ("owner", &f.owner),
        ] {
            if !paths.is_empty() {
                read.push(format!("{name} `{}`", paths.join("`, `")));
            }
        }
        let hold = match &p.hold {
            Some(h) => h.describe(),
            None => "none (never held)".into(),
        };
        let r = &p.remediation;
        let mut rem = Vec::new();
        if !r.clear_status.is_empty() {
            rem.push(format!("clears `{}`", r.clear_status.join("`, `")));
        }
        for reset in &r.reset_status {
            rem.push(format!("sets `{}` to `{}`", reset.path, reset.value));
        }
        for c in &r.clear_conditions {
            match &c.reason {
                Some(reason) => rem.push(format!("removes condition {} False ({reason})", c.type_)),
                None => rem.push(format!("removes condition {} False", c.type_)),
            }
        }
        if !r.keep_if_set.is_empty() {
            rem.push(format!(
                "never while `{}` is set",
                r.keep_if_set.join("`, `")
            ));
        }
        if let Some(a) = &r.skip_remediation_annotation {
            rem.push(format!("guarded by `{a}`"));
        }
        if let Some(retry) = &r.retry {
            rem.push(format!(
                "retries what its controller gave up on after {} quiet",
                humantime::format_duration(retry.quiet)
            ));
        }
        if let Some(b) = &p.backoff {
            rem.push(format!(
                "the controller's own backoff: `{}`",
                serde_json::to_value(b)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default()
            ));
        }
        let _ = writeln!(
            out,
            "| [`{}`](#{}) | {}, {} | {} | {} | {} |",
            p.name,
            p.name,
            p.api_version(),
            p.kind,
            cell(&read.join("; ")),
            cell(&hold),
            cell(&rem.join("; "))
        );
    }
    for p in builtins {
        let yaml = serde_yaml_ng::to_string(p).map_err(|e| e.to_string())?;
        let _ = writeln!(out, "\n## {}\n\n```yaml\n{}```", p.name, yaml);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn repo() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR"))
    }

    /// Every generated page is what the code renders now: changing a
    /// config field's doc comment, a flag or a built-in profile without
    /// regenerating fails here. `REMEDY_BLESS=1` writes them instead.
    #[test]
    fn reference_pages_are_current() {
        let read = |p: &str| std::fs::read_to_string(repo().join(p)).unwrap_or_default();
        let pages = pages(&read(VALUES_SCHEMA)).expect("render");
        let bless = std::env::var_os("REMEDY_BLESS").is_some();
        let mut stale = Vec::new();
        for (path, text) in &pages {
            if read(path) == *text {
                continue;
            }
            if bless {
                std::fs::write(repo().join(path), text).expect("write");
            } else {
                stale.push(*path);
            }
        }
        assert!(
            stale.is_empty(),
            "{stale:?} differ from the code: run `REMEDY_BLESS=1 cargo test --lib reference` and commit them"
        );
    }

    /// The check above sees a change: a doc comment the page does not
    /// have makes it differ.
    #[test]
    fn a_changed_doc_comment_changes_the_configuration_page() {
        let mut schema = Config::json_schema();
        let page = configuration(&schema);
        assert!(
            page.contains("| `tick` | duration | `5s` | How often decisions are re-evaluated. |"),
            "{page}"
        );
        schema["properties"]["tick"]["description"] = "Something else.".into();
        assert!(configuration(&schema).contains("| `tick` | duration | `5s` | Something else. |"));
    }

    #[test]
    fn the_configuration_page_has_every_section_and_nested_key() {
        let page = configuration(&Config::json_schema());
        for row in [
            "| `breaker.release.probe_every` | duration (optional) |",
            "| `alerts[].select.kind_label` |",
            "| `signals.prometheus.headers` | map of string |",
            "| `breaker.domain` | `cluster` \\| `kind` \\| `namespace` \\| `zone`, or `{label: string}`, or `{field: string}` | `cluster` |",
            "| `profiles` | list of ",
            "| `hold.resume.kind` | string | required |",
            "| `profiles[].controller_retries` | boolean (optional) |",
            "| `breaker.domain.label` | string | required |",
        ] {
            assert!(page.contains(row), "{row} not in:\n{page}");
        }
    }

    #[test]
    fn the_cli_page_has_every_command_and_flag() {
        let page = cli(super::super::command());
        for s in [
            "## remedy serve",
            "## remedy config-schema",
            "| `--tls-cert-file <TLS_CERT_FILE>` |",
            "| `--mode <MODE>` | `both` |",
            "[env: REMEDY_LOG_FORMAT=]",
        ] {
            assert!(page.contains(s), "{s} not in:\n{page}");
        }
    }
}
