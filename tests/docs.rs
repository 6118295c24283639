//! The docs cannot rot: the configuration reference matches the config model field for field,
//! every config and script quoted in the docs loads the way `khai check` loads it, every metric
//! family docs/operations.md names is one khai registers (and the other way round), and every
//! relative link in README.md and docs/*.md points at a file (and heading) that exists.
//!
//! No cluster. The conventions the docs follow (stated for authors in docs/README.md):
//!
//! - `<!-- fields: PATH... -->` in docs/configuration.md comes before a table whose first column
//!   names, in backticks, every field of the config table PATH (`root`, `operator`,
//!   `crd.versions`, ...). The fields the model accepts are read from the model itself: the
//!   parser is fed a table holding one unknown key, and every table is `deny_unknown_fields`,
//!   so its error lists the accepted ones (`expected one of ...`).
//! - ```` ```toml operator.toml ````: a complete config. The ```` ```rust scripts/x.rhai ```` (or
//!   `rhai`) blocks after it, up to the next complete config, are its scripts; together they
//!   load through `Operator::load_memory`, which parses, validates, compiles every script and
//!   checks every named function, as `khai check` does.
//! - ```` ```toml examples/x/operator.toml ````, ```` ```rust examples/x/y.rhai ````: a file of the
//!   repository quoted whole; it must be that file, byte for byte.
//! - any other ```` ```toml ````: parsed and validated as `khai check` does (keys, types, the
//!   schema rules), without reading the scripts and files it names; any other ```` ```rust ```` or ```` ```rhai ````: compiles as Rhai;
//!   ```` ```yaml ````: parses as YAML.
//! - the tables under `## The standard library` in docs/scripts.md: their first column names
//!   every function of `src/script/stdlib/` (the `pub fn`s of each file's `api` module), and
//!   each example `` `expression` → `result` `` runs through khai's engine and gives the result;
//!   so does each example of the table under `## Rhai's own functions`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, as paths relative to the repository.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

fn line_of(src: &str, offset: usize) -> usize {
    src[..offset].matches('\n').count() + 1
}

/// A fenced code block: where it starts, its info string, its text.
struct Block {
    line: usize,
    info: String,
    text: String,
}

fn code_blocks(src: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (event, range) in Parser::new_ext(src, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                open = Some(Block {
                    line: line_of(src, range.start),
                    info: info.to_string(),
                    text: String::new(),
                });
            }
            Event::Text(t) => {
                if let Some(b) = open.as_mut() {
                    b.text.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => out.extend(open.take()),
            _ => {}
        }
    }
    out
}

