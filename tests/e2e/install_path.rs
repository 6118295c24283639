//! Every example through the user's install path, as a class: for each directory of `examples/`
//! holding an `operator.toml` (each `examples/kopf/*` port included; found by listing, so a new
//! example is covered without touching this file), what a user does, twice:
//!
//! - `khai generate values DIR > values.yaml` and `helm install` of `charts/khai`;
//! - `khai generate manifests DIR --namespace NS | kubectl apply --server-side -f -`.
//!
//! Then khai is started as the Deployment says, under the ServiceAccount's token (the kubelet's
//! part, [`crate::support::kubelet`]), the example's samples are applied and its expected
//! outcome must be reached; the API server's audit log must show no request of that
//! ServiceAccount answered 403, and `khai rbac verify --config-map` must pass under its token.
//!
//! What to apply and what to wait for is declared by each example in its `e2e.toml`: `apply`
//! (sample files, in order), `[[object]]` (objects written inline), `[[expect]]` (an object of
//! a kind, by name or any in the namespace, whose `fields` hold given values, or a line khai
//! logs), an optional `[service]` (a stand-in on loopback for an external HTTP service the
//! example calls, answering as declared) and `excluded = "why"` for an example that cannot be
//! installed here. An example without `e2e.toml` fails the test. In `e2e.toml`, `${NAMESPACE}`
//! is the namespace the samples go in (not khai's own, as a user's objects are not) and
//! `${OPERATOR}` the operator's name as installed.
//!
//! Each installation gets its own namespace, operator name and API groups (each CRD group `G`
//! of the example becomes `<tag>.G` in a copy of its directory), so installations share nothing
//! cluster-wide: neither CRDs, nor webhook configurations, nor ClusterRoles, and run at once.

use crate::support::kubelet::{container_of, service_account_kubeconfig};
use crate::support::metrics::wait_for_leadership;
use crate::support::{self, DEADLINE, Khai, TestNamespace, audit, helm};
use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Installations running at once per test (two tests run side by side).
const AT_ONCE: usize = 4;

/// An example's `e2e.toml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    /// Why the example cannot be installed here; it is then skipped, saying so.
    excluded: Option<String>,
    /// Sample files of the example, applied in this order.
    #[serde(default)]
    apply: Vec<String>,
    /// Objects written inline, applied after `apply`.
    #[serde(default)]
    object: Vec<Value>,
    /// What must come of it, in order.
    #[serde(default)]
    expect: Vec<Expect>,
    /// A stand-in for an external HTTP service the example calls.
    service: Option<Service>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    what: String,
    /// A line khai logs (a substring of it).
    log: Option<String>,
    api_version: Option<String>,
    kind: Option<String>,
    /// Left out: any object of the kind in the namespace.
    name: Option<String>,
    #[serde(default)]
    fields: Vec<FieldCheck>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldCheck {
    /// `a.b[0]["c.d"]`: keys separated by dots, array indexes and quoted keys in brackets.
    path: String,
    equals: Option<Value>,
    present: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Service {
    /// The host the example's config names; the copy names the stand-in's address instead.
    host: String,
    answers: Vec<ServiceAnswer>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceAnswer {
    method: String,
    /// The path, without the query.
    path: String,
    status: u16,
    json: Value,
}

/// How the operator is installed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Via {
    Helm,
    Manifests,
}

/// Every example directory: those of `examples/` holding an `operator.toml`, and so on down
/// directories that hold none (`examples/kopf`).
fn examples() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        entries.sort();
        for d in entries {
            if d.join("operator.toml").is_file() {
                out.push(d);
            } else {
                walk(&d, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&support::repo_root().join("examples"), &mut out);
    out
}

/// `examples/kopf/01-minimal` → `kopf/01-minimal`.
fn example_name(dir: &Path) -> String {
    dir.strip_prefix(support::repo_root().join("examples"))
        .unwrap()
        .display()
        .to_string()
}

/// The example's `e2e.toml` with the placeholders and group renames applied.
fn read_spec(dir: &Path, edit: &dyn Fn(&str) -> String) -> Result<Spec, String> {
    let file = dir.join("e2e.toml");
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "{} has no e2e.toml ({e}): every example declares its samples and expected outcome \
             (see tests/e2e/install_path.rs)",
            example_name(dir)
        )
    })?;
    toml::from_str(&edit(&text)).map_err(|e| format!("{}: {e}", file.display()))
}

