//! `khai test`: offline unit tests of an operator's scripts, with no cluster.
//!
//! A case (see [`case`]) gives an input object, the objects khai's caches would hold, and the
//! expected answer. Running it takes the daemon's own path wherever the daemon does not need a
//! cluster: the operator is loaded by [`Operator::load`]; the object is defaulted from its CRD's
//! schema as the API server would store it ([`crate::schema::default_object`]) and given the
//! metadata the API server sets on create; the controller's script is called through
//! [`Script::call_with_ctx`] with a [`ScriptCtx`] whose lookups read the case's `cache`
//! ([`lookup::MemoryLookup`]); and the answer is validated by [`reconcile::parse_plan`]. What is
//! compared is the script's answer: children before khai adds its ownerReference, labels and
//! hash annotation, and status before khai adds `observedGeneration` and the `Ready` condition.
//! Those additions are the same for every child and every operator, and are tested in khai.
//!
//! Webhook cases ([`webhook`]) take the server's path the same way: the request is built as the
//! API server would send it, the webhook's script answers through the functions the server
//! calls ([`crate::webhook::admission::decide_blocking`],
//! [`crate::webhook::conversion::convert_object`]), and a mutation's patch is applied to the
//! object, as the API server does, before it is compared.

mod admission_cel;
pub(crate) mod case;
pub(crate) mod compare;
mod expect;
mod handler_case;
mod hooks;
pub(crate) mod lookup;
mod problem;
mod reconcile_case;
mod stored;
mod stubbed;
pub(crate) mod webhook;

use handler_case::run_handler;
use reconcile_case::run_reconcile;
use stored::{defaulted, stored};
use stubbed::Stubbed;

pub(crate) use case::{Call, Case};
pub(crate) use compare::Mismatch;
pub(crate) use problem::{Invalid, Problem};

use crate::operator::Operator;
use crate::webhook::admission::Kind;
use std::path::PathBuf;

/// Why a case could not be run at all (as opposed to running and not matching).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    #[error("{}: cannot read: {cause}", file.display())]
    Read {
        file: PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: no test cases (*.yaml)", dir.display())]
    NoCases { dir: PathBuf },
    #[error("{}: {message}", at(file, *pos))]
    Parse {
        file: PathBuf,
        pos: Option<(usize, usize)>,
        message: String,
    },
    #[error("{}: {field}: {message}", file.display())]
    Case {
        file: PathBuf,
        field: String,
        message: String,
    },
    #[error("{}: {invalid}", file.display())]
    Invalid { file: PathBuf, invalid: Invalid },
}

impl Invalid {
    /// This problem, in `case`'s file.
    fn in_case(self, case: &Case) -> Error {
        Error::Invalid {
            file: case.file.clone(),
            invalid: self,
        }
    }
}

fn at(file: &std::path::Path, pos: Option<(usize, usize)>) -> String {
    match pos {
        Some((l, c)) => format!("{}:{l}:{c}", file.display()),
        None => file.display().to_string(),
    }
}

/// Namespace given to a namespaced object that names none, as `kubectl apply` would.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