fn fail_with(problems: Vec<String>) {
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// The configuration reference against the model.

const PROBE: &str = "__not_a_field__";

/// A minimal `[[crd]]` that later lines can add sub-tables to.
const CRD: &str = "[[crd]]\ngroup = \"g.khai.dev\"\nkind = \"K\"\nversions = [\"v1\"]\n";
const CONTROLLER: &str = "[[controller]]\nfor = \"K\"\nscript = \"k.rhai\"\n";

/// Each table of the config, and a config whose only unknown key sits in that table.
fn probes() -> Vec<(&'static str, String)> {
    let p = format!("{PROBE} = 0\n");
    vec![
        ("root", p.clone()),
        ("operator", format!("[operator]\n{p}")),
        (
            "operator.extra_rbac",
            format!("[[operator.extra_rbac]]\n{p}"),
        ),
        ("operator.startup", format!("[operator.startup]\n{p}")),
        ("operator.http", format!("[operator.http]\n{p}")),
        ("operator.cleanup", format!("[operator.cleanup]\n{p}")),
        ("crd", format!("[[crd]]\n{p}")),
        (
            "crd.printer_columns",
            format!("{CRD}[[crd.printer_columns]]\n{p}"),
        ),
        ("crd.scale", format!("{CRD}[crd.scale]\n{p}")),
        (
            "crd.rules",
            format!("{CRD}[[crd.rules]]\nrule = \"true\"\n{p}"),
        ),
        (
            "FIELD.rules",
            format!(
                "{CRD}[crd.spec.x]\ntype = \"string\"\n[[crd.spec.x.rules]]\nrule = \"true\"\n{p}"
            ),
        ),
        ("crd.spec.FIELD", format!("{CRD}[crd.spec.x]\n{p}")),
        ("crd.status.FIELD", format!("{CRD}[crd.status.x]\n{p}")),
        (
            "FIELD.items",
            format!("{CRD}[crd.spec.x]\ntype = \"array\"\n[crd.spec.x.items]\n{p}"),
        ),
        (
            "FIELD.properties.NAME",
            format!("{CRD}[crd.spec.x]\ntype = \"object\"\n[crd.spec.x.properties.y]\n{p}"),
        ),
        (
            "FIELD.values",
            format!("{CRD}[crd.spec.x]\ntype = \"map\"\n[crd.spec.x.values]\n{p}"),
        ),
        ("controller", format!("[[controller]]\n{p}")),
        (
            "controller.watches",
            format!("{CONTROLLER}[[controller.watches]]\n{p}"),
        ),
        (
            "controller.backoff",
            format!("{CONTROLLER}[controller.backoff]\n{p}"),
        ),
        (
            "controller.budget",
            format!("{CONTROLLER}[controller.budget]\n{p}"),
        ),
        ("operator.uses", format!("[[operator.uses]]\n{p}")),
        ("webhook", format!("[[webhook]]\n{p}")),
        (
            "webhook.match_conditions",
            format!(
                "[[webhook]]\nfor = \"K\"\nscript = \"k.rhai\"\n[[webhook.match_conditions]]\n{p}"
            ),
        ),
        ("webhook_server", format!("[webhook_server]\n{p}")),
        ("policy", format!("[[policy]]\n{p}")),
        (
            "policy.rules",
            format!("[[policy]]\nname = \"p\"\nfor = [\"K\"]\n[[policy.rules]]\n{p}"),
        ),
        (
            "webhook_server.service",
            format!("[webhook_server.service]\n{p}"),
        ),
        ("handler", format!("[[handler]]\n{p}")),
        ("timer", format!("[[timer]]\n{p}")),
        ("daemon", format!("[[daemon]]\n{p}")),
        ("index", format!("[[index]]\n{p}")),
        ("schedule", format!("[[schedule]]\n{p}")),
    ]
}

/// The fields the parser accepts in the table `src` puts an unknown key into, read from its
/// `unknown field` error (serde: "expected one of `a`, `b`", "expected `a`", "there are no
/// fields").
fn accepted_fields(table: &str, src: &str) -> BTreeSet<String> {
    let err = match khai::config::parse(Path::new("operator.toml"), src) {
        Ok(_) => panic!("{table}: the model accepted the unknown key {PROBE}:\n{src}"),
        Err(e) => e.message,
    };
    let marker = format!("unknown field `{PROBE}`");
    let Some(rest) = err.strip_prefix(&marker) else {
        panic!("{table}: expected an unknown-field error, got: {err}\n{src}");
    };
    rest.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// `crd.versions` entries are an untagged enum (`"v1"` or a table), whose error lists no
/// fields: the table's fields are read from the model serialized back (every field of
/// `CrdVersionSpec` is serialized, none skipped).
fn version_fields() -> BTreeSet<String> {
    let src = CRD.replace("[\"v1\"]", "[{ name = \"v1\" }]");
    let model = khai::config::parse(Path::new("operator.toml"), &src).unwrap();
    let json = serde_json::to_value(&model).unwrap();
    json["crd"][0]["versions"][0]
        .as_object()
        .expect("a version table serializes as a map")
        .keys()
        .cloned()
        .collect()
}

/// One documented field: the line of its row and its `default` cell (the third column).
#[derive(Clone)]
struct Row {
    line: usize,
    default: String,
}

/// `<!-- fields: a b -->` marks, in docs/configuration.md, and the fields of the table after
/// each (first column, in backticks).
fn documented_fields(src: &str) -> BTreeMap<String, BTreeMap<String, Row>> {
    let mut out: BTreeMap<String, BTreeMap<String, Row>> = BTreeMap::new();
    let lines: Vec<&str> = src.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        i += 1;
        let Some(ids) = line
            .strip_prefix("<!-- fields:")
            .and_then(|r| r.strip_suffix("-->"))
        else {
            continue;
        };
        let mut fields = BTreeMap::new();
        while i < lines.len() && lines[i].trim().is_empty() {
            i += 1;
        }
        let mut row = 0;
        while i < lines.len() && lines[i].trim_start().starts_with('|') {
            row += 1;
            let cells: Vec<&str> = lines[i].split('|').collect();
            // The header and the separator row come first.
            if row > 2 {
                let first = cells.get(1).copied().unwrap_or_default().trim();
                let name = first.trim_matches('`');
                assert!(
                    first.starts_with('`') && first.ends_with('`') && !name.contains('`'),
                    "docs/configuration.md:{}: a field row must start with one `field`: {}",
                    i + 1,
                    lines[i]
                );
                let default = cells.get(3).copied().unwrap_or_default().trim().to_string();
                fields.insert(
                    name.to_string(),
                    Row {
                        line: i + 1,
                        default,
                    },
                );
            }
            i += 1;
        }
        for id in ids.split_whitespace() {
            let previous = out.insert(id.to_string(), fields.clone());
            assert!(
                previous.is_none(),
                "docs/configuration.md: table {id} twice"
            );
        }
    }
    out
}

/// Every field the config model accepts is in docs/configuration.md, in the table of
/// its section, and the page documents no field the model does not accept.
#[test]
fn the_configuration_reference_documents_exactly_the_fields_the_model_accepts() {
    let doc = read(Path::new("docs/configuration.md"));
    let documented = documented_fields(&doc);
    let mut accepted: BTreeMap<String, BTreeSet<String>> = probes()
        .into_iter()
        .map(|(table, src)| (table.to_string(), accepted_fields(table, &src)))
        .collect();
    accepted.insert("crd.versions".into(), version_fields());
    // A sanity check of the probes themselves: a few fields everyone knows.
    assert!(accepted["root"].contains("crd") && accepted["controller"].contains("for"));

    let mut problems = Vec::new();
    for (table, fields) in &accepted {
        let Some(doc_fields) = documented.get(table) else {
            problems.push(format!(
                "docs/configuration.md: no `<!-- fields: {table} -->` table; the model accepts {}",
                fields.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
            continue;
        };
        for f in fields {
            if !doc_fields.contains_key(f) {
                problems.push(format!(
                    "docs/configuration.md: {table}.{f} is accepted by the model but not documented"
                ));
            }
        }
        for (f, Row { line, .. }) in doc_fields {
            if !fields.contains(f) {
                problems.push(format!(
                    "docs/configuration.md:{line}: {table}.{f} is documented but the model does not accept it"
                ));
            }
        }
    }
    for table in documented.keys() {
        if !accepted.contains_key(table) {
            problems.push(format!(
                "docs/configuration.md: table {table} is not a table of the model (or tests/docs.rs has no probe for it)"
            ));
        }
    }
    fail_with(problems);
}

/// Each table with only its required keys, and where its entry is in the model serialized
/// back: what the model fills in for every key left out.
fn defaults() -> Vec<(&'static str, String, &'static str)> {
    let field = format!("{CRD}spec.x = {{ type = \"string\" }}\n");
    let webhook = "[[webhook]]\nfor = \"K\"\nscript = \"k.rhai\"\n".to_string();
    let each = "for = \"K\"\nscript = \"k.rhai\"\n";
    vec![
        ("root", String::new(), ""),
        ("operator", String::new(), "/operator"),
        (
            "operator.extra_rbac",
            "[[operator.extra_rbac]]\napi_groups = []\nresources = []\nverbs = []\n".into(),
            "/operator/extra_rbac/0",
        ),
        (
            "operator.startup",
            "[operator.startup]\nscript = \"s.rhai\"\nfunction = \"f\"\n".into(),
            "/operator/startup",
        ),
        (
            "operator.http",
            "[operator.http]\n".into(),
            "/operator/http",
        ),
        ("crd", CRD.into(), "/crd/0"),
        (
            "crd.versions",
            CRD.replace("[\"v1\"]", "[{ name = \"v1\" }]"),
            "/crd/0/versions/0",
        ),
        (
            "crd.printer_columns",
            format!(
                "{CRD}printer_columns = [{{ name = \"a\", type = \"string\", json_path = \".spec.a\" }}]\n"
            ),
            "/crd/0/printer_columns/0",
        ),
        (
            "crd.scale",
            format!(
                "{CRD}scale = {{ spec_replicas_path = \".spec.r\", status_replicas_path = \".status.r\" }}\n"
            ),
            "/crd/0/scale",
        ),
        ("crd.spec.FIELD", field, "/crd/0/spec/x"),
        ("controller", CONTROLLER.into(), "/controller/0"),
        (
            "controller.backoff",
            format!("{CONTROLLER}backoff = {{}}\n"),
            "/controller/0/backoff",
        ),
        (
            "controller.budget",
            format!("{CONTROLLER}budget = {{}}\n"),
            "/controller/0/budget",
        ),
        ("webhook", webhook, "/webhook/0"),
        ("webhook_server", String::new(), "/webhook_server"),
        (
            "policy",
            "[[policy]]\nname = \"p\"\nfor = [\"K\"]\nrules = []\n".into(),
            "/policy/0",
        ),
        (
            "webhook_server.service",
            "[webhook_server.service]\nname = \"a\"\nnamespace = \"b\"\n".into(),
            "/webhook_server/service",
        ),
        (
            "handler",
            format!("[[handler]]\n{each}on = \"create\"\n"),
            "/handler/0",
        ),
        (
            "timer",
            format!("[[timer]]\n{each}function = \"f\"\ninterval = \"1m\"\n"),
            "/timer/0",
        ),
        (
            "daemon",
            format!("[[daemon]]\n{each}tick = \"f\"\ninterval = \"1m\"\n"),
            "/daemon/0",
        ),
        (
            "schedule",
            // Neither cron nor interval: parsed, not validated, so both show their defaults.
            "[[schedule]]\nname = \"s\"\nscript = \"s.rhai\"\nfunction = \"f\"\n".into(),
            "/schedule/0",
        ),
    ]
}

/// Whether a documented default says what the model fills in: numbers by value, the rest as
/// JSON.
fn same_value(doc: &serde_json::Value, model: &serde_json::Value) -> bool {
    match (doc.as_f64(), model.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => doc == model,
    }
}

/// The `default` column of docs/configuration.md says what the model fills in for a key left
/// out: a default written as a TOML value in backticks (`"khai"`, `64`, `[]`,
/// `{ base = "1s", cap = "5m" }`) must equal the model's, and `none` must be unset. Defaults
/// written in words (`lower-cased kind`) are not checked.
#[test]
fn the_configuration_reference_states_the_defaults_the_model_fills_in() {
    let doc = read(Path::new("docs/configuration.md"));
    let documented = documented_fields(&doc);
    let mut problems = Vec::new();
    let mut compared = 0;
    for (table, src, pointer) in defaults() {
        let model = khai::config::parse(Path::new("operator.toml"), &src)
            .unwrap_or_else(|e| panic!("{table}: {e}\n{src}"));
        let json = serde_json::to_value(&model).unwrap();
        let entry = json
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{table}: nothing at {pointer} in {json}"));
        for (field, row) in &documented[table] {
            let cell = row.default.as_str();
            let expected = if cell.starts_with("none") {
                serde_json::Value::Null
            } else if let Some(literal) = cell
                .strip_prefix('`')
                .and_then(|c| c.split('`').next())
                .and_then(|l| toml::from_str::<toml::Table>(&format!("v = {l}")).ok())
            {
                serde_json::to_value(&literal["v"]).unwrap()
            } else {
                continue;
            };
            compared += 1;
            let got = entry.get(field).unwrap_or(&serde_json::Value::Null);
            if !same_value(&expected, got) {
                problems.push(format!(
                    "docs/configuration.md:{}: {table}.{field}: documented default {cell}, the model fills in {got}",
                    row.line
                ));
            }
        }
    }
    assert!(compared > 50, "only {compared} defaults compared");
    fail_with(problems);
}

// ---------------------------------------------------------------------------------------------
// Code blocks.

/// The language and the optional path of an info string: `toml operator.toml`.
fn split_info(info: &str) -> (&str, Option<&str>) {
    let mut words = info.split_whitespace();
    (words.next().unwrap_or_default(), words.next())
}

/// A complete config and the scripts quoted after it.
struct Complete {
    at: String,
    data: BTreeMap<String, String>,
}

fn check_blocks(page: &Path, src: &str, problems: &mut Vec<String>, checked: &mut usize) {
    let mut configs: Vec<Complete> = Vec::new();
    for b in code_blocks(src) {
        let at = format!("{}:{}", page.display(), b.line);
        let (lang, path) = split_info(&b.info);
        let rhai = matches!(lang, "rust" | "rhai");
        match (lang, path) {
            (_, Some(p)) if p.starts_with("examples/") => {
                *checked += 1;
                match std::fs::read_to_string(root().join(p)) {
                    Ok(file) if file.trim_end() == b.text.trim_end() => {
                        if p.ends_with("operator.toml") {
                            let dir = root().join(p).parent().unwrap().to_path_buf();
                            if let Err(e) = khai::operator::Operator::load(&dir) {
                                problems.push(format!("{at}: {p} does not load: {e}"));
                            }
                        }
                    }
                    Ok(_) => problems.push(format!("{at}: differs from {p}; quote it whole")),
                    Err(e) => problems.push(format!("{at}: {p}: {e}")),
                }
            }
            ("toml", Some("operator.toml")) => {
                *checked += 1;
                configs.push(Complete {
                    at,
                    data: BTreeMap::from([("operator.toml".to_string(), b.text)]),
                });
            }
            (_, Some(p)) if rhai => match configs.last_mut() {
                Some(c) => {
                    c.data.insert(khai::config::files::key_of(p), b.text);
                }
                None => problems.push(format!(
                    "{at}: script {p} comes before any ```toml operator.toml block"
                )),
            },
            ("toml", _) => {
                *checked += 1;
                if let Err(e) = khai::config::check_source(Path::new("operator.toml"), &b.text) {
                    problems.push(format!("{at}: {e}"));
                }
            }
            _ if rhai => {
                *checked += 1;
                // khai's engine and limits; a fragment may use names defined around it
                // (`obj`, `ctx`), so variables need not be declared.
                let mut engine = khai::script::engine(&khai::script::Limits::default());
                engine.set_strict_variables(false);
                if let Err(e) = engine.compile(&b.text) {
                    problems.push(format!("{at}: does not compile as Rhai: {e}"));
                }
            }
            ("yaml", _) => {
                *checked += 1;
                if let Err(e) = serde_saphyr::from_str::<serde_json::Value>(&b.text) {
                    problems.push(format!("{at}: not YAML: {e}"));
                }
            }
            _ => {}
        }
    }
    for c in configs {
        let root = PathBuf::from(&c.at);
        if let Err(e) = khai::operator::Operator::load_memory(&root, c.data, None) {
            problems.push(format!("{}: the config does not load:\n{e}", c.at));
        }
    }
}

/// Every config, script and YAML document quoted in README.md and docs/*.md loads: complete
/// configs with their scripts as `khai check` loads them, quoted example files as they are in
/// examples/, fragments through the config checks (no files read) or the Rhai compiler.
#[test]
fn every_code_block_in_the_docs_loads() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        check_blocks(&page, &read(&page), &mut problems, &mut checked);
    }
    assert!(
        checked > 20,
        "only {checked} blocks checked: are the docs read?"
    );
    fail_with(problems);
}

/// The checks above catch what they claim to: a misspelled key, a script that does not compile,
/// and a complete config whose script lacks the function the config names.
#[test]
fn the_code_block_checks_catch_broken_blocks() {
    let page = "```toml\n[[controller]]\nfor = \"Hello\"\nown = [\"v1/ConfigMap\"]\nscript = \"h.rhai\"\n```\n\n\
                ```rust\nfn reconcile(obj, ctx) { #{ children: [ }\n```\n\n\
                ```toml operator.toml\n[[controller]]\nfor = \"v1/ConfigMap\"\nscript = \"h.rhai\"\n```\n\n\
                ```rust h.rhai\nfn recon(obj, ctx) {}\n```\n";
    let mut problems = Vec::new();
    let mut checked = 0;
    check_blocks(Path::new("broken.md"), page, &mut problems, &mut checked);
    assert_eq!(checked, 3, "{problems:?}");
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].contains("unknown field `own`"),
        "{}",
        problems[0]
    );
    assert!(
        problems[1].contains("does not compile as Rhai"),
        "{}",
        problems[1]
    );
    assert!(problems[2].contains("reconcile"), "{}", problems[2]);
}

