//! The JSON Schemas users' tools read: the config's
//! (docs/reference/config.schema.json, `remedy config-schema`) and the
//! chart's values (deploy/helm/remedy/values.schema.json). A typo or a wrong
//! type is refused, with the path named, by the schema itself (as an
//! editor's yaml-language-server checks it: scripts/check-schema.py) and by
//! `helm lint` with Helm 3 and Helm 4; every config the repository ships
//! passes. src/cli/reference.rs checks that the files are what the code
//! generates.

use crate::helm::{helm, helm4};
use crate::support::repo;
use std::path::Path;
use std::process::Command;

const CONFIG_SCHEMA: &str = "docs/reference/config.schema.json";

/// The configs the repository ships, each naming the schema in its
/// `yaml-language-server` comment, relative to itself.
const SHIPPED: [&str; 3] = [
    "deploy/base/config.yaml",
    "deploy/components/remedy-sidecar/config.yaml",
    "deploy/overlays/standalone-namespaced/config.yaml",
];

/// `scripts/check-schema.py SCHEMA FILES...`: (success, output).
fn check_schema(args: &[&str]) -> (bool, String) {
    let out = Command::new("python3")
        .arg("scripts/check-schema.py")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("python3");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !said.contains("Traceback"),
        "scripts/check-schema.py failed to run (python3's jsonschema and PyYAML?):\n{said}"
    );
    (out.status.success(), said)
}

#[test]
fn the_config_schema_refuses_an_unknown_key_and_a_wrong_type_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("config.yaml");
    std::fs::write(
        &bad,
        "tick: 5\nbreaker: {open_ratoi: 0.3}\nprofiles: [capi-machine, capi-machin]\n\
         alerts: [{alertname: A, select: {kind_lable: kind}}]\n",
    )
    .unwrap();
    let (ok, said) = check_schema(&[CONFIG_SCHEMA, bad.to_str().unwrap()]);
    assert!(!ok, "{said}");
    for want in [
        ": /tick: 5 is not of type 'string'",
        ": /breaker: Additional properties are not allowed ('open_ratoi' was unexpected)",
        ": /profiles/1: 'capi-machin' is not valid",
        ": /alerts/0/select: Additional properties are not allowed ('kind_lable' was unexpected)",
    ] {
        assert!(said.contains(want), "{want:?} not in:\n{said}");
    }
    assert_eq!(said.lines().count(), 4, "{said}");
    // remedy itself refuses the same file.
    let out = Command::new(env!("CARGO_BIN_EXE_remedy"))
        .args(["check-config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn every_shipped_config_passes_the_schema_and_names_it() {
    let mut files: Vec<String> = SHIPPED.iter().map(|s| s.to_string()).collect();
    for seed in std::fs::read_dir(repo().join("fuzz/seeds/config")).unwrap() {
        let p = seed.unwrap().path();
        files.push(p.strip_prefix(repo()).unwrap().display().to_string());
    }
    // The configs the docs show: the guides' (`# remedy config`) and the
    // full example, which the parser accepts too (config's unit tests).
    let dir = tempfile::tempdir().unwrap();
    let mut pages: Vec<_> = std::fs::read_dir(repo().join("docs/guides"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    pages.push(repo().join("docs/reference/config-example.md"));
    let mut blocks = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for block in text.split("```yaml\n").skip(1) {
            let block = block.split("```").next().unwrap_or_default();
            if page.ends_with("config-example.md") || block.starts_with("# remedy config") {
                blocks += 1;
                let file = dir.path().join(format!("block-{blocks}.yaml"));
                std::fs::write(&file, block).unwrap();
                files.push(file.display().to_string());
            }
        }
    }
    assert!(blocks >= 6, "{blocks} configs in the docs");
    let mut args = vec![CONFIG_SCHEMA];
    args.extend(files.iter().map(String::as_str));
    let (ok, said) = check_schema(&args);
    assert!(ok, "{said}");
    let (ok, said) = check_schema(&[
        "--key",
        "config",
        CONFIG_SCHEMA,
        "deploy/helm/remedy/values.yaml",
    ]);
    assert!(ok, "{said}");
    // What editors read: the comment's path, from the file, is the schema.
    for (file, schema) in SHIPPED.iter().map(|f| (*f, CONFIG_SCHEMA)).chain([(
        "deploy/helm/remedy/values.yaml",
        "deploy/helm/remedy/values.schema.json",
    )]) {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        let first = text.lines().next().unwrap_or_default();
        let rel = first
            .strip_prefix("# yaml-language-server: $schema=")
            .unwrap_or_else(|| panic!("{file}: first line {first:?} names no schema"));
        let named = repo().join(Path::new(file).parent().unwrap()).join(rel);
        assert_eq!(
            std::fs::canonicalize(&named).unwrap_or_else(|e| panic!("{file}: {rel}: {e}")),
            std::fs::canonicalize(repo().join(schema)).unwrap(),
            "{file}"
        );
    }
}

/// `helm lint` of the chart with a values file: (success, output).
fn lint(bin: &Path, values: Option<&Path>) -> (bool, String) {
    let mut cmd = Command::new(bin);
    cmd.args(["lint", "deploy/helm/remedy"]).current_dir(repo());
    if let Some(v) = values {
        cmd.arg("-f").arg(v);
    }
    let out = cmd.output().unwrap_or_else(|e| {
        panic!(
            "{} ({e}): run `source scripts/lib/install.sh` or set HELM/HELM4",
            bin.display()
        )
    });
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn helm_lint_refuses_a_typo_and_a_wrong_type_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("values.yaml");
    std::fs::write(
        &bad,
        "replicaz: 3\nservice: {port: \"80\"}\nconfig:\n  tick: 5\n  breaker: {open_ratoi: 0.3}\n",
    )
    .unwrap();
    for bin in [helm(), helm4()] {
        let (ok, said) = lint(&bin, None);
        assert!(ok, "{}: the chart's defaults:\n{said}", bin.display());
        let (ok, said) = lint(&bin, Some(&bad));
        assert!(!ok, "{}: {said}", bin.display());
        for want in [
            "additional properties 'replicaz' not allowed",
            "at '/service/port': got string, want integer",
            "at '/config/tick': got number, want string",
            "at '/config/breaker': additional properties 'open_ratoi' not allowed",
        ] {
            assert!(
                said.contains(want),
                "{}: {want:?} not in:\n{said}",
                bin.display()
            );
        }
    }
}