/// Runs one case against a loaded operator; an empty list means it passed.
pub(crate) fn run_case(op: &Operator, case: &Case) -> Result<Vec<Mismatch>, Error> {
    let stubbed = Stubbed::new(op, case)?;
    let mut mismatches = match &case.call {
        Call::Reconcile => run_reconcile(op, case, &stubbed),
        Call::Validate(input) => webhook::run_admission(op, case, Kind::Validate, input),
        Call::Mutate(input) => webhook::run_admission(op, case, Kind::Mutate, input),
        Call::Convert(input) => webhook::run_conversion(op, case, input),
        Call::Handler(input) => run_handler(op, case, input, &stubbed),
    }?;
    if let Some(got) = stubbed.stubs.mismatch() {
        mismatches.push(Mismatch::new(
            "calls",
            "the calls the case lists, in order",
            got,
        ));
    }
    Ok(mismatches)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The operator of config `toml` and the script `script` saved as `file`, loaded from a
    /// temp dir (kept alive by the returned handle).
    pub(super) fn load_operator(
        toml: &str,
        file: &str,
        script: &str,
    ) -> (tempfile::TempDir, Operator) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("operator.toml"), toml).unwrap();
        std::fs::write(dir.path().join(file), script).unwrap();
        let op = Operator::load(dir.path()).unwrap();
        (dir, op)
    }

    /// An operator in a temp dir with one CRD and the given script.
    fn operator(script: &str) -> (tempfile::TempDir, Operator) {
        let toml = concat!(
            "[operator]\nname = \"t\"\n\n[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\nversions = [\"v1\"]\n",
            "spec.replicas = { type = \"integer\", default = 2 }\nstatus.phase = { type = \"string\" }\n\n",
            "[[controller]]\nfor = \"Web\"\nowns = [\"apps/v1/Deployment\"]\nscript = \"web.rhai\"\n",
        );
        load_operator(toml, "web.rhai", script)
    }

    pub(super) fn case(src: &str) -> Case {
        let obj =
            "object: { apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w }, spec: {} }\n";
        case::parse(Path::new("tests/c.yaml"), &format!("{obj}{src}")).unwrap()
    }

    pub(super) fn run(script: &str, src: &str) -> Vec<String> {
        let (_dir, op) = operator(script);
        let found = run_case(&op, &case(src)).unwrap();
        found.iter().map(ToString::to_string).collect()
    }

    const SCRIPT: &str = r#"