/// README.md is a front page. Its first screen (before the first `---`) holds exactly
/// two commands, the demo and the whole test suite, and the page stays under 200 lines.
#[test]
fn the_readme_front_page_keeps_its_two_commands_and_its_length() {
    let readme = read(Path::new("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; move detail into docs/"
    );
    let first_screen = readme.split("\n---\n").next().unwrap();
    let commands: Vec<String> = code_blocks(first_screen)
        .into_iter()
        .map(|b| b.text.trim().to_string())
        .collect();
    assert_eq!(commands, ["scripts/demo", "scripts/test"]);
    for script in ["scripts/demo", "scripts/test"] {
        assert!(root().join(script).is_file(), "{script} is gone");
    }
}

/// The README's install section and docs/deploying.md's give the same two commands
/// (tests/e2e/helm.rs runs the README's).
#[test]
fn the_install_commands_are_the_same_in_the_readme_and_the_deploying_guide() {
    let block = |page: &str, heading: &str| -> String {
        let src = read(Path::new(page));
        let section = src
            .split(heading)
            .nth(1)
            .unwrap_or_else(|| panic!("{page} has a section {heading:?}"));
        code_blocks(section)
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{page}'s {heading:?} has a code block"))
            .text
            .trim()
            .to_string()
    };
    let readme = block("README.md", "\n## Install on a cluster\n");
    assert_eq!(readme.lines().count(), 2, "{readme}");
    assert_eq!(
        readme,
        block("docs/deploying.md", "\n## Install: two commands\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Metrics.

const METRIC_PREFIXES: [&str; 5] = [
    "khai_",
    "controller_runtime_",
    "workqueue_",
    "rest_client_",
    "leader_election_",
];

fn metric_name(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .unwrap_or(s.len());
    let name = &s[..end];
    (METRIC_PREFIXES.iter().any(|p| name.starts_with(p)) && name.len() > 8).then_some(name)
}

/// A source file without its unit-test modules (`#[cfg(test)] mod ... { ... }`, up to the
/// matching brace); a `#[cfg(test)]` on any other item leaves the rest of the file in place.
fn without_unit_tests(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        if !item.starts_with("mod ") {
            out.push_str(&rest[..at + "#[cfg(test)]".len()]);
            rest = after;
            continue;
        }
        out.push_str(&rest[..at]);
        let Some(open) = item.find('{') else {
            return out;
        };
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn unit_test_modules_are_cut_out_of_a_source_and_nothing_else() {
    let src =
        "a\n#[cfg(test)]\nfn helper() {}\nb\n#[cfg(test)]\nmod tests {\n fn t() { x }\n}\nc\n";
    let code = without_unit_tests(src);
    assert!(
        code.contains('a') && code.contains('b') && code.contains('c'),
        "{code}"
    );
    assert!(
        code.contains("fn helper") && !code.contains("fn t()"),
        "{code}"
    );
}

/// Every metric family registered in src/metrics: each `"name"` literal with a known prefix
/// outside the unit tests, without the `_bucket`/`_count` series of histograms.
fn registered_metrics() -> BTreeSet<String> {
    // The registry is built in mod.rs; the sharding and rollout metrics in their own files.
    let code: String = [
        "src/metrics/mod.rs",
        "src/metrics/shard.rs",
        "src/metrics/rollout.rs",
    ]
    .iter()
    .map(|f| without_unit_tests(&read(Path::new(f))))
    .collect();
    code.split('"')
        .skip(1)
        .step_by(2)
        .filter_map(|lit| metric_name(lit).filter(|n| *n == lit))
        .map(str::to_string)
        .collect()
}

/// The families of `registered_metrics` that are histograms: those made by `histogram(&r, …)` or
/// `histogram_with(&r, …)`, whose series end in `_bucket`, `_sum` and `_count`.
fn registered_histograms() -> BTreeSet<String> {
    let code = without_unit_tests(&read(Path::new("src/metrics/mod.rs")));
    let pieces: Vec<&str> = code.split("&r,").collect();
    pieces
        .windows(2)
        .filter(|w| {
            let before = w[0].trim_end();
            before.ends_with("histogram(") || before.ends_with("histogram_with(")
        })
        .filter_map(|w| w[1].split('"').nth(1).map(str::to_string))
        .collect()
}

/// Every metric a PromQL expression names: identifiers with a khai prefix (a histogram's series
/// reduced to its family), each with what follows it, to check its selector.
fn promql_metrics<'a>(expr: &'a str, histograms: &BTreeSet<String>) -> Vec<(String, &'a str)> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find(|c: char| c.is_ascii_lowercase()) {
        let word_start = &rest[start..];
        let end = word_start
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(word_start.len());
        let (word, after) = word_start.split_at(end);
        let preceded_by_word = rest[..start]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        if !preceded_by_word && let Some(name) = metric_name(word) {
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| histograms.contains(*f)))
                .unwrap_or(name);
            out.push((family.to_string(), after));
        }
        rest = after;
    }
    out
}

/// The chart's Grafana dashboard and Prometheus alerts (charts/khai/files) query only metric
/// families khai registers, so renaming a metric without them fails here; every alert selects
/// `job="khai"`, which templates/prometheusrule.yaml replaces with the release's own job.
#[test]
fn chart_dashboard_and_alerts_query_only_registered_metrics() {
    let registered = registered_metrics();
    let histograms = registered_histograms();
    assert!(
        histograms.contains("controller_runtime_reconcile_time_seconds"),
        "{histograms:?}"
    );
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();

    let dashboard: serde_json::Value =
        serde_json::from_str(&read(Path::new("charts/khai/files/dashboard.json"))).unwrap();
    let mut exprs = Vec::new();
    collect_queries(&dashboard, &mut exprs);
    assert!(
        exprs.len() > 20,
        "the dashboard has too few queries: {exprs:?}"
    );
    for expr in &exprs {
        for (name, _) in promql_metrics(expr, &histograms) {
            if !registered.contains(&name) {
                problems.push(format!(
                    "charts/khai/files/dashboard.json: `{name}` is not registered in src/metrics (in `{expr}`)"
                ));
            }
            used.insert(name);
        }
    }

    let alerts = read(Path::new("charts/khai/files/alerts.yaml"));
    let rules: serde_json::Value = serde_saphyr::from_str(&alerts).unwrap();
    let mut alert_names = BTreeSet::new();
    for rule in rules["groups"][0]["rules"].as_array().unwrap() {
        let alert = rule["alert"].as_str().unwrap();
        alert_names.insert(alert.to_string());
        let expr = rule["expr"].as_str().unwrap();
        for (name, after) in promql_metrics(expr, &histograms) {
            if !registered.contains(&name) {
                problems.push(format!(
                    "charts/khai/files/alerts.yaml: {alert}: `{name}` is not registered in src/metrics"
                ));
            }
            if !after.starts_with("{job=\"khai\"") {
                problems.push(format!(
                    "charts/khai/files/alerts.yaml: {alert}: `{name}` must select {{job=\"khai\", …}}, the job the chart rewrites"
                ));
            }
            used.insert(name);
        }
    }
    fail_with(problems);
    for alert in [
        "KhaiReconcileErrors",
        "KhaiHotLoop",
        "KhaiConfigReloadFailed",
        "KhaiWebhookSlow",
        "KhaiNoLeader",
    ] {
        assert!(
            alert_names.contains(alert),
            "no alert {alert}: {alert_names:?}"
        );
    }
    for family in [
        "khai_hot_loops_total",
        "khai_webhook_request_duration_seconds",
        "leader_election_master_status",
        "workqueue_depth",
    ] {
        assert!(used.contains(family), "nothing queries {family}: {used:?}");
    }
}

/// Every `expr` (a panel's query) and template variable `query` in a Grafana dashboard.
fn collect_queries(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => collect_queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_queries(v, out)),
        _ => {}
    }
}

