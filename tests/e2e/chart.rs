//! The Helm chart in `charts/khai`, checked with the real Helm (`scripts/helm` installs it):
//! `helm lint`, `helm template` compared with `khai generate manifests`, and a server-side dry
//! run of what it renders. `tests/e2e/helm.rs` installs, upgrades and uninstalls it.
//!
//! [`chart_and_generator_produce_the_same_objects`] renders the chart with the values
//! `khai generate values` prints (plus what `khai generate manifests` is told besides the
//! config: release `khai-<operator>`, namespace, image, replicas), then requires the same
//! objects (kind, namespace, name) with equal content once [`normalise`] has removed what
//! legitimately differs between a Helm release and the generator. Then the rendered chart must
//! pass a server-side dry run.

use crate::support::{TestNamespace, helm};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

fn chart() -> std::path::PathBuf {
    helm::chart()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(chart().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn chart_meta() -> Value {
    serde_saphyr::from_str(&read("Chart.yaml")).unwrap()
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
    /// `--image`; `None` leaves both at their default (this version's image).
    image: Option<&'static str>,
    replicas: u32,
    /// How many extra namespaces to watch (`--watch-namespace`, `operator.watchNamespaces`).
    watched: usize,
    /// Run the example with `[webhook_server] tls = "files"` and `service` naming the release's
    /// Service, and with `install_crds = false`: the webhook configurations and the CRDs are
    /// then part of the release (`khai generate values` puts them in `webhook.configurations`
    /// and `crds`), and khai takes its URL from the config (`webhook.setUrl: false`).
    tls_files: bool,
}

const CASES: &[Case] = &[
    // Reads a Secret by name (`[operator] secrets`) and reaches a host over HTTP.
    Case {
        example: "bucket",
        operator: "bucket",
        files: &["operator.toml", "scripts/bucket.rhai"],
        image: None,
        replicas: 1,
        watched: 0,
        tls_files: false,
    },
    Case {
        example: "hello",
        operator: "hello",
        files: &["operator.toml", "scripts/hello.rhai"],
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
        image: None,
        replicas: 1,
        watched: 0,
        tls_files: true,
    },
];

/// A copy of the case's files with `[webhook_server] tls = "files"`, a `service` in `ns`, and
/// `install_crds = false`.
fn with_tls_files(case: &Case, ns: &str, into: &Path) {
    let from = crate::support::repo_root()
        .join("examples")
        .join(case.example);
    for f in case.files {
        std::fs::create_dir_all(into.join(f).parent().unwrap()).unwrap();
        std::fs::copy(from.join(f), into.join(f)).unwrap();
    }
    let toml = into.join("operator.toml");
    let mut text = std::fs::read_to_string(&toml).unwrap().replacen(
        "[operator]\n",
        "[operator]\ninstall_crds = false\n",
        1,
    );
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
///
/// Nothing else is touched: key order is irrelevant (objects compare as maps), list order is
/// compared as is. The caller leaves out two kinds of the generator's: its Namespace (a Helm
/// release goes into an existing namespace, `helm install -n NS --create-namespace` makes it,
/// and charts do not template their release namespace), and its CRDs when the config installs
/// them itself (`install_crds`, the default: `khai generate values` leaves them to khai, so that
/// `helm uninstall` never deletes every custom resource).
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
        // No checksum/config: a config change is hot-reloaded, not a rollout.
        assert!(template.get("annotations").is_none(), "{what}: {template}");
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

        // The same, as chart values: `khai generate values` plus what is not in the config.
        let values_file = tmp.path().join("values.yaml");
        let mut values_args = vec!["generate", "values", dir];
        for w in &watched {
            values_args.extend(["--watch-namespace", w.name.as_str()]);
        }
        std::fs::write(&values_file, crate::support::khai_stdout(&values_args)).unwrap();
        let replicas_value = format!("replicaCount={}", case.replicas);
        let mut helm_args = vec![
            "-n",
            ns.name.as_str(),
            "-f",
            helm::arg(&values_file),
            "--set",
            replicas_value.as_str(),
        ];
        let image_values;
        if let Some(image) = case.image {
            let (repository, tag) = image.rsplit_once(':').unwrap();
            image_values = format!("image.repository={repository},image.tag={tag}");
            helm_args.extend(["--set", image_values.as_str()]);
        }
        let rendered_yaml = helm::template(&release, &helm_args);
        assert!(
            rendered_yaml.contains("# Source: khai/templates/deployment.yaml\n"),
            "{rendered_yaml}"
        );

        let generated = by_key(
            generated
                .into_iter()
                .filter(|o| o["kind"] != "Namespace")
                // khai installs these itself unless `install_crds = false`.
                .filter(|o| {
                    case.tls_files
                        || ![
                            "CustomResourceDefinition",
                            "ValidatingAdmissionPolicy",
                            "ValidatingAdmissionPolicyBinding",
                        ]
                        .contains(&o["kind"].as_str().unwrap_or_default())
                })
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
            for kind in ["ValidatingWebhookConfiguration", "CustomResourceDefinition"] {
                assert!(
                    generated.keys().any(|(k, _, _)| k == kind),
                    "{what}: no {kind} to compare"
                );
            }
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
                && applied.contains("(server dry run)"),
            "{what}: {applied}"
        );
    }
}

#[test]
fn helm_lint_passes_strict() {
    let out = helm::ok(&["lint", "--strict", helm::arg(&chart())]);
    assert!(
        out.contains("1 chart(s) linted, 0 chart(s) failed"),
        "{out}"
    );
}

#[test]
fn chart_defaults_render_and_cover_the_optional_objects() {
    let out = helm::template(
        "khai-hello",
        &[
            "-n",
            "ops",
            "--set",
            "serviceMonitor.enabled=true,podDisruptionBudget.enabled=true,metrics.port=9090",
            "--set",
            "webhook.enabled=true,webhook.port=8443,logLevel=debug,image.pullPolicy=Always,reconcileBatch=100ms,wakeInterval=5ms",
            "--set-string",
            "service.type=NodePort",
        ],
    );
    let objs = docs(&out);
    let kinds: Vec<(&str, &str)> = objs
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    // Helm's install order: ServiceAccount, ConfigMap, Roles, ... Service, Deployment, then
    // kinds it does not know.
    assert_eq!(
        kinds,
        [
            ("PodDisruptionBudget", "khai-hello"),
            ("ServiceAccount", "khai-hello"),
            ("ConfigMap", "khai-hello-config"),
            ("Role", "khai-hello-leader-election"),
            ("Role", "khai-hello-config"),
            ("RoleBinding", "khai-hello-leader-election"),
            ("RoleBinding", "khai-hello-config"),
            ("Service", "khai-hello"),
            ("Deployment", "khai-hello"),
            ("ServiceMonitor", "khai-hello"),
        ]
    );
    let find = |kind: &str| objs.iter().find(|o| o["kind"] == kind).unwrap();
    let d = find("Deployment");
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
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
            "configmap:ops/khai-hello-config",
            "--log-format",
            "json",
            "--log-level",
            "debug",
            "--metrics-bind",
            "0.0.0.0:9090",
            "--reconcile-batch",
            "100ms",
            "--wake-interval",
            "5ms",
            "--leader-elect",
            "--webhook-bind",
            "0.0.0.0:8443"
        ]
    );
    // The config comes through the API: no volume, no checksum annotation to roll the pods.
    assert!(pod.get("volumes").is_none(), "{pod}");
    assert!(
        d["spec"]["template"]["metadata"]
            .get("annotations")
            .is_none(),
        "{d}"
    );
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        c["env"][2],
        json!({ "name": "KHAI_WEBHOOK_URL", "value": "https://khai-hello.ops.svc:443" })
    );
    assert_eq!(find("Service")["spec"]["type"], "NodePort");
    assert_eq!(
        find("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        json!({ "app.kubernetes.io/name": "hello" })
    );
    let reader = objs
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "khai-hello-config")
        .unwrap();
    assert_eq!(
        reader["rules"][0],
        json!({ "apiGroups": [""], "resources": ["configmaps"],
                "resourceNames": ["khai-hello-config"], "verbs": ["get", "list", "watch"] })
    );
    let notes = helm::ok(&[
        "install",
        "khai-hello",
        helm::arg(&chart()),
        "--dry-run=client",
        "-n",
        "ops",
    ]);
    assert!(
        notes.contains("rbac.clusterRules and rbac.namespacedRules are empty"),
        "{notes}"
    );
    // Any release name: `<release>-khai`, as `helm create` charts do.
    let other = docs(&helm::template("prod", &[]));
    assert!(
        other.iter().all(|o| o["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("prod-khai")),
        "{other:?}"
    );
    let chart = chart();
    let missing = helm::run(&[
        "template",
        "x",
        helm::arg(&chart),
        "--set",
        "operator.name=null",
    ])
    .unwrap_err();
    assert!(
        missing.contains("operator.name is required: the [operator] name of operator.toml"),
        "{missing}"
    );
    let bad = helm::run(&[
        "template",
        "x",
        helm::arg(&chart),
        "--set",
        "config.source=disk",
    ])
    .unwrap_err();
    assert!(bad.contains("config.source must be api or mount"), "{bad}");
}

/// `config.source: mount` mounts the whole ConfigMap (a script added later appears in the pod)
/// and grants no API access to it; `rollOnChange` rolls the pods on a config change.
#[test]
fn mount_mode_mounts_the_whole_configmap_and_roll_on_change_is_opt_in() {
    let objs = docs(&helm::template(
        "khai-hello",
        &[
            "-n",
            "ops",
            "--set",
            "config.source=mount,config.rollOnChange=true",
            "--set-string",
            "config.files.operator\\.toml=x",
        ],
    ));
    let d = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["args"][2], "/config");
    assert_eq!(
        pod["volumes"],
        json!([{ "name": "config", "configMap": { "name": "khai-hello-config" } }]),
        "the whole ConfigMap, no items"
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([{ "name": "config", "mountPath": "/config", "readOnly": true }])
    );
    let checksum = d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        .as_str()
        .unwrap();
    assert_eq!(checksum.len(), 64, "{checksum}");
    assert!(
        !objs
            .iter()
            .any(|o| o["kind"] == "Role" && o["metadata"]["name"] == "khai-hello-config"),
        "no Role to read the ConfigMap through the API"
    );
}