/// No cluster: every example declares what to apply and what to wait for, each sample file it
/// names exists, and every expectation says what it waits for.
#[test]
fn every_example_declares_its_samples_and_expected_outcome() {
    let mut problems = Vec::new();
    let all = examples();
    assert!(all.len() >= 20, "examples found: {all:?}");
    for dir in &all {
        let spec = match read_spec(dir, &|t| t.to_string()) {
            Ok(s) => s,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        if spec.excluded.is_some() {
            continue;
        }
        for f in &spec.apply {
            if !dir.join(f).is_file() {
                problems.push(format!("{}: apply names {f}, not there", example_name(dir)));
            }
        }
        if spec.expect.is_empty() {
            problems.push(format!("{}: no [[expect]]", example_name(dir)));
        }
        for e in &spec.expect {
            let object = e.api_version.is_some() && e.kind.is_some() && !e.fields.is_empty();
            if e.log.is_some() == object {
                problems.push(format!(
                    "{}: expect {:?} needs either `log`, or `api_version`, `kind` and `fields`",
                    example_name(dir),
                    e.what
                ));
            }
            for f in &e.fields {
                if f.equals.is_some() == f.present.is_some() {
                    problems.push(format!(
                        "{}: {}: needs exactly one of `equals` and `present`",
                        example_name(dir),
                        f.path
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test]
async fn every_example_installed_with_helm_reaches_its_outcome_with_no_403() {
    every_example(Via::Helm).await;
}

#[tokio::test]
async fn every_example_installed_from_generated_manifests_reaches_its_outcome_with_no_403() {
    if support::kubectl().is_none() {
        eprintln!(
            "skipped: kubectl is not on PATH or in /usr/bin, so nothing can apply the manifests"
        );
        return;
    }
    every_example(Via::Manifests).await;
}

/// Installs every example `via`, a few at a time, and fails naming each that failed.
async fn every_example(via: Via) {
    let gate = Arc::new(tokio::sync::Semaphore::new(AT_ONCE));
    let mut runs = Vec::new();
    // `KHAI_TEST_EXAMPLES=hello,kopf/13-hooks` narrows a run to those, while working on them.
    let only = std::env::var("KHAI_TEST_EXAMPLES").ok();
    let wanted = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|w| w == name))
    };
    for (i, dir) in examples().into_iter().enumerate() {
        if !wanted(&example_name(&dir)) {
            continue;
        }
        let gate = gate.clone();
        let name = example_name(&dir);
        let task = tokio::spawn(async move {
            let _turn = gate.acquire_owned().await.unwrap();
            install(&dir, via, i).await
        });
        runs.push((name, task));
    }
    let mut failed = Vec::new();
    for (name, task) in runs {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(why)) => failed.push(format!("{name}: {why}")),
            Err(e) => failed.push(format!("{name}: {}", panic_text(e.into_panic()))),
        }
    }
    assert!(
        failed.is_empty(),
        "installed {via:?}, these examples failed:\n\n{}",
        failed.join("\n\n")
    );
}

/// What a panic said.
fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Replaces each of `from` by its `to` in `text` in one pass, so no replacement is replaced
/// again (a group that ends another group).
fn replace_all(text: &str, pairs: &[(String, String)]) -> String {
    let mut out = text.to_string();
    let mut sorted: Vec<&(String, String)> = pairs.iter().collect();
    sorted.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    for (i, (from, _)) in sorted.iter().enumerate() {
        out = out.replace(from.as_str(), &format!("\u{0}{i}\u{0}"));
    }
    for (i, (_, to)) in sorted.iter().enumerate() {
        out = out.replace(&format!("\u{0}{i}\u{0}"), to);
    }
    out
}

/// Copies `from` into `to`, each text file edited by `edit`.
fn copy_tree(from: &Path, to: &Path, edit: &dyn Fn(&str) -> String) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target, edit);
        } else {
            match std::fs::read_to_string(entry.path()) {
                Ok(text) => std::fs::write(target, edit(&text)).unwrap(),
                Err(_) => {
                    std::fs::copy(entry.path(), target).unwrap();
                }
            }
        }
    }
}

