//! The Helm chart in `charts/khai`, rendered, compared with `khai generate manifests`, and
//! dry-run applied on a real API server.
//!
//! Helm itself cannot be installed where khai is developed, so `scripts/helm-template` renders
//! the chart with the engine Helm is made of: Go's text/template with sprig (the function
//! library Helm ships) plus Helm's own functions, values merging and output format
//! (`tools/helm-template`, built offline from Debian's Go packages on first use and cached).
//! [`helm_template_follows_helm_semantics`] pins the Helm behaviour the chart relies on.
//!
//! [`chart_and_generator_produce_the_same_objects`] renders the chart with values that say what
//! `khai generate manifests` is told (release `khai-<operator>`, namespace, image, replicas,
//! watched namespaces, the config files, and the CRDs and RBAC rules `khai generate crds|rbac`
//! print, as the README tells chart users to pass them), then requires the same objects
//! (kind, namespace, name) with equal content once [`normalise`] has removed what legitimately
//! differs between a Helm release and the generator. Then the rendered chart must pass a
//! server-side dry run.

use crate::support::TestNamespace;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn chart() -> PathBuf {
    crate::support::repo_root().join("charts/khai")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(chart().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn chart_meta() -> Value {
    serde_saphyr::from_str(&read("Chart.yaml")).unwrap()
}

/// Runs `scripts/helm-template` (building it on first use); `Err` holds its stderr.
fn helm_template(args: &[&str]) -> Result<String, String> {
    let out = Command::new(crate::support::repo_root().join("scripts/helm-template"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("failed to run scripts/helm-template");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn render(args: &[&str]) -> String {
    helm_template(args).unwrap_or_else(|e| panic!("scripts/helm-template {args:?} failed:\n{e}"))
}

fn docs(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .unwrap_or_else(|e| panic!("not YAML ({e}):\n{yaml}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// One deployment of an example, said to both `khai generate manifests` and the chart.
struct Case {
    example: &'static str,
    /// `[operator] name`; the release is `khai-<operator>`, the generator's object name.
    operator: &'static str,
    /// The files the generator puts in the ConfigMap: operator.toml and the scripts it names.
    files: &'static [&'static str],
    /// The config declares `[[webhook]]`s (the chart's `webhook.enabled`).
    webhooks: bool,
    /// `--image`; `None` leaves both at their default (this version's image).
    image: Option<&'static str>,
    replicas: u32,
    /// How many extra namespaces to watch (`--watch-namespace`, `operator.watchNamespaces`).
    watched: usize,
    /// Run the example with `[webhook_server] tls = "files"` and `service` naming the release's
    /// Service: the webhook configurations are then part of the output (the chart's
    /// `webhook.configurations`, from `khai generate webhooks`), and khai takes its URL from the
    /// config (the chart's `webhook.setUrl: false`).
    tls_files: bool,
}

const CASES: &[Case] = &[
    Case {
        example: "hello",
        operator: "hello",
        files: &["operator.toml", "scripts/hello.rhai"],
        webhooks: false,
        image: None,
        replicas: 1,
        watched: 0,
        tls_files: false,
    },
    Case {
        example: "cache",
        operator: "cache",
        files: &[
            "operator.toml",
            "scripts/cache.rhai",
            "scripts/webhooks.rhai",
        ],
        webhooks: true,
        image: Some("registry.example/khai:dev"),
        replicas: 2,
        watched: 0,
        tls_files: false,
    },
    // A namespaced operator: Roles in each watched namespace, `--namespace` flags.
    Case {
        example: "cache",
        operator: "cache",
        files: &[
            "operator.toml",
            "scripts/cache.rhai",
            "scripts/webhooks.rhai",
        ],
        webhooks: true,
        image: None,
        replicas: 1,
        watched: 2,
        tls_files: false,
    },
    Case {
        example: "cache",
        operator: "cache",
        files: &[
            "operator.toml",
            "scripts/cache.rhai",
            "scripts/webhooks.rhai",
        ],
        webhooks: true,
        image: None,
        replicas: 1,
        watched: 0,
        tls_files: true,
    },
];

/// A copy of the case's files with `[webhook_server] tls = "files"` and a `service` in `ns`.
fn with_tls_files(case: &Case, ns: &str, into: &Path) {
    let from = crate::support::repo_root()
        .join("examples")
        .join(case.example);
    for f in case.files {
        std::fs::create_dir_all(into.join(f).parent().unwrap()).unwrap();
        std::fs::copy(from.join(f), into.join(f)).unwrap();
    }
    let toml = into.join("operator.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap();
    text.push_str(&format!(
        "\n[webhook_server]\ntls = \"files\"\ncert_file = \"/certs/tls.crt\"\n\
         key_file = \"/certs/tls.key\"\nservice = {{ name = \"khai-{}\", namespace = \"{ns}\" }}\n",
        case.operator
    ));
    std::fs::write(toml, text).unwrap();
}

/// Removes from one object what legitimately differs between the two, checking each value it
/// removes rather than ignoring it:
///
/// - Helm's release labels, on objects and on the pod template: `helm.sh/chart` (the chart and
///   its version), `app.kubernetes.io/instance` (the release name) and `app.kubernetes.io/version`
///   (the chart's appVersion). The generator knows no chart or release.
/// - `app.kubernetes.io/managed-by` is `Helm` in a release (`.Release.Service`) and `khai` from
///   the generator; the chart's `Helm` is rewritten to `khai` (the CRDs, passed through as
///   `khai generate crds` prints them, already say `khai`).
/// - The pod template annotation `checksum/config` (a sha256): Helm's idiom to roll the pods on
///   `helm upgrade` when the config changes; the generator's output is applied by hand or by
///   kustomize, which has its own means (configMapGenerator hashes).
///
/// Nothing else is touched: key order is irrelevant (objects compare as maps), list order is
/// compared as is. The generator's Namespace is left out by the caller: a Helm release goes
/// into an existing namespace (`helm install -n NS --create-namespace` makes it) and charts do
/// not template their release namespace.
fn normalise(obj: &mut Value, release: &str) {
    let meta = chart_meta();
    let expected = [
        (
            "helm.sh/chart",
            format!(
                "khai-{}",
                meta["version"].as_str().unwrap().replace('+', "_")
            ),
        ),
        ("app.kubernetes.io/instance", release.to_string()),
        (
            "app.kubernetes.io/version",
            meta["appVersion"].as_str().unwrap().to_string(),
        ),
    ];
    let what = format!(
        "{} {}",
        obj["kind"].as_str().unwrap_or_default(),
        obj["metadata"]["name"].as_str().unwrap_or_default()
    );
    let fix_labels = |labels: &mut Value| {
        let Some(labels) = labels.as_object_mut() else {
            return;
        };
        for (key, value) in &expected {
            if let Some(v) = labels.remove(*key) {
                assert_eq!(v, json!(value), "{what}: label {key}");
            }
        }
        // Objects passed through as khai printed them (the CRDs) already say khai.
        if let Some(v) = labels.get_mut("app.kubernetes.io/managed-by") {
            assert!(
                v == "Helm" || v == "khai",
                "{what}: label app.kubernetes.io/managed-by is {v}"
            );
            *v = json!("khai");
        }
    };
    fix_labels(&mut obj["metadata"]["labels"]);
    if obj["kind"] == "Deployment" {
        let template = &mut obj["spec"]["template"]["metadata"];
        fix_labels(&mut template["labels"]);
        let annotations = template["annotations"].as_object_mut().unwrap();
        let checksum = annotations.remove("checksum/config").unwrap();
        let checksum = checksum.as_str().unwrap();
        assert!(
            checksum.len() == 64 && checksum.chars().all(|c| c.is_ascii_hexdigit()),
            "{what}: checksum/config {checksum:?}"
        );
        if annotations.is_empty() {
            template.as_object_mut().unwrap().remove("annotations");
        }
    }
}

/// Objects by (kind, namespace, name).
fn by_key(objects: Vec<Value>) -> BTreeMap<(String, String, String), Value> {
    let mut out = BTreeMap::new();
    for o in objects {
        let key = (
            o["kind"].as_str().unwrap_or_default().to_string(),
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        assert!(out.insert(key.clone(), o).is_none(), "{key:?} twice");
    }
    out
}

/// The rules of the first `kind` object (not the leader election Role) in `khai generate rbac`.
fn rules_of(rbac: &[Value], kind: &str) -> Value {
    rbac.iter()
        .find(|o| {
            o["kind"] == kind
                && !o["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .ends_with("-leader-election")
        })
        .map_or(json!([]), |o| o["rules"].clone())
}

/// The chart's `--set-file` key for a config file: dots escaped, slashes kept.
fn file_key(path: &str) -> String {
    format!("config.files.{}", path.replace('.', "\\."))
}

#[tokio::test]
async fn chart_and_generator_produce_the_same_objects() {
    let client = crate::support::client().await;
    for case in CASES {
        let ns = TestNamespace::new(&client, "chart").await;
        let mut watched = Vec::new();
        for _ in 0..case.watched {
            watched.push(TestNamespace::new(&client, "chart-watch").await);
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = if case.tls_files {
            let copy = tmp.path().join("config");
            with_tls_files(case, &ns.name, &copy);
            copy
        } else {
            crate::support::repo_root()
                .join("examples")
                .join(case.example)
        };
        let dir = dir.to_str().unwrap();
        let release = format!("khai-{}", case.operator);
        let what = format!(
            "{} (replicas {}, {} watched namespaces, tls files: {})",
            case.example, case.replicas, case.watched, case.tls_files
        );

        // What the generator is told.
        let mut common = vec!["--namespace".to_string(), ns.name.clone()];
        for w in &watched {
            common.extend(["--watch-namespace".into(), w.name.clone()]);
        }
        let common: Vec<&str> = common.iter().map(String::as_str).collect();
        let replicas = case.replicas.to_string();
        let mut gen_args = vec!["generate", "manifests", dir, "--replicas", &replicas];
        gen_args.extend(&common);
        if let Some(image) = case.image {
            gen_args.extend(["--image", image]);
        }
        let generated = docs(&crate::support::khai_stdout(&gen_args));

        // The same, as chart values.
        let mut rbac_args = vec!["generate", "rbac", dir];
        rbac_args.extend(&common);
        let rbac = docs(&crate::support::khai_stdout(&rbac_args));
        let crds = tmp.path().join("crds.yaml");
        std::fs::write(
            &crds,
            crate::support::khai_stdout(&["generate", "crds", dir]),
        )
        .unwrap();
        let mut values = json!({
            "operator": {
                "name": case.operator,
                "watchNamespaces": watched.iter().map(|w| w.name.clone()).collect::<Vec<_>>(),
            },
            "replicaCount": case.replicas,
            "webhook": { "enabled": case.webhooks, "setUrl": !case.tls_files },
            "rbac": {
                "clusterRules": rules_of(&rbac, "ClusterRole"),
                "namespacedRules": rules_of(&rbac, "Role"),
            },
        });
        if let Some(image) = case.image {
            let (repository, tag) = image.rsplit_once(':').unwrap();
            values["image"] = json!({ "repository": repository, "tag": tag });
        }
        // JSON is YAML: a values file as `-f` takes it.
        let values_file = tmp.path().join("values.yaml");
        std::fs::write(&values_file, values.to_string()).unwrap();
        let mut helm_args = vec![
            release.clone(),
            chart().to_str().unwrap().to_string(),
            "-n".into(),
            ns.name.clone(),
            "-f".into(),
            values_file.to_str().unwrap().to_string(),
            "--set-file".into(),
            format!("crds={}", crds.to_str().unwrap()),
        ];
        if case.tls_files {
            let webhooks = tmp.path().join("webhooks.yaml");
            std::fs::write(
                &webhooks,
                crate::support::khai_stdout(&["generate", "webhooks", dir]),
            )
            .unwrap();
            helm_args.push("--set-file".into());
            helm_args.push(format!("webhook.configurations={}", webhooks.display()));
        }
        for f in case.files {
            helm_args.push("--set-file".into());
            helm_args.push(format!("{}={dir}/{f}", file_key(f)));
        }
        let helm_args: Vec<&str> = helm_args.iter().map(String::as_str).collect();
        let rendered_yaml = render(&helm_args);
        assert!(
            rendered_yaml.contains("# Source: khai/templates/deployment.yaml\n"),
            "{rendered_yaml}"
        );

        let generated = by_key(
            generated
                .into_iter()
                .filter(|o| o["kind"] != "Namespace")
                .collect(),
        );
        let rendered = by_key(
            docs(&rendered_yaml)
                .into_iter()
                .map(|mut o| {
                    normalise(&mut o, &release);
                    o
                })
                .collect(),
        );
        if case.tls_files {
            assert!(
                generated
                    .keys()
                    .any(|(kind, _, _)| kind == "ValidatingWebhookConfiguration"),
                "{what}: no webhook configurations to compare"
            );
        }
        let keys =
            |m: &BTreeMap<(String, String, String), Value>| m.keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            keys(&rendered),
            keys(&generated),
            "{what}: the chart (left) and khai generate manifests (right) make different objects"
        );
        for (key, gen_obj) in &generated {
            let chart_obj = &rendered[key];
            assert!(
                chart_obj == gen_obj,
                "{what}: {key:?} differs\n--- chart (normalised):\n{}\n--- khai generate manifests:\n{}",
                serde_json::to_string_pretty(chart_obj).unwrap(),
                serde_json::to_string_pretty(gen_obj).unwrap()
            );
        }

        let Some(kubectl) = crate::support::kubectl() else {
            eprintln!("dry run skipped: kubectl is not on PATH or in /usr/bin");
            continue;
        };
        let applied = crate::support::dry_run_apply(&kubectl, &rendered_yaml, &what);
        assert!(
            applied.contains(&format!("deployment.apps/{release}"))
                && applied.contains("customresourcedefinition.apiextensions.k8s.io/")
                && applied.contains("(server dry run)"),
            "{what}: {applied}"
        );
    }
}

#[test]
fn chart_defaults_render_and_cover_the_optional_objects() {
    let out = render(&[
        "khai-hello",
        chart().to_str().unwrap(),
        "-n",
        "ops",
        "--set",
        "serviceMonitor.enabled=true,podDisruptionBudget.enabled=true,metrics.port=9090",
        "--set",
        "webhook.enabled=true,webhook.port=8443,logLevel=debug,image.pullPolicy=Always",
        "--set-string",
        "service.type=NodePort",
        "--notes",
    ]);
    let (manifests, notes) = out.split_once("NOTES:\n").unwrap();
    assert!(
        notes.contains("rbac.clusterRules and rbac.namespacedRules are empty"),
        "{notes}"
    );
    let objs = docs(manifests);
    let kinds: Vec<&str> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    // Helm's install order: ServiceAccount, ConfigMap, ... Service, Deployment, then kinds it
    // does not know.
    assert_eq!(
        kinds,
        [
            "PodDisruptionBudget",
            "ServiceAccount",
            "ConfigMap",
            "Role",
            "RoleBinding",
            "Service",
            "Deployment",
            "ServiceMonitor"
        ]
    );
    let find = |kind: &str| objs.iter().find(|o| o["kind"] == kind).unwrap();
    let c = &find("Deployment")["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "run",
            "--config",
            "/config",
            "--log-format",
            "json",
            "--log-level",
            "debug",
            "--metrics-bind",
            "0.0.0.0:9090",
            "--webhook-bind",
            "0.0.0.0:8443"
        ]
    );
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(
        c["env"][2],
        json!({ "name": "KHAI_WEBHOOK_URL", "value": "https://khai-hello.ops.svc:443" })
    );
    assert_eq!(find("Service")["spec"]["type"], "NodePort");
    assert_eq!(
        find("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        json!({ "app.kubernetes.io/name": "hello" })
    );
    // A release named otherwise gets `<release>-khai`, as `helm create` charts do.
    let other = docs(&render(&["prod", chart().to_str().unwrap()]));
    assert!(
        other.iter().all(|o| o["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("prod-khai")),
        "{other:?}"
    );
    let missing = helm_template(&[
        "x",
        chart().to_str().unwrap(),
        "--set",
        "operator.name=null",
    ])
    .unwrap_err();
    assert!(missing.contains("operator.name is required"), "{missing}");
}

/// A chart of its own exercising the Helm behaviour the khai chart relies on, with what Helm
/// renders for it.
#[test]
fn helm_template_follows_helm_semantics() {
    let tmp = tempfile::tempdir().unwrap();
    let c = tmp.path().join("fx");
    std::fs::create_dir_all(c.join("templates")).unwrap();
    std::fs::create_dir_all(c.join("files")).unwrap();
    let write = |rel: &str, text: &str| std::fs::write(c.join(rel), text).unwrap();
    write(
        "Chart.yaml",
        "apiVersion: v2\nname: fx\nversion: 1.2.3+build\nappVersion: \"9\"\n",
    );
    write(
        "values.yaml",
        "a:\n  b: 1\n  c: [x, y]\n  d: {e: 3}\ngone: 5\nport: 8080\nlist: [1]\n",
    );
    write("files/note.txt", "from a file\n");
    write(
        "templates/_helpers.tpl",
        "{{- define \"fx.name\" -}}{{ .Release.Name }}-{{ .Chart.Name }}{{- end }}\nnot rendered\n",
    );
    write(
        "templates/cm.yaml",
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "fx.name" . }}
  namespace: {{ .Release.Namespace }}
data:
  missing: "{{ .Values.nope }}"
  merged: {{ toJson .Values.a | quote }}
  gone: "{{ .Values.gone }}"
  port: "{{ .Values.port }} {{ int .Values.port | add 1 }}"
  list: {{ toJson .Values.list | quote }}
  file: {{ .Values.f | quote }}
  chartFile: {{ .Files.Get "files/note.txt" | quote }}
  tpl: {{ tpl "{{ .Chart.Name }}-{{ .Values.s }}" . | quote }}
  release: "{{ .Release.Service }} {{ .Release.IsInstall }} {{ .Chart.Version }} {{ .Template.Name }}"
  kube: "{{ .Capabilities.KubeVersion.Version }} {{ .Capabilities.APIVersions.Has "apps/v1" }}"
  yaml: |
    {{- toYaml .Values.a | nindent 4 }}
---
# a document of only a comment is still a document to Helm; an empty one is dropped
---
"#,
    );
    write(
        "templates/sa.yaml",
        "{{- if true }}\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n{{- end }}\n",
    );
    write(
        "templates/empty.yaml",
        "{{- if false }}\nkind: X\n{{- end }}\n",
    );
    write("templates/NOTES.txt", "Installed {{ .Release.Name }}.\n");
    let overrides = tmp.path().join("over.yaml");
    std::fs::write(
        &overrides,
        "a:\n  d: {f: 4}\n  c: [z]\ngone: null\nlist: []\n",
    )
    .unwrap();
    let file = tmp.path().join("f.txt");
    std::fs::write(&file, "line 1\nline \"2\"\n").unwrap();
    let out = render(&[
        "rel",
        c.to_str().unwrap(),
        "-n",
        "space",
        "-f",
        overrides.to_str().unwrap(),
        "--set",
        "a.b=2,s=y",
        "--set-file",
        &format!("f={}", file.display()),
        "--notes",
    ]);
    let expected = r#"---
# Source: fx/templates/sa.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: sa
---
# Source: fx/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: rel-fx
  namespace: space
data:
  missing: ""
  merged: "{\"b\":2,\"c\":[\"z\"],\"d\":{\"e\":3,\"f\":4}}"
  gone: ""
  port: "8080 8081"
  list: "[]"
  file: "line 1\nline \"2\"\n"
  chartFile: "from a file\n"
  tpl: "fx-y"
  release: "Helm true 1.2.3+build fx/templates/cm.yaml"
  kube: "v1.20.0 true"
  yaml: |
    b: 2
    c:
    - z
    d:
      e: 3
      f: 4
---
# Source: fx/templates/cm.yaml
# a document of only a comment is still a document to Helm; an empty one is dropped
NOTES:
Installed rel.

"#;
    assert_eq!(out, expected);

    write(
        "templates/req.yaml",
        "x: {{ required \"z is required\" .Values.z }}\n",
    );
    let err = helm_template(&["rel", c.to_str().unwrap()]).unwrap_err();
    assert!(
        err.contains("execution error at (fx/templates/req.yaml:1:")
            && err.contains("z is required"),
        "{err}"
    );
    write("templates/req.yaml", "x: {{ .Values.a.nope.deeper }}\n");
    let err = helm_template(&["rel", c.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("nil pointer evaluating"), "{err}");
    write("templates/req.yaml", "x: [\n");
    let err = helm_template(&["rel", c.to_str().unwrap()]).unwrap_err();
    assert!(
        err.contains("YAML parse error on fx/templates/req.yaml"),
        "{err}"
    );
}

#[test]
fn chart_metadata_follows_helm_conventions() {
    let meta = chart_meta();
    assert_eq!(meta["apiVersion"], "v2");
    assert_eq!(meta["name"], "khai");
    assert_eq!(meta["type"], "application");
    assert_eq!(meta["appVersion"], env!("CARGO_PKG_VERSION"));
    assert!(meta["version"].as_str().unwrap().split('.').count() == 3);
    for file in [
        "values.yaml",
        "templates/_helpers.tpl",
        "templates/NOTES.txt",
        "templates/crds.yaml",
        "templates/deployment.yaml",
        "templates/rbac.yaml",
        "templates/configmap.yaml",
        "templates/service.yaml",
        "templates/serviceaccount.yaml",
        "templates/servicemonitor.yaml",
        "templates/pdb.yaml",
        "templates/webhookconfigurations.yaml",
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

/// Every helper a template includes is defined, on branches no render above takes too
/// (`existingConfigMap`, `serviceAccount.create: false`...). Unbalanced blocks fail the render.
#[test]
fn every_included_helper_is_defined() {
    let defined: Vec<String> = actions(&read("templates/_helpers.tpl"))
        .iter()
        .filter_map(|a| a.strip_prefix("define "))
        .map(|d| d.trim().trim_matches('"').to_string())
        .collect();
    for (name, text) in templates() {
        for a in actions(&text) {
            if let Some(i) = a.find("include \"") {
                let helper = a[i + 9..].split('"').next().unwrap();
                assert!(
                    defined.iter().any(|d| d == helper),
                    "{name}: includes {helper:?}, which _helpers.tpl does not define"
                );
            }
        }
    }
}