/// `candidate.files` runs khai with `--candidate /candidate`: the files in a ConfigMap of their
/// own, mounted there, and a checksum that rolls the pods when they change; without it nothing
/// of the candidate renders.
#[test]
fn a_candidate_is_mounted_and_passed_and_rolls_the_pods() {
    let objs = docs(&helm::template(
        "khai-hello",
        &[
            "-n",
            "ops",
            "--set-string",
            "candidate.files.scripts/x\\.rhai=fn f() {}",
        ],
    ));
    let cm = objs
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "khai-hello-candidate")
        .unwrap();
    assert_eq!(cm["data"], json!({ "scripts__x.rhai": "fn f() {}" }));
    let d = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let pod = &d["spec"]["template"]["spec"];
    let args = pod["containers"][0]["args"].as_array().unwrap();
    let at = args.iter().position(|a| a == "--candidate").unwrap();
    assert_eq!(args[at + 1], "/candidate");
    assert_eq!(
        pod["volumes"],
        json!([{ "name": "candidate", "configMap": { "name": "khai-hello-candidate" } }])
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"],
        json!([{ "name": "candidate", "mountPath": "/candidate", "readOnly": true }])
    );
    let annotations = &d["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(
        annotations["checksum/candidate"].as_str().unwrap().len(),
        64
    );
    let plain = docs(&helm::template("khai-hello", &["-n", "ops"]));
    let d = plain.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert!(!d.to_string().contains("candidate"), "{d:#}");
}