/// `text` (an operator.toml) with `[operator] name` set to `name`.
fn with_operator_name(text: &str, name: &str) -> String {
    let line = format!("name = \"{name}\"");
    let mut out = Vec::new();
    let mut in_operator = false;
    let mut done = false;
    for l in text.lines() {
        let trimmed = l.trim_start();
        if trimmed.starts_with('[') {
            if in_operator && !done {
                out.push(line.clone());
                done = true;
            }
            in_operator = trimmed.starts_with("[operator]");
        }
        if in_operator && !done && trimmed.starts_with("name =") {
            out.push(line.clone());
            done = true;
            continue;
        }
        out.push(l.to_string());
    }
    if in_operator && !done {
        out.push(line.clone());
        done = true;
    }
    let mut text = out.join("\n") + "\n";
    if !done {
        text = format!("[operator]\n{line}\n\n{text}");
    }
    text
}

/// Runs `program args`, which must succeed; returns its standard output.
fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .env("KUBECONFIG", support::kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{} {args:?} failed:\n{}{}",
            program.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The API of `api_version`/`kind` in `ns` (or cluster-wide), found by discovery; a kind of a
/// CRD khai has just installed may take a moment to be served.
async fn api_for(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    ns: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((ar, caps)) => {
                return match caps.scope {
                    Scope::Namespaced => Api::namespaced_with(client.clone(), ns, &ar),
                    Scope::Cluster => Api::all_with(client.clone(), &ar),
                };
            }
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "{api_version} {kind} not served after {DEADLINE:?}: {e}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The value at `path` (`a.b[0]["c.d"]`) in `v`.
fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    let mut rest = path;
    while !rest.is_empty() {
        rest = rest.strip_prefix('.').unwrap_or(rest);
        if let Some(after) = rest.strip_prefix('[') {
            let (inside, tail) = after.split_once(']')?;
            cur = match inside.strip_prefix('"').and_then(|k| k.strip_suffix('"')) {
                Some(key) => cur.get(key)?,
                None => cur.get(inside.parse::<usize>().ok()?)?,
            };
            rest = tail;
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            cur = cur.get(&rest[..end])?;
            rest = &rest[end..];
        }
    }
    Some(cur)
}

/// Waits, through a watch, until any object of `api` satisfies `pred` (as
/// [`support::wait_for_any`], for a kind found by discovery).
async fn wait_for_any_dynamic(
    api: Api<DynamicObject>,
    what: &str,
    pred: impl Fn(&DynamicObject) -> bool,
) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let stream = watcher(api, watcher::Config::default()).applied_objects();
    let found = async {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            if item.as_ref().is_ok_and(&pred) {
                return true;
            }
        }
        false
    };
    match tokio::time::timeout(DEADLINE, found).await {
        Ok(true) => {}
        Ok(false) => panic!("watch ended while waiting for {what}"),
        Err(_) => panic!("timed out after {DEADLINE:?} waiting for {what}"),
    }
}

/// Whether `obj` holds every field check of `e`.
fn holds(e: &Expect, obj: &DynamicObject) -> bool {
    let v = serde_json::to_value(obj).unwrap();
    e.fields.iter().all(|f| {
        let found = lookup(&v, &f.path);
        match (&f.equals, f.present) {
            (Some(want), _) => found == Some(want),
            (None, Some(present)) => found.is_some_and(|x| !x.is_null()) == present,
            (None, None) => false,
        }
    })
}