fn reconcile(obj, ctx) {
    let ready = ctx.get("Deployment", obj.metadata.name)?.status?.readyReplicas ?? 0;
    #{
        children: [#{ apiVersion: "apps/v1", kind: "Deployment", metadata: #{ name: obj.metadata.name, namespace: obj.metadata.namespace },
                      spec: #{ replicas: obj.spec.replicas } }],
        status: #{ phase: if ready == obj.spec.replicas { "Ready" } else { "Pending" } },
        requeue_after: "30s",
        events: [#{ reason: "Seen", message: `uid ${obj.metadata.uid} gen ${obj.metadata.generation}` }],
    }
}
"#;

    #[test]
    fn the_object_is_defaulted_and_given_create_metadata() {
        let found = run(
            SCRIPT,
            "expect:\n  children: [{ metadata: { namespace: default }, spec: { replicas: 2 } }]\n  events: [{ type: Normal, message: uid uid-w gen 1 }]\n  requeue_after: 30s\n",
        );
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn cache_contents_reach_the_script() {
        let cache = "cache:\n  - { apiVersion: apps/v1, kind: Deployment, metadata: { name: w }, status: { readyReplicas: 2 } }\n";
        let found = run(
            SCRIPT,
            &format!("{cache}expect:\n  status: {{ phase: Ready }}\n"),
        );
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(
            run(SCRIPT, "expect:\n  status: { phase: Ready }\n"),
            [r#"status.phase: expected "Ready", got "Pending""#]
        );
    }

    const PROPAGATE: &str = r#"
fn reconcile(obj, ctx) {
    let pods = k8s::list("v1/Pod", #{ namespace: obj.metadata.namespace, labels: #{ web: obj.metadata.name } });
    for p in pods { k8s::label(p, #{ tier: "web" }); }
    try { k8s::get("v1/Pod", "default", "gone"); } catch (e) { return #{ status: #{ phase: e.reason } }; }
    #{ status: #{ phase: "Labelled" } }
}
"#;

    #[test]
    fn stubbed_calls_answer_in_order_and_an_error_is_caught_as_a_value() {
        let calls = concat!(
            "calls:\n",
            "  - request: { call: k8s::list, kind: v1/Pod, namespace: default, labels: web=w }\n",
            "    response: [{ apiVersion: v1, kind: Pod, metadata: { name: p1, namespace: default } }]\n",
            "  - request: { call: k8s::patch, name: p1, patch: { metadata: { labels: { tier: web } } } }\n",
            "    response: {}\n",
            "  - request: { call: k8s::get, name: gone }\n",
            "    error: { reason: not_found, code: 404, message: gone }\n",
        );
        let found = run(
            PROPAGATE,
            &format!("{calls}expect:\n  status: {{ phase: not_found }}\n"),
        );
        assert!(found.is_empty(), "{found:?}");
    }

    const HTTP: &str = r#"
fn reconcile(obj, ctx) {
    let token = ctx.secret("creds", "token");
    let r = http::post("https://api.example.com/things", #{
        headers: #{ authorization: `Bearer ${token}` }, json: #{ name: obj.metadata.name } });
    let pods = k8s::list("v1/Pod", #{ namespace: "default" });
    let reason = "";
    try { http::get("https://api.example.com/health"); } catch (e) { reason = e.message; }
    #{ status: #{ phase: `${r.status} ${r.json.id} ${r.body.len()} ${pods.len()} ${reason}` } }
}
fn finalize(obj, ctx) { http::delete(`https://api.example.com/things/${obj.status.phase}`).status == 204 }
"#;

    /// An operator whose script reads `ctx.secret("creds", …)` (`[operator] secrets`).
    fn secret_operator(script: &str) -> (tempfile::TempDir, Operator) {
        let toml = concat!(
            "[operator]\nname = \"t\"\nsecrets = [\"creds\"]\n\n",
            "[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\nversions = [\"v1\"]\n",
            "status.phase = { type = \"string\" }\n\n",
            "[[controller]]\nfor = \"Web\"\nscript = \"web.rhai\"\n",
        );
        load_operator(toml, "web.rhai", script)
    }

    fn run_with_secrets(script: &str, src: &str) -> Result<Vec<String>, Error> {
        let (_dir, op) = secret_operator(script);
        let found = run_case(&op, &case(src))?;
        Ok(found.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn http_requests_are_answered_by_the_case_in_order_with_k8s_calls_and_secrets_it_lists() {
        let src = concat!(
            "secrets:\n  - { metadata: { name: creds }, stringData: { token: tok } }\n",
            "calls:\n",
            "  - request: { call: http::request, method: POST, url: \"https://api.example.com/things\",\n",
            "               headers: { authorization: Bearer tok }, json: { name: w } }\n",
            "    response: { status: 201, json: { id: t-1 } }\n",
            "  - request: { call: k8s::list, kind: v1/Pod }\n",
            "    response: []\n",
            "  - request: { method: GET, url: \"https://api.example.com/health\" }\n",
            "    error: { reason: timeout }\n",
        );
        let want = "expect:\n  status: { phase: \"201 t-1 12 0 http::request GET api.example.com: timeout\" }\n";
        let found = run_with_secrets(HTTP, &format!("{src}{want}")).unwrap();
        assert!(found.is_empty(), "{found:?}");

        // A request the case does not list fails it, named; so does a wrong header.
        let wrong = src.replace("Bearer tok", "Bearer other");
        let found = run_with_secrets(HTTP, &format!("{wrong}{want}")).unwrap();
        assert!(
            found[1].contains(r#"unexpected call {"call":"http::request","method":"POST","url":"https://api.example.com/things","headers":{"authorization":"Bearer tok""#),
            "{found:?}"
        );

        // No Secret in the case: ctx.secret reads `()` (text ""), as a missing Secret does.
        let no_secret = src.replace(
            "secrets:\n  - { metadata: { name: creds }, stringData: { token: tok } }\n",
            "",
        );
        let found = run_with_secrets(HTTP, &format!("{no_secret}{want}")).unwrap();
        assert!(
            found[0].contains(r#""authorization":"Bearer ""#),
            "{found:?}"
        );

        // A Secret the config does not list is refused where the case gives it.
        let err = run_with_secrets(
            HTTP,
            "secrets:\n  - { metadata: { name: other } }\nexpect: {}\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tests/c.yaml: secrets[0]: Secret default/other is not in [operator] secrets, so \
             ctx.secret could never read it"
        );
    }

    #[test]
    fn an_object_being_deleted_calls_finalize_and_its_answer_is_checked() {
        let obj = "object: { apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w, deletionTimestamp: \"2026-01-01T00:00:00Z\" }, status: { phase: t-1 } }\n";
        let calls = "calls:\n  - request: { method: DELETE, url: \"https://api.example.com/things/t-1\" }\n    response: { status: 204 }\n";
        let (_dir, op) = secret_operator(HTTP);
        let run = |src: &str| -> Vec<String> {
            let case = case::parse(Path::new("tests/c.yaml"), src).unwrap();
            run_case(&op, &case)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert!(run(&format!("{obj}{calls}expect:\n  finalized: true\n")).is_empty());
        assert_eq!(
            run(&format!("{obj}{calls}expect:\n  finalized: false\n")),
            ["finalized: expected false, got true"]
        );
    }

    #[test]
    fn an_unexpected_call_fails_the_case_naming_it() {
        let found = run(PROPAGATE, "expect: {}\n");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[1].starts_with(r#"calls: expected the calls the case lists, in order, got unexpected call {"call":"k8s::list","kind":"v1/Pod""#),
            "{found:?}"
        );
        let missing = run(
            "fn reconcile(obj, ctx) { #{} }",
            "calls:\n  - request: { call: k8s::get }\nexpect: {}\n",
        );
        assert_eq!(
            missing,
            [
                r#"calls: expected the calls the case lists, in order, got expected calls not made: {"call":"k8s::get"}"#
            ]
        );
    }

    #[test]
    fn wrong_requeue_and_unexpected_error_are_mismatches() {
        assert_eq!(
            run(SCRIPT, "expect:\n  requeue_after: null\n"),
            ["requeue_after: expected none, got 30s"]
        );
        let found = run("fn reconcile(obj, ctx) { throw \"boom\" }", "expect: {}\n");
        assert_eq!(found.len(), 1);
        assert!(
            found[0].starts_with("reconcile: expected success, got error: "),
            "{found:?}"
        );
        assert!(
            found[0].ends_with("web.rhai:1:26: in reconcile: boom"),
            "{found:?}"
        );
    }

    #[test]
    fn expected_errors_match_by_substring_including_invalid_answers() {
        let bad = "fn reconcile(obj, ctx) { #{ stauts: #{} } }";
        assert!(run(bad, "expect:\n  error: \"stauts: unknown key\"\n").is_empty());
        assert_eq!(
            run(SCRIPT, "expect:\n  error: boom\n"),
            [r#"error: expected an error containing "boom", got success"#]
        );
    }

    #[test]
    fn unwatched_cache_kind_is_a_case_error() {
        let (_dir, op) = operator(SCRIPT);
        let c = case("cache:\n  - { apiVersion: v1, kind: Secret, metadata: { name: s } }\n");
        let err = run_case(&op, &c).unwrap_err().to_string();
        assert_eq!(
            err,
            "tests/c.yaml: cache[0]: kind \"Secret\" is not watched by controller web (for, owns, watches), so ctx lookups could never see it"
        );
    }

    /// An operator with one CRD and the handler entries `toml`, all in `h.rhai`.
    pub(super) fn handler_operator(toml: &str, script: &str) -> (tempfile::TempDir, Operator) {
        let head = "[operator]\nname = \"t\"\n\n[[crd]]\ngroup = \"t.khai.dev\"\nkind = \"Web\"\nversions = [\"v1\"]\nspec.replicas = { type = \"integer\" }\n\n";
        load_operator(&format!("{head}{toml}"), "h.rhai", script)
    }

    #[test]
    fn a_handler_case_sets_ctx_retry() {
        let (_dir, op) = handler_operator(
            "[[handler]]\nfor = \"Web\"\non = \"create\"\nscript = \"h.rhai\"\nfunction = \"made\"\n",
            "fn made(obj, ctx, change) { if ctx.retry < 2 { throw `retry ${ctx.retry}`; } #{ status: #{ r: ctx.retry, s: ctx.started } } }",
        );
        let run = |extra: &str| {
            let c = case(&format!("handler: made\n{extra}"));
            let found = run_case(&op, &c).unwrap();
            found.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert!(run("expect: { error: retry 0 }\n").is_empty());
        assert!(run("retry: 1\nexpect: { error: retry 1 }\n").is_empty());
        assert!(run("retry: 2\nexpect: { status: { r: 2 } }\n").is_empty());
    }

    #[test]
    fn retry_is_only_for_handler_cases() {
        let err = case::parse(
            Path::new("tests/c.yaml"),
            "object: { apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w } }\nretry: 1\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tests/c.yaml: retry: only for handler cases (`handler` with `object`)"
        );
    }

    #[test]
    fn a_spy_case_gets_the_whole_object() {
        let (_dir, op) = handler_operator(
            "[[handler]]\nfor = \"Web\"\non = \"event\"\nscript = \"h.rhai\"\nfunction = \"spied\"\n",
            "fn spied(obj, ctx, event) { throw `${event.type} ${event.object.metadata.name}`; }",
        );
        let c = case("handler: spied\nexpect: { error: ADDED w }\n");
        assert!(run_case(&op, &c).unwrap().is_empty());
    }

    #[test]
    fn ctx_list_takes_a_namespace_or_every_one_and_refuses_unknown_options() {
        let script = r#"
fn reconcile(obj, ctx) {
    let names = |l| l.map(|o| `${o.metadata.namespace}/${o.metadata.name}`);
    #{ status: #{ phase: `${names.call(ctx.list("Deployment"))} ${names.call(ctx.list("Deployment", #{ namespace: "other" }))} ${names.call(ctx.list("Deployment", #{ namespace: "*", selector: "app=x" }))}` } }
}
"#;
        let cache = "cache:\n  - { apiVersion: apps/v1, kind: Deployment, metadata: { name: here, labels: { app: x } } }\n  - { apiVersion: apps/v1, kind: Deployment, metadata: { name: there, namespace: other, labels: { app: x } } }\n";
        let expect = r#"expect: { status: { phase: '["default/here"] ["other/there"] ["default/here", "other/there"]' } }"#;
        assert_eq!(
            run(script, &format!("{cache}{expect}\n")),
            Vec::<String>::new()
        );
        let bad = r#"fn reconcile(obj, ctx) { ctx.list("Deployment", #{ namspace: "*" }); #{} }"#;
        assert!(run(bad, "expect: { error: 'unknown option \"namspace\"' }\n").is_empty());
    }

    #[test]
    fn a_failing_reconcile_case_checks_the_event_and_status_khai_writes() {
        let script = "fn reconcile(obj, ctx) { fail(\"no capacity\") }";
        assert_eq!(
            run(script, "expect:\n  error: no capacity\n  events: []\n"),
            ["events: expected 0 items, got 1 item"],
            "the failure's Warning Event is there to check"
        );
        let expect = "expect:\n  error: no capacity\n  events: [{ type: Warning, reason: Failed }]\n  \
             status:\n    phase: old\n    conditions:\n      - { type: Ready, status: \"False\", reason: Failed }\n      - { type: Failed, status: \"True\", reason: Failed }\n";
        let obj = "object: { apiVersion: t.khai.dev/v1, kind: Web, metadata: { name: w }, spec: {}, status: { phase: old } }\n";
        let (_dir, op) = operator(script);
        let c = case::parse(Path::new("tests/c.yaml"), &format!("{obj}{expect}")).unwrap();
        let found = run_case(&op, &c).unwrap();
        assert!(found.is_empty(), "{found:?}");
        // A status the failure does not write is a mismatch.
        let c = case::parse(
            Path::new("tests/c.yaml"),
            &format!("{obj}expect:\n  error: no capacity\n  status: {{ phase: new }}\n"),
        )
        .unwrap();
        assert_eq!(
            run_case(&op, &c).unwrap()[0].to_string(),
            r#"status.phase: expected "new", got "old""#
        );
    }
}