/// `candidate.rollout.candidatePercent` turns the candidate's shadow into a canary rollout:
/// `--candidate-percent` with the window and the ratio; without it, or without a candidate, no
/// rollout flag renders.
#[test]
fn a_candidate_percent_starts_a_canary_rollout() {
    let args = |set: &[&str]| {
        let mut flags = vec!["-n", "ops"];
        for s in set {
            let how = if s.starts_with("candidate.files") {
                "--set-string"
            } else {
                "--set"
            };
            flags.extend([how, s]);
        }
        let objs = docs(&helm::template("khai-hello", &flags));
        let d = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
        d["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let file = "candidate.files.scripts/x\\.rhai=fn f() {}";
    let canary = args(&[
        file,
        "candidate.rollout.candidatePercent=10",
        "candidate.rollout.promoteAfter=5m",
    ]);
    let at = canary.iter().position(|a| a == "--candidate").unwrap();
    assert_eq!(
        canary[at..at + 8],
        [
            "--candidate",
            "/candidate",
            "--candidate-percent",
            "10",
            "--promote-after",
            "5m",
            "--max-error-ratio",
            "1.5"
        ]
    );
    let shadow = args(&[file]);
    assert!(shadow.contains(&"--candidate".to_string()));
    assert!(
        !shadow.iter().any(|a| a.starts_with("--candidate-percent")),
        "{shadow:?}"
    );
    let none = args(&["candidate.rollout.candidatePercent=10"]);
    assert!(
        !none.iter().any(|a| a.starts_with("--candidate")),
        "{none:?}"
    );
}

/// `console.enabled` passes `--console` with its address; off loopback the release also lets
/// khai review tokens, on loopback it does not.
#[test]
fn the_console_value_passes_its_address_and_off_loopback_grants_token_reviews() {
    let render = |set: &str| {
        let objs = docs(&helm::template(
            "khai-hello",
            &[
                "-n",
                "ops",
                "--set",
                set,
                "--set-string",
                "config.files.operator\\.toml=x",
            ],
        ));
        let d = objs.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let args = d["spec"]["template"]["spec"]["containers"][0]["args"].clone();
        let reviews = objs
            .iter()
            .find(|o| {
                o["metadata"]["name"] == "khai-hello-console-reviews" && o["kind"] == "ClusterRole"
            })
            .map(|r| r["rules"].clone());
        (args, reviews)
    };
    let (args, reviews) = render("console.enabled=true,console.address=0.0.0.0:8081");
    let args = args.as_array().unwrap();
    let at = args.iter().position(|a| a == "--console").unwrap();
    assert_eq!(args[at + 1], "0.0.0.0:8081");
    let rules = reviews.expect("no ClusterRole for token reviews off loopback");
    assert_eq!(rules[0]["resources"], json!(["tokenreviews"]));
    assert_eq!(rules[1]["resources"], json!(["subjectaccessreviews"]));
    let (args, reviews) = render("console.enabled=true");
    assert!(
        args.as_array().unwrap().contains(&json!("127.0.0.1:8081")),
        "{args}"
    );
    assert!(reviews.is_none(), "on loopback khai reviews no tokens");
    let (args, _) = render("console.enabled=false");
    assert!(
        !args.as_array().unwrap().contains(&json!("--console")),
        "{args}"
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
        "templates/admissionpolicies.yaml",
    ] {
        assert!(
            chart().join(file).is_file(),
            "charts/khai/{file} is missing"
        );
    }
}

/// With `install_crds = false` the release installs the `[[policy]]` objects: the chart renders
/// them as `khai generate manifests` prints them, and grants khai nothing on them.
#[test]
fn a_release_that_installs_the_crds_installs_the_policies_too() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("operator.toml"),
        "[operator]\nname = \"vapchart\"\ninstall_crds = false\n\n[[policy]]\nname = \"few\"\n\
         for = [\"apps/v1/Deployment\"]\nrules = [{ rule = \"object.spec.replicas <= 5\" }]\n",
    )
    .unwrap();
    let config = dir.path().to_str().unwrap();
    let values_file = dir.path().join("values.yaml");
    let values = crate::support::khai_stdout(&["generate", "values", config]);
    std::fs::write(&values_file, values).unwrap();
    let rendered = docs(&helm::template(
        "khai-vapchart",
        &["-n", "vap", "-f", helm::arg(&values_file)],
    ));
    let generated = docs(&crate::support::khai_stdout(&[
        "generate",
        "manifests",
        config,
        "--namespace",
        "vap",
    ]));
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        let find = |objs: &[Value]| objs.iter().find(|o| o["kind"] == kind).cloned();
        let chart = find(&rendered).unwrap_or_else(|| panic!("the chart renders no {kind}"));
        assert_eq!(chart["metadata"]["name"], "khai-vapchart-few");
        assert_eq!(Some(chart), find(&generated), "{kind}");
    }
    let granted = serde_json::to_string(&rendered).unwrap();
    assert!(!granted.contains("validatingadmissionpolic"), "{granted}");
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