/// `promtool check rules` accepts the chart's alerts. promtool comes from Debian's `prometheus`
/// package, which scripts/test installs and then sets `KHAI_TEST_REQUIRE_PROMTOOL`: there a
/// missing promtool fails the test; elsewhere the test says so and skips.
#[test]
fn promtool_accepts_the_chart_alerts() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/khai/files/alerts.yaml");
    let out = match std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("KHAI_TEST_REQUIRE_PROMTOOL").is_none(),
                "promtool is required (KHAI_TEST_REQUIRE_PROMTOOL) but cannot run: {e}"
            );
            eprintln!("promtool cannot run ({e}): install Debian's prometheus package; skipping");
            return;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool check rules failed:\n{text}");
    assert!(text.contains("SUCCESS"), "{text}");
}

/// docs/operations.md names every metric family khai registers, and only those.
#[test]
fn operations_documents_every_metric_family_and_no_other() {
    let src = read(Path::new("docs/operations.md"));
    let mut named = BTreeMap::new();
    for (event, range) in Parser::new(&src).into_offset_iter() {
        if let Event::Code(code) = event
            && let Some(name) = metric_name(&code)
        {
            named
                .entry(name.to_string())
                .or_insert(line_of(&src, range.start));
        }
    }
    let registered = registered_metrics();
    assert!(registered.len() > 20, "{registered:?}");
    let mut problems = Vec::new();
    for (name, line) in &named {
        if !registered.contains(name) {
            problems.push(format!(
                "docs/operations.md:{line}: `{name}` is not registered in src/metrics"
            ));
        }
    }
    for name in &registered {
        if !named.contains_key(name) {
            problems.push(format!(
                "docs/operations.md: `{name}` (src/metrics) is not documented"
            ));
        }
    }
    fail_with(problems);
}

