//! Structural checks of the Helm chart in `charts/khai`, with no Helm and no cluster (Helm
//! cannot be installed here): the chart metadata, that every value the templates read is in
//! values.yaml, that every helper they include is defined, and that template blocks balance.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::Value;
use std::path::PathBuf;

fn chart() -> PathBuf {
    support::repo_root().join("charts/khai")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(chart().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn templates() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(chart().join("templates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// Every `{{ ... }}` action of a template.
fn actions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let end = after.find("}}").expect("an unclosed {{");
        out.push(
            after[..end]
                .trim_matches(|c: char| c == '-' || c.is_whitespace())
                .to_string(),
        );
        rest = &after[end + 2..];
    }
    out
}

#[test]
fn chart_metadata_follows_helm_conventions() {
    let meta: Value = serde_saphyr::from_str(&read("Chart.yaml")).unwrap();
    assert_eq!(meta["apiVersion"], "v2");
    assert_eq!(meta["name"], "khai");
    assert_eq!(meta["type"], "application");
    assert_eq!(meta["appVersion"], env!("CARGO_PKG_VERSION"));
    assert!(meta["version"].as_str().unwrap().split('.').count() == 3);
    for file in [
        "values.yaml",
        "templates/_helpers.tpl",
        "templates/NOTES.txt",
        "templates/deployment.yaml",
        "templates/rbac.yaml",
        "templates/configmap.yaml",
        "templates/service.yaml",
        "templates/serviceaccount.yaml",
        "templates/servicemonitor.yaml",
        "templates/pdb.yaml",
    ] {
        assert!(
            chart().join(file).is_file(),
            "charts/khai/{file} is missing"
        );
    }
}

#[test]
fn every_value_the_templates_read_is_in_values_yaml() {
    let values: Value = serde_saphyr::from_str(&read("values.yaml")).unwrap();
    for (name, text) in templates() {
        let mut rest = text.as_str();
        while let Some(i) = rest.find(".Values.") {
            rest = &rest[i + ".Values.".len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '_')
                .collect();
            let mut v = &values;
            for key in path.trim_end_matches('.').split('.') {
                v = v
                    .get(key)
                    .unwrap_or_else(|| panic!("{name}: .Values.{path} is not in values.yaml"));
            }
        }
    }
}

#[test]
fn every_included_helper_is_defined_and_blocks_balance() {
    let helpers = read("templates/_helpers.tpl");
    let defined: Vec<String> = actions(&helpers)
        .iter()
        .filter_map(|a| a.strip_prefix("define "))
        .map(|d| d.trim().trim_matches('"').to_string())
        .collect();
    for (name, text) in templates() {
        let acts = actions(&text);
        for a in &acts {
            if let Some(i) = a.find("include \"") {
                let helper = a[i + 9..].split('"').next().unwrap();
                assert!(
                    defined.iter().any(|d| d == helper),
                    "{name}: includes {helper:?}, which _helpers.tpl does not define"
                );
            }
        }
        let opens = acts
            .iter()
            .filter(|a| {
                ["if ", "range ", "with ", "define "]
                    .iter()
                    .any(|k| a.starts_with(k))
            })
            .count();
        let ends = acts.iter().filter(|a| a.as_str() == "end").count();
        assert_eq!(opens, ends, "{name}: {opens} blocks opened, {ends} closed");
    }
}

#[test]
fn values_yaml_explains_its_settings() {
    let text = read("values.yaml");
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let top_level = line.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
        if !top_level || i == 0 {
            continue;
        }
        // A top-level key is introduced by a comment, or follows a related key directly.
        let prev = lines[i - 1].trim_start();
        let related = !prev.is_empty() && !prev.starts_with('#');
        assert!(
            prev.starts_with('#') || related,
            "values.yaml:{}: `{line}` has no comment above it",
            i + 1
        );
    }
}
