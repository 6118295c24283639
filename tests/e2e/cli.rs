//! The `khai` binary's command line and its errors on bad input. No cluster needed: every
//! problem here must be found before khai connects to anything.

use std::path::Path;
use std::process::{Command, Output};

fn khai(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_khai"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("run khai")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Writes a copy of examples/hello into a temp dir with `edit` applied to one file.
fn hello_with(file: &str, edit: impl Fn(String) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    std::fs::create_dir_all(dir.path().join("scripts")).unwrap();
    for f in ["operator.toml", "scripts/hello.rhai"] {
        let mut text = std::fs::read_to_string(src.join(f)).unwrap();
        if f == file {
            text = edit(text);
        }
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    dir
}

#[test]
fn version_prints_the_crate_version() {
    let out = khai(&["version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("khai {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn every_command_has_help() {
    for cmd in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["check", "--help"],
        vec!["generate", "--help"],
        vec!["generate", "crds", "--help"],
        vec!["version", "--help"],
    ] {
        let out = khai(&cmd);
        assert!(out.status.success(), "{cmd:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage: khai"),
            "{cmd:?}"
        );
    }
}

/// A canary rollout's flags that make no sense are refused before anything starts, naming the
/// flag and the value.
#[test]
fn run_refuses_a_canary_out_of_range_or_without_a_candidate() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--config",
            "/nonexistent",
            "--candidate",
            "/nonexistent",
        ];
        args.extend(extra);
        let out = khai(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        stderr(&out).lines().next().unwrap_or_default().to_string()
    };
    assert_eq!(
        run(&["--candidate-percent", "150"]),
        "error: invalid value '150' for '--candidate-percent <PERCENT>': 150 is not in 0..=100"
    );
    assert_eq!(
        run(&["--candidate-percent", "10", "--max-error-ratio", "0"]),
        "error: invalid value '0' for '--max-error-ratio <RATIO>': \"0\" is not a ratio: a \
         number greater than 0, such as 1.5"
    );
    let out = khai(&[
        "run",
        "--config",
        "/nonexistent",
        "--candidate-percent",
        "10",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("required arguments were not provided:\n  --candidate <FILE|DIR>"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn run_with_a_missing_config_names_the_file_and_fails() {
    let out = khai(&["run", "--config", "/nonexistent/operator.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        "error: /nonexistent/operator.toml: no such file or directory"
    );
}

#[test]
fn run_with_invalid_toml_names_file_and_line() {
    let dir = hello_with("operator.toml", |t| {
        t.replace("kind = \"Hello\"", "kind = \"Hello")
    });
    let out = khai(&["run", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let expected = format!("error: {}/operator.toml:11:", dir.path().display());
    assert!(err.starts_with(&expected), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn run_with_a_script_syntax_error_names_script_and_line() {
    let dir = hello_with("scripts/hello.rhai", |t| {
        t.replace("let message = obj.spec.message;", "let message = ;")
    });
    let out = khai(&["run", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let expected = format!(
        "error: {}/scripts/hello.rhai:5:19: syntax error:",
        dir.path().display()
    );
    assert!(err.starts_with(&expected), "{err}");
}

#[test]
fn run_with_an_unknown_key_names_the_field() {
    let dir = hello_with("operator.toml", |t| t.replace("owns = ", "own = "));
    let out = khai(&["run", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("operator.toml:22:1: controller[0].own: unknown field `own`"),
        "{err}"
    );
}

#[test]
fn run_with_a_script_lacking_reconcile_says_which_function() {
    let dir = hello_with("scripts/hello.rhai", |t| {
        t.replace("fn reconcile(obj, ctx)", "fn reconcile(obj)")
    });
    let out = khai(&["run", "--config", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let d = dir.path().display();
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {d}/operator.toml:20:1: controller[0].reconcile: reconcile in {d}/scripts/hello.rhai must take 2 parameter(s): reconcile(obj, ctx)"
        )
    );
}

#[test]
fn check_names_a_misspelled_function_at_its_config_line() {
    let dir = hello_with("operator.toml", |t| {
        t.replace(
            "script = \"scripts/hello.rhai\"",
            "script = \"scripts/hello.rhai\"\nreconcile = \"reconcil\"",
        )
    });
    let out = khai(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let d = dir.path().display();
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {d}/operator.toml:24:13: controller[0].reconcile: function reconcil(obj, ctx) is not defined in {d}/scripts/hello.rhai (did you mean \"reconcile\"?)"
        )
    );
}

/// A CEL rule that does not parse is named at its line and field; `--kubernetes-version` names
/// what the config uses that the version lacks.
#[test]
fn check_parses_crd_rules_and_names_what_an_older_kubernetes_lacks() {
    let rule = |r: &str| {
        hello_with("operator.toml", |t| {
            t.replace(
                "[[controller]]",
                &format!("rules = [{{ rule = {r:?} }}]\n\n[[controller]]"),
            )
        })
    };
    let bad = rule("self.spec.message ==");
    let out = khai(&["check", bad.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let d = bad.path().display();
    assert!(
        err.starts_with(&format!("error: {d}/operator.toml:"))
            && err.contains(": crd[0].rules[0].rule: not valid CEL at column "),
        "{err}"
    );
    let good = rule("self.spec.message != ''");
    let out = khai(&["check", good.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = khai(&[
        "check",
        "--kubernetes-version",
        "v1.20.2",
        good.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("crd[0].rules: CRD validation rules (x-kubernetes-validations) need Kubernetes v1.25 or newer; on v1.20"),
        "{err}"
    );
    let out = khai(&[
        "check",
        "--kubernetes-version",
        "1.30",
        good.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn check_accepts_the_hello_example() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    let out = khai(&["check", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok (1 CRD, 1 controller)"));
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Writes `files` (relative path, content) into a new temp dir.
fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    dir
}

#[test]
fn generate_crds_prints_exactly_the_manifests_khai_run_applies() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    let out = khai(&["generate", "crds", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&stdout(&out)).unwrap();
    let config = khai::config::load(&dir).unwrap();
    let expected = khai::schema::crd_manifest(&config.model.crds[0]).unwrap();
    assert_eq!(docs, [expected]);
}

const TWO_CRDS: &str = r#"
[[crd]]
group = "gen.khai.dev"
kind = "Compact"
versions = ["v1"]
printer_columns = [{ name = "Size", type = "integer", json_path = ".spec.size" }]
scale = { spec_replicas_path = ".spec.size", status_replicas_path = ".status.size" }
spec.size = { type = "integer", default = 1 }
status.size = { type = "integer" }

[[crd]]
group = "gen.khai.dev"
kind = "Raw"
versions = ["v1"]
schema_file = "schemas/raw.json"
"#;

const RAW_SCHEMA: &str = r#"{"type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}"#;

#[test]
fn generate_crds_with_o_writes_one_file_per_crd_and_reads_schema_files() {
    let dir = dir_with(&[
        ("operator.toml", TWO_CRDS),
        ("schemas/raw.json", RAW_SCHEMA),
    ]);
    let target = dir.path().join("out");
    let out = khai(&[
        "generate",
        "crds",
        dir.path().to_str().unwrap(),
        "-o",
        target.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut written: Vec<_> = std::fs::read_dir(&target)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    written.sort();
    assert_eq!(
        written,
        ["compacts.gen.khai.dev.yaml", "raws.gen.khai.dev.yaml"]
    );
    assert_eq!(
        stdout(&out),
        format!(
            "wrote {0}/compacts.gen.khai.dev.yaml\nwrote {0}/raws.gen.khai.dev.yaml\n",
            target.display()
        )
    );
    let read = |name: &str| -> Vec<serde_json::Value> {
        serde_saphyr::from_multiple(&std::fs::read_to_string(target.join(name)).unwrap()).unwrap()
    };
    let compact = read("compacts.gen.khai.dev.yaml");
    assert_eq!(compact.len(), 1);
    let version = &compact[0]["spec"]["versions"][0];
    assert_eq!(
        version["additionalPrinterColumns"][0]["jsonPath"],
        ".spec.size"
    );
    assert_eq!(
        version["subresources"]["scale"]["specReplicasPath"],
        ".spec.size"
    );
    let raw = read("raws.gen.khai.dev.yaml");
    assert_eq!(
        raw[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
        serde_json::from_str::<serde_json::Value>(RAW_SCHEMA).unwrap()
    );
}

#[test]
fn generate_crds_refuses_a_schema_the_api_server_would_reject() {
    let bad = TWO_CRDS.replace("default = 1", "default = \"one\"");
    let dir = dir_with(&[("operator.toml", &bad), ("schemas/raw.json", RAW_SCHEMA)]);
    let out = khai(&["generate", "crds", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {}/operator.toml:8:43: crd[0].spec.size.default: \"one\" is not an integer",
            dir.path().display()
        )
    );
    assert_eq!(
        stdout(&out),
        "",
        "nothing is printed when the config is invalid"
    );
}

#[test]
fn generate_crds_names_a_schema_file_given_with_spec() {
    let both = TWO_CRDS.replace(
        "schema_file = \"schemas/raw.json\"",
        "schema_file = \"schemas/raw.json\"\nspec.x = { type = \"string\" }",
    );
    let dir = dir_with(&[("operator.toml", &both), ("schemas/raw.json", RAW_SCHEMA)]);
    let out = khai(&["generate", "crds", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {}/operator.toml:15:15: crd[1].schema_file: schema_file cannot be combined \
             with spec or status: the file is the whole openAPIV3Schema",
            dir.path().display()
        )
    );
}

/// `khai` with `args`, killed by `timeout` after 30 s: a check that blocks or reads forever
/// fails the test (exit 124) instead of hanging it.
fn khai_within_30s(args: &[&str]) -> Output {
    Command::new("timeout")
        .arg("30")
        .arg(env!("CARGO_BIN_EXE_khai"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .expect("run timeout khai")
}

/// `khai check` hung on a FIFO script, `/dev/zero` (growing to 9.9 GB) and
/// `/dev/urandom`; now each is an error at the line that names it.
#[test]
fn check_refuses_a_fifo_or_a_device_named_by_the_config_without_hanging() {
    let dir = hello_with("operator.toml", |t| {
        t.replace("short_names = [\"hi\"]", "schema_file = \"/dev/urandom\"")
            .replace(
                "spec.message = { type = \"string\", required = true, description = \"What to say\" }\n",
                "",
            )
            .replace("spec.replicas = { type = \"integer\", default = 1, minimum = 0, description = \"How many times to say it\" }\n", "")
            .replace("status.phase = { type = \"string\" }\nstatus.configMap = { type = \"string\" }\nstatus.observedGeneration = { type = \"integer\" }\n", "")
    });
    let out = khai_within_30s(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let d = dir.path().display();
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {d}/operator.toml:13:15: crd[0].schema_file: cannot read /dev/urandom: not a regular file (a character device)"
        )
    );

    let dir = hello_with("operator.toml", |t| {
        t.replace("script = \"scripts/hello.rhai\"", "script = \"/dev/zero\"")
    });
    let out = khai_within_30s(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("operator.toml:23:10: controller[0].script"),
        "{err}"
    );
    assert!(
        err.contains("not a regular file (a character device)"),
        "{err}"
    );

    let dir = hello_with("scripts/hello.rhai", |t| t);
    std::fs::remove_file(dir.path().join("scripts/hello.rhai")).unwrap();
    let made = Command::new("mkfifo")
        .arg(dir.path().join("scripts/hello.rhai"))
        .status()
        .unwrap();
    assert!(made.success());
    let out = khai_within_30s(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("not a regular file (a FIFO)"), "{err}");
}

/// Configs `khai check` accepted although they are wrong; each is now an error with
/// file:line and field.
#[test]
fn check_refuses_wrong_configs_with_file_line_and_field() {
    let cases: [(&str, &str, &str); 7] = [
        (
            "name = \"hello\"",
            "name = \"hello\"\nnamespaces = [\"\", \"Bad_NS\"]",
            "operator.toml:8:15: operator.namespaces[0]: an empty namespace would make khai watch every namespace",
        ),
        (
            "name = \"hello\"",
            "name = \"Hello_World\"",
            "operator.toml:7:8: operator.name: \"Hello_World\" is not an operator name",
        ),
        (
            "status.phase = { type = \"string\" }",
            "status.phase = { type = \"string\", pattern = \"^(Ready\" }",
            "operator.toml:16:45: crd[0].status.phase.pattern: \"^(Ready\" is not a regular expression the API server accepts (RE2 syntax): unclosed group",
        ),
        (
            "script = \"scripts/hello.rhai\"",
            "script = \"scripts/hello.rhai\"\nselector = \"app in (a\"",
            "operator.toml:24:12: controller[0].selector: \"app in (a\" is not a label selector: the set of values after `in` is not closed with `)`",
        ),
        (
            "script = \"scripts/hello.rhai\"",
            "script = \"scripts/hello.rhai\"\n\n[[controller]]\nfor = \"Hello\"\nscript = \"scripts/hello.rhai\"",
            "operator.toml:26:7: controller[1].for: controller[0] is also named \"hello\"",
        ),
        (
            "script = \"scripts/hello.rhai\"",
            "script = \"scripts/hello.rhai\"\nbackoff = { base = \"10m\" }",
            "operator.toml:24:20: controller[0].backoff.base: base 10m is longer than cap 5m",
        ),
        (
            "name = \"hello\"",
            "name = \"hello\"\n\n[operator.http]\nallow = [\"api.example.com\"]\nca_file = \"/dev/zero\"",
            "operator.toml:11:11: operator.http.ca_file: cannot use /dev/zero: not a regular file (a character device)",
        ),
    ];
    for (from, to, want) in cases {
        let dir = hello_with("operator.toml", |t| t.replacen(from, to, 1));
        let out = khai_within_30s(&["check", dir.path().to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{to}: {}", stderr(&out));
        let err = stderr(&out);
        let want = format!("error: {}/{want}", dir.path().display());
        assert!(err.starts_with(&want), "{to}:\n{err}\nwant: {want}");
    }
}

/// `--namespace ""` would watch every namespace, as `namespaces = [""]` did.
#[test]
fn run_refuses_a_namespace_flag_that_is_not_a_namespace_name() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello");
    for bad in ["", "Bad_NS"] {
        let out = khai_within_30s(&["run", "--config", dir.to_str().unwrap(), "-n", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!(
                "invalid value '{bad}' for '--namespace <NS>': not a namespace name"
            )),
            "{err}"
        );
    }
}

/// The files `khai generate values` ships, by path.
fn values_files(dir: &Path) -> Vec<String> {
    let out = khai(&["generate", "values", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let values: serde_json::Value = serde_saphyr::from_str(&stdout(&out)).unwrap();
    let mut files: Vec<String> = values["config"]["files"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    files.sort();
    files
}

/// The keys of the ConfigMap `khai generate manifests` writes.
fn manifests_config_keys(dir: &Path) -> Vec<String> {
    let out = khai(&["generate", "manifests", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&stdout(&out)).unwrap();
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    let mut keys: Vec<String> = cm["data"].as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

/// Scripts named only by handlers, timers, daemons, indexes or hooks, and a relative
/// `ca_file`, were left out of the values and the ConfigMap, so the installed daemon stopped
/// with "cannot read script".
#[test]
fn generate_values_and_manifests_ship_every_file_the_config_names() {
    let notes = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/notes");
    assert_eq!(
        values_files(&notes),
        ["operator.toml", "scripts/notes.rhai"]
    );
    assert_eq!(
        manifests_config_keys(&notes),
        ["operator.toml", "scripts__notes.rhai"]
    );
    let dir = dir_with(&[
        (
            "operator.toml",
            "[operator]\nname = \"t\"\ncleanup = { script = \"./hooks/bye.rhai\", function = \"bye\" }\n\
             [operator.http]\nallow = [\"api.example.com\"]\nca_file = \"certs/ca.pem\"\n\
             [[crd]]\ngroup = \"a.khai.dev\"\nkind = \"T\"\nversions = [\"v1\"]\n\
             [[timer]]\nfor = \"T\"\nscript = \"scripts/t.rhai\"\nfunction = \"tick\"\ninterval = \"1m\"\n",
        ),
        ("scripts/t.rhai", "fn tick(obj, ctx) { () }\n"),
        ("hooks/bye.rhai", "fn bye(ctx) { () }\n"),
        ("certs/ca.pem", "not read by generate\n"),
    ]);
    let shipped = [
        "certs/ca.pem",
        "hooks/bye.rhai",
        "operator.toml",
        "scripts/t.rhai",
    ];
    assert_eq!(values_files(dir.path()), shipped);
    let keys: Vec<String> = shipped.iter().map(|p| p.replace('/', "__")).collect();
    assert_eq!(manifests_config_keys(dir.path()), keys);
}

/// `import` passed `khai check` and failed on the first call.
#[test]
fn check_refuses_import_at_its_file_and_line() {
    let dir = hello_with("scripts/hello.rhai", |t| {
        format!("import \"helpers\" as helpers;\n{t}")
    });
    let out = khai(&["check", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    let at = format!("{}/scripts/hello.rhai:1:1: ", dir.path().display());
    assert!(
        err.contains(&at) && err.contains("`import` is not available"),
        "{err}"
    );
}

/// An index over Pods got no rule on `pods`, a config without a controller none on
/// Events, and `khai rbac verify --file` passed rules lacking both.
#[test]
fn rbac_of_an_index_and_of_handlers_is_generated_and_verified() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kopf/16-indexing");
    let example = example.to_str().unwrap();
    let args = ["--namespace", "ops"];
    let out = khai(&[&["generate", "rbac", example][..], &args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&stdout(&out)).unwrap();
    let role = docs.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let grants = |resource: &str| {
        role["rules"].as_array().unwrap().iter().any(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == resource)
                && r["verbs"].as_array().unwrap().iter().any(|v| v == "watch")
        })
    };
    assert!(grants("pods"), "{role}");
    assert!(
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["apiGroups"][0] == "events.k8s.io"),
        "{role}"
    );

    // The generated rules verify; without the rules on pods and Events they do not.
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("rules.yaml");
    std::fs::write(&full, stdout(&out)).unwrap();
    let verify = |file: &Path, extra: &[&str]| {
        khai(
            &[
                &["rbac", "verify", example, "--file", file.to_str().unwrap()][..],
                &args,
                extra,
            ]
            .concat(),
        )
    };
    let ok = verify(&full, &[]);
    assert!(ok.status.success(), "{}", stdout(&ok));
    let mut trimmed = role.clone();
    trimmed["rules"] = serde_json::Value::Array(
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["resources"][0] != "pods" && r["apiGroups"][0] != "events.k8s.io")
            .cloned()
            .collect(),
    );
    let less = dir.path().join("less.yaml");
    std::fs::write(&less, serde_json::to_string(&trimmed).unwrap()).unwrap();
    let out = verify(&less, &[]);
    assert_eq!(out.status.code(), Some(1));
    let said = stdout(&out);
    for missing in [
        "missing: list pods cluster-wide",
        "missing: watch pods cluster-wide",
        "missing: create events.events.k8s.io cluster-wide",
    ] {
        assert!(said.contains(missing), "{said}");
    }

    // With `--config-map`, the rules on the config's ConfigMap are checked too.
    let out = verify(&full, &["--config-map", "khai-kopf-indexing-config"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out)
            .contains("missing: get configmaps named khai-kopf-indexing-config in namespace ops"),
        "{}",
        stdout(&out)
    );
}