/// A `namespace/name` entry of `[operator] secrets` becomes a Role in that namespace granting
/// that one Secret by name, the same from the chart as from the generator.
#[test]
fn a_secret_of_another_namespace_is_granted_by_a_role_there_by_chart_and_generator() {
    let tmp = tempfile::tempdir().unwrap();
    let from = crate::support::repo_root().join("examples/bucket");
    std::fs::create_dir(tmp.path().join("scripts")).unwrap();
    std::fs::copy(
        from.join("scripts/bucket.rhai"),
        tmp.path().join("scripts/bucket.rhai"),
    )
    .unwrap();
    let config = std::fs::read_to_string(from.join("operator.toml"))
        .unwrap()
        .replace(
            "secrets = [\"bucket-credentials\"]",
            "secrets = [\"billing/bucket-credentials\"]",
        );
    assert!(config.contains("billing/"), "the example changed");
    std::fs::write(tmp.path().join("operator.toml"), config).unwrap();
    let dir = tmp.path().to_str().unwrap();
    let role = |objects: Vec<Value>| {
        objects
            .into_iter()
            .find(|o| {
                o["kind"] == "Role"
                    && o["metadata"]["name"] == "khai-bucket-secrets"
                    && o["metadata"]["namespace"] == "billing"
            })
            .map(|o| o["rules"].clone())
    };
    let generated = role(docs(&crate::support::khai_stdout(&[
        "generate",
        "rbac",
        dir,
        "--namespace",
        "ops",
    ])));
    let values = tmp.path().join("values.yaml");
    std::fs::write(
        &values,
        crate::support::khai_stdout(&["generate", "values", dir]),
    )
    .unwrap();
    let rendered = role(docs(&helm::template(
        "khai-bucket",
        &["-n", "ops", "-f", helm::arg(&values)],
    )));
    let want = serde_json::json!([{
        "apiGroups": [""], "resources": ["secrets"],
        "verbs": ["get", "list", "watch"], "resourceNames": ["bucket-credentials"],
    }]);
    assert_eq!(generated, Some(want.clone()), "khai generate rbac");
    assert_eq!(rendered, Some(want), "the chart");
}