// ---------------------------------------------------------------------------------------------
// Links.

/// GitHub's anchor of a heading: lower-cased, punctuation dropped, spaces to hyphens; a repeated
/// heading gets `-1`, `-2`, ...
fn anchors(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(src, Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Heading { level, .. }) if level <= HeadingLevel::H6 => {
                heading = Some(String::new());
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let text = heading.take().unwrap_or_default();
                let slug: String = text
                    .to_lowercase()
                    .chars()
                    .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
                    .map(|c| if c == ' ' { '-' } else { c })
                    .collect();
                let n = seen.entry(slug.clone()).or_insert(0);
                out.insert(if *n == 0 {
                    slug.clone()
                } else {
                    format!("{slug}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// Every relative link in README.md and docs/*.md names a file or directory that exists, and
/// an anchor into a Markdown page names one of its headings.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut problems = Vec::new();
    let mut links = 0;
    for page in pages() {
        let src = read(&page);
        let dir = page.parent().unwrap_or(Path::new(""));
        for (event, range) in Parser::new_ext(&src, Options::ENABLE_TABLES).into_offset_iter() {
            let dest = match event {
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => dest_url,
                _ => continue,
            };
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            links += 1;
            let at = format!("{}:{}", page.display(), line_of(&src, range.start));
            let (path, anchor) = dest.split_once('#').unwrap_or((&dest, ""));
            let target = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            if !root().join(&target).exists() {
                problems.push(format!("{at}: {dest}: no such file"));
                continue;
            }
            if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&read(&target)).contains(anchor)
            {
                problems.push(format!(
                    "{at}: {dest}: {} has no heading with that anchor",
                    target.display()
                ));
            }
        }
    }
    assert!(links > 20, "only {links} links found");
    fail_with(problems);
}

#[test]
fn anchors_are_made_the_way_github_makes_them() {
    let a = anchors(
        "# Webhooks\n## `[[webhook]]` keys\n## Testing webhooks offline\n## Keys\n## keys\n```sh\n# not a heading\n```\n",
    );
    let want = [
        "webhooks",
        "webhook-keys",
        "testing-webhooks-offline",
        "keys",
        "keys-1",
    ];
    assert_eq!(a, want.iter().map(|s| s.to_string()).collect());
}

// ---------------------------------------------------------------------------------------------
// The standard library's tables in docs/scripts.md against the modules.

/// One row of a standard library table: the functions its first cell names, and the
/// `expression` → `result` of its example cell.
struct LibraryRow {
    line: usize,
    functions: Vec<String>,
    example: Option<(String, Option<String>)>,
}

/// The rows of the tables under the H2 heading `section` in docs/scripts.md.
fn library_rows(src: &str, section: &str) -> Vec<LibraryRow> {
    let mut rows = Vec::new();
    let (mut in_section, mut heading, mut cell) = (false, None::<String>, 0);
    let mut row: Option<LibraryRow> = None;
    let mut codes: Vec<String> = Vec::new();
    for (event, range) in Parser::new_ext(src, Options::ENABLE_TABLES).into_offset_iter() {
        match event {
            Event::Start(Tag::Heading {
                level: HeadingLevel::H2,
                ..
            }) => {
                heading = Some(String::new());
            }
            Event::Text(t) if heading.is_some() => heading.as_mut().unwrap().push_str(&t),
            Event::End(TagEnd::Heading(HeadingLevel::H2)) => {
                in_section = heading.take().as_deref() == Some(section);
            }
            Event::Start(Tag::TableRow) if in_section => {
                cell = 0;
                row = Some(LibraryRow {
                    line: line_of(src, range.start),
                    functions: Vec::new(),
                    example: None,
                });
            }
            Event::Start(Tag::TableCell) => codes.clear(),
            Event::Code(c) => codes.push(c.to_string()),
            Event::End(TagEnd::TableCell) => {
                if let Some(r) = row.as_mut() {
                    match cell {
                        0 => r.functions = codes.clone(),
                        2 => {
                            let mut c = codes.clone().into_iter();
                            r.example = c.next().map(|expr| (expr, c.next()));
                        }
                        _ => {}
                    }
                }
                cell += 1;
            }
            Event::End(TagEnd::TableRow) => rows.extend(row.take()),
            _ => {}
        }
    }
    rows
}

/// The functions each module of src/script/stdlib defines for scripts: the `pub fn`s of its
/// `pub mod api` (in `<module>.rs`, or `<module>/mod.rs`), as `module::name`.
fn library_functions() -> BTreeSet<String> {
    let dir = root().join("src/script/stdlib");
    let mut out = BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let module = path.file_stem().unwrap().to_string_lossy().to_string();
        if module == "mod" {
            continue;
        }
        // A module split into files keeps its `api` in its mod.rs.
        let file = if path.is_dir() {
            path.join("mod.rs")
        } else {
            path
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let api = text.split("pub mod api {").nth(1).unwrap_or_default();
        let api = api.split("#[cfg(test)]").next().unwrap_or_default();
        for line in api.lines() {
            if let Some(rest) = line.trim().strip_prefix("pub fn ") {
                let name = rest.split('(').next().unwrap();
                out.insert(format!("{module}::{name}"));
            }
        }
    }
    out
}

/// Every function of the standard library has a row in docs/scripts.md, every row names
/// functions that exist, and every example runs through the real engine and gives the value
/// the table says.
#[test]
fn the_standard_library_tables_document_every_function_and_their_examples_run() {
    let page = Path::new("docs/scripts.md");
    let rows = library_rows(&read(page), "The standard library");
    let mut problems = Vec::new();
    let mut documented = BTreeSet::new();
    for row in &rows {
        for f in &row.functions {
            documented.insert(f.split('(').next().unwrap().to_string());
        }
    }
    check_examples(page, &rows, &mut problems);
    let defined = library_functions();
    assert!(defined.len() > 30, "only {} functions found", defined.len());
    for f in defined.difference(&documented) {
        problems.push(format!("{}: {f} is not documented", page.display()));
    }
    for f in documented.difference(&defined) {
        problems.push(format!(
            "{}: {f} is documented but not defined",
            page.display()
        ));
    }
    fail_with(problems);
}

/// Every example of the rows runs through the real engine and gives the value its row says.
fn check_examples(page: &Path, rows: &[LibraryRow], problems: &mut Vec<String>) {
    let engine = khai::script::engine(&khai::script::Limits::default());
    let json = |src: &str| -> Result<serde_json::Value, String> {
        let v = engine
            .eval::<rhai::Dynamic>(src)
            .map_err(|e| e.to_string())?;
        khai::script::convert::to_json(&v).map_err(|e| e.to_string())
    };
    for row in rows {
        let at = format!("{}:{}", page.display(), row.line);
        match &row.example {
            Some((expr, expected)) => match (json(expr), expected.as_deref().map(json)) {
                (Ok(got), Some(Ok(want))) if got != want => {
                    problems.push(format!("{at}: {expr} gives {got}, the table says {want}"));
                }
                (Err(e), _) => problems.push(format!("{at}: {expr} fails: {e}")),
                (_, Some(Err(e))) => problems.push(format!("{at}: the result fails: {e}")),
                _ => {}
            },
            None => problems.push(format!("{at}: the row has no example")),
        }
    }
}

/// The table of Rhai's own functions a port reaches for: every example runs through khai's
/// engine and gives what the table says, so the porting docs cannot claim what Rhai does not do.
#[test]
fn the_table_of_rhais_own_functions_tells_what_they_do() {
    let page = Path::new("docs/scripts.md");
    let rows = library_rows(&read(page), "Rhai's own functions");
    assert!(rows.len() > 15, "only {} rows found", rows.len());
    let mut problems = Vec::new();
    check_examples(page, &rows, &mut problems);
    fail_with(problems);
}