/// One example installed `via`, its samples applied and its outcome reached, with no 403.
async fn install(dir: &Path, via: Via, index: usize) -> Result<(), String> {
    let client = support::client().await;
    let example = example_name(dir);
    let prefix = match via {
        Via::Helm => "iph",
        Via::Manifests => "ipm",
    };
    // khai's own namespace, and the one its samples go in: a user's objects are not in the
    // operator's namespace (where the release grants more, on its ConfigMap and Events).
    let ns = TestNamespace::new(&client, &format!("{prefix}{index}")).await;
    let samples = TestNamespace::new(&client, &format!("{prefix}{index}s")).await;
    let tag = ns.name.rsplit('-').next().unwrap().to_string();
    let operator = format!("{prefix}{index}-{tag}");
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("operator");

    // The example's groups, each made this installation's own.
    let config: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join("operator.toml")).unwrap()).unwrap();
    let mut renames: Vec<(String, String)> = config
        .get("crd")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("group")?.as_str())
        .map(|g| (g.to_string(), format!("{tag}.{g}")))
        .collect();
    renames.dedup();
    renames.extend([
        ("${NAMESPACE}".to_string(), samples.name.clone()),
        ("${OPERATOR}".to_string(), operator.clone()),
    ]);
    let edit = |t: &str| replace_all(t, &renames);
    let spec = read_spec(dir, &edit)?;
    if let Some(why) = &spec.excluded {
        eprintln!("{example}: excluded: {why}");
        return Ok(());
    }
    copy_tree(dir, &copy, &edit);
    let toml_path = copy.join("operator.toml");
    let mut text = with_operator_name(&std::fs::read_to_string(&toml_path).unwrap(), &operator);
    if let Some(service) = &spec.service {
        let answers = service.answers.clone();
        let (addr, _seen) = crate::http::serve(move |method, path, _, _| {
            let path = path.split_once('?').map_or(path, |(p, _)| p);
            answers
                .iter()
                .find(|a| a.method == method && a.path == path)
                .map(|a| (a.status, "application/json", a.json.to_string()))
                .or(Some((404, "text/plain", "no such answer".into())))
        })
        .await;
        text = text
            .replace(
                &format!("https://{}", service.host),
                &format!("http://{addr}"),
            )
            .replace(&service.host, &addr.to_string());
    }
    std::fs::write(&toml_path, &text).unwrap();
    let copy_arg = copy.to_str().unwrap();
    let has_webhooks = text.contains("[[webhook]]");

    // Installed as a user installs it.
    let khai_bin = support::khai_bin();
    let mark = audit::mark();
    match via {
        Via::Helm => {
            let values = run(&khai_bin, &["generate", "values", copy_arg], None)?;
            let values_file = tmp.path().join("values.yaml");
            std::fs::write(&values_file, values).unwrap();
            let chart = helm::chart();
            helm::run(&[
                "install",
                &format!("r-{operator}"),
                helm::arg(&chart),
                "-f",
                helm::arg(&values_file),
                "-n",
                &ns.name,
            ])
            .map_err(|e| format!("helm install failed:\n{e}"))?;
        }
        Via::Manifests => {
            let manifests = run(
                &khai_bin,
                &["generate", "manifests", copy_arg, "--namespace", &ns.name],
                None,
            )?;
            let kubectl = support::kubectl().ok_or("kubectl is not installed")?;
            run(
                &kubectl,
                &["apply", "--server-side", "-f", "-"],
                Some(&manifests),
            )?;
        }
    }

    // khai, as the Deployment says, under its ServiceAccount's token.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/name={operator}"));
    let mut found = deployments.list(&lp).await.unwrap().items;
    if found.len() != 1 {
        return Err(format!("{} Deployments of the operator", found.len()));
    }
    let deploy = found.remove(0);
    let pod = format!("{}-5d8f9-x7k2q", deploy.metadata.name.clone().unwrap());
    let c = container_of(&deploy, &pod, &ns.name);
    let kubeconfig =
        service_account_kubeconfig(&client, &ns.name, &c.service_account, tmp.path()).await;
    let mut env = c.env.clone();
    for (k, v) in &mut env {
        if k == "KHAI_WEBHOOK_URL" {
            // The pod network: the API server reaches the webhooks on loopback here, at the
            // port khai binds (port 0 in the URL stands for it).
            *v = "https://127.0.0.1:0".into();
        }
    }
    env.extend([
        ("KUBECONFIG".into(), kubeconfig.display().to_string()),
        ("KHAI_METRICS_BIND".into(), "127.0.0.1:0".into()),
        ("KHAI_WEBHOOK_BIND".into(), "127.0.0.1:0".into()),
    ]);
    let khai = Khai::start_exact(&khai_bin, &c.args, &env);
    let user = format!("system:serviceaccount:{}:{}", ns.name, c.service_account);

    // The samples, once khai has installed the CRDs and registered its webhooks.
    let crds = run(&khai_bin, &["generate", "crds", copy_arg], None)?;
    for crd in serde_saphyr::from_multiple::<Value>(&crds).unwrap() {
        if let Some(name) = crd["metadata"]["name"].as_str() {
            support::wait_for_crd(&client, name).await;
        }
    }
    // Ready (the pod's readiness probe) and leading, as a user applies objects to an operator
    // whose pod is Ready.
    let metrics = khai.metrics_addr().await;
    crate::operations::readyz_until(&metrics, 200).await;
    wait_for_leadership(&metrics, "leadership", true).await;
    if has_webhooks {
        // The Deployment runs khai with `--log-format json`.
        khai.wait_for_webhooks_installed(0, "webhook configurations to be installed")
            .await;
    }
    let mut objects = Vec::new();
    for f in &spec.apply {
        let text = std::fs::read_to_string(copy.join(f)).unwrap();
        objects.extend(
            serde_saphyr::from_multiple::<Value>(&text)
                .unwrap()
                .into_iter()
                .filter(|d| !d.is_null()),
        );
    }
    objects.extend(spec.object.iter().cloned());
    for o in objects {
        let obj: DynamicObject = serde_json::from_value(o.clone()).unwrap();
        let types = obj.types.clone().unwrap_or_default();
        let api = api_for(&client, &types.api_version, &types.kind, &samples.name).await;
        api.create(&PostParams::default(), &obj)
            .await
            .map_err(|e| format!("creating {o}: {e}"))?;
    }

    // Its outcome. A wait that fails says so with what the API server refused khai, if
    // anything, and how khai's log ends.
    let outcome = std::panic::AssertUnwindSafe(async {
        for e in &spec.expect {
            if let Some(line) = &e.log {
                let line = line.clone();
                khai.wait_for_log(0, &e.what, move |l| l.contains(&line))
                    .await;
                continue;
            }
            let (api_version, kind) = (e.api_version.as_deref(), e.kind.as_deref());
            let api = api_for(&client, api_version.unwrap(), kind.unwrap(), &samples.name).await;
            match &e.name {
                Some(name) => {
                    support::wait_for(&api, name, &e.what, |o: Option<&DynamicObject>| {
                        o.is_some_and(|o| holds(e, o))
                    })
                    .await;
                }
                None => {
                    wait_for_any_dynamic(api, &e.what, |o| holds(e, o)).await;
                }
            }
        }
    })
    .catch_unwind()
    .await;
    if let Err(panic) = outcome {
        let why = panic_text(panic);
        let why = why.lines().next().unwrap_or_default();
        return Err(format!(
            "{why}\nrequests refused to {user}: {:#?}\nkhai's log ends:\n{}",
            audit::forbidden(mark, &user),
            khai.tail(12)
        ));
    }

    // Nothing refused, and `khai rbac verify` agrees with what the installation granted.
    let refused = audit::forbidden(mark, &user);
    if !refused.is_empty() {
        return Err(format!(
            "the API server refused {user}:\n{}",
            refused.join("\n")
        ));
    }
    let config_map = c
        .args
        .iter()
        .find_map(|a| a.strip_prefix("configmap:"))
        .and_then(|s| s.split_once('/'))
        .map(|(_, name)| name.to_string())
        .ok_or("the Deployment reads no ConfigMap")?;
    let out = Command::new(&khai_bin)
        .args([
            "rbac",
            "verify",
            copy_arg,
            "--namespace",
            &ns.name,
            "--config-map",
            &config_map,
        ])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(format!(
            "khai rbac verify under {user}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    tokio::time::timeout(DEADLINE, khai.terminate())
        .await
        .map_err(|_| "khai did not stop".to_string())?;
    Ok(())
}