/// `prometheusRule` and `grafanaDashboard` render khai's alerts scoped to the release (job and
/// namespace) and the dashboard as files/dashboard.json, in a ConfigMap the Grafana sidecar
/// picks up; tests/docs.rs checks the metrics they query.
#[test]
fn monitoring_objects_render_scoped_to_the_release() {
    let out = helm::template(
        "khai-hello",
        &[
            "-n",
            "ops",
            "--set",
            "prometheusRule.enabled=true,prometheusRule.labels.release=kps",
            "--set",
            "grafanaDashboard.enabled=true,grafanaDashboard.namespace=monitoring",
        ],
    );
    let objs = docs(&out);
    let rule = objs.iter().find(|o| o["kind"] == "PrometheusRule").unwrap();
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["labels"]["release"], "kps");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    assert!(rules.len() >= 5, "{rule}");
    for r in rules {
        let expr = r["expr"].as_str().unwrap();
        assert!(
            expr.contains(r#"job="khai-hello", namespace="ops""#)
                && !expr.contains(r#"job="khai""#),
            "{}: not scoped to the release: {expr}",
            r["alert"]
        );
    }
    let dashboard = objs
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "khai-hello-dashboard")
        .unwrap();
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value = serde_json::from_str(&read("files/dashboard.json")).unwrap();
    let rendered: Value =
        serde_json::from_str(dashboard["data"]["khai.json"].as_str().unwrap()).unwrap();
    assert_eq!(rendered, shipped);
    // Off by default.
    let plain = helm::template("khai-hello", &["-n", "ops"]);
    assert!(!plain.contains("PrometheusRule") && !plain.contains("grafana_dashboard"));
}

/// Sharded mode's grants come with `sharding.enabled` only (the assignment webhook's with
/// `webhook.enabled` too): the chart's ClusterRole and Lease Role grant what
/// `khai generate rbac --shards` does with sharding on, and what `khai generate rbac` does off.
#[test]
fn the_chart_grants_sharded_modes_rules_only_with_sharding_enabled_as_the_generator_does() {
    let example = crate::support::repo_root().join("examples/cache");
    let dir = example.to_str().unwrap();
    // Every (group, resource, names, verb) a Role or ClusterRole `name` grants.
    let grants = |docs: &[Value], kind: &str, name: &str| {
        let role = docs
            .iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"));
        let mut out = std::collections::BTreeSet::new();
        for r in role["rules"].as_array().unwrap() {
            for v in r["verbs"].as_array().unwrap() {
                out.insert(format!(
                    "{} {} {} {v}",
                    r["apiGroups"], r["resources"], r["resourceNames"]
                ));
            }
        }
        out
    };
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        crate::support::khai_stdout(&["generate", "values", dir]),
    )
    .unwrap();
    let mut sizes = Vec::new();
    for (flags, set) in [
        (&[][..], "sharding.enabled=false"),
        (&["--shards"][..], "sharding.enabled=true"),
    ] {
        let generated = docs(&crate::support::khai_stdout(
            &[&["generate", "rbac", dir, "--namespace", "ops"][..], flags].concat(),
        ));
        let rendered = docs(&helm::template(
            "khai-cache",
            &["-n", "ops", "-f", helm::arg(values.path()), "--set", set],
        ));
        for (kind, name) in [
            ("ClusterRole", "khai-cache"),
            ("Role", "khai-cache-leader-election"),
        ] {
            let want = grants(&generated, kind, name);
            assert_eq!(grants(&rendered, kind, name), want, "{kind} with {set}");
            sizes.push(want.len());
        }
    }
    assert!(
        sizes[2] > sizes[0] && sizes[3] > sizes[1],
        "sharding grants more: {sizes:?}"
    );
}
