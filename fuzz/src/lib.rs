//! What each fuzz target checks, as plain functions of the input bytes.
//!
//! Every target feeds hostile bytes to a path where khai meets input it does not control (the
//! config an author writes, the reviews the API server sends, the objects and answers that
//! cross between JSON and Rhai) and checks more than "no panic": errors are diagnostics in the
//! author's words, and what goes through a conversion comes back unchanged. A failed check
//! panics, which libFuzzer reports as a crash and saves the input (see `scripts/fuzz`).

use khai::config::{self, model::Crd};
use khai::reconcile::{self, conditions};
use khai::script::{self, Limits, Lookup, LookupError, Script, ScriptCtx, ScriptError};
use khai::webhook::{admission, conversion};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The config formats `config::load` picks by file extension.
#[derive(Debug, Clone, Copy)]
pub enum Format {
    Toml,
    Yaml,
}

/// Config text → model: parse and validate give a model or located diagnostics naming the
/// file, never a panic; a valid model's CRDs always render.
pub fn config(format: Format, data: &[u8]) {
    // `load` reads the file as UTF-8 and reports anything else as a diagnostic first.
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let file = Path::new(match format {
        Format::Toml => "operator.toml",
        Format::Yaml => "operator.yaml",
    });
    match config::check_source(file, src) {
        Err(e) => {
            assert!(!e.0.is_empty(), "an error without a diagnostic");
            for d in &e.0 {
                let text = d.to_string();
                assert!(
                    text.starts_with("operator."),
                    "unlocated diagnostic: {text}"
                );
                assert!(!d.message.trim().is_empty(), "empty message: {text}");
                assert_in_words(&d.message);
            }
        }
        Ok(model) => {
            for crd in &model.crds {
                render_crd(crd, &mut json!({}));
            }
        }
    }
}

/// A message for an author: it does not repeat a position the diagnostic carries (`line 2
/// column 9`), and holds no Rust `{:?}` dump (`Nodes { nodes: 250001 }`). Text the author wrote,
/// quoted in backticks or double quotes, is not judged.
fn assert_in_words(message: &str) {
    let mut own = String::new();
    let mut quote = None;
    let mut chars = message.chars();
    while let Some(c) = chars.next() {
        match quote {
            // Inside double quotes, text is escaped as Rust's `{:?}` escapes it.
            Some('"') if c == '\\' => {
                chars.next();
            }
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '`' || c == '"' => quote = Some(c),
            None => own.push(c),
        }
    }
    let words: Vec<&str> = own.split(' ').collect();
    for w in words.windows(4) {
        let number = |s: &str| {
            let digits = s.trim_end_matches(':');
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        };
        assert!(
            !(w[0] == "line" && number(w[1]) && w[2] == "column" && number(w[3])),
            "a position inside the message: {message}"
        );
        let camel = |s: &str| {
            s.starts_with(|c: char| c.is_ascii_uppercase())
                && s.chars().all(|c| c.is_ascii_alphanumeric())
        };
        let field = |s: &str| {
            s.len() > 1
                && s.ends_with(':')
                && s.trim_end_matches(':')
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_')
        };
        assert!(
            !(camel(w[0]) && w[1] == "{" && field(w[2])),
            "a Rust debug dump in the message: {message}"
        );
    }
}

/// A config (YAML, so JSON too), a NUL byte, then a custom object: the config's CRDs render to
/// manifests with a structural root, and defaulting the object from each schema is idempotent
/// (the API server defaults on every read, so a second pass must change nothing).
pub fn schema(data: &[u8]) {
    let (config_bytes, object_bytes) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b"{}"[..]),
    };
    let Ok(src) = std::str::from_utf8(config_bytes) else {
        return;
    };
    let Ok(model) = config::check_source(Path::new("operator.yaml"), src) else {
        return;
    };
    let object: Value = serde_json::from_slice(object_bytes).unwrap_or_else(|_| json!({}));
    for crd in &model.crds {
        render_crd(crd, &mut object.clone());
    }
}

fn render_crd(crd: &Crd, object: &mut Value) {
    let manifest = match khai::schema::crd_manifest(crd) {
        Ok(m) => m,
        // Only a CRD whose schema_file was never read (check_source reads no file).
        Err(khai::schema::Error::SchemaFileNotRead { .. }) if crd.schema_file.is_some() => return,
        Err(e) => panic!("crd_manifest failed on a valid config: {e}"),
    };
    let versions = manifest["spec"]["versions"].as_array();
    for v in versions.into_iter().flatten() {
        let root = &v["schema"]["openAPIV3Schema"];
        assert_eq!(root["type"], "object", "non-structural root: {root}");
    }
    assert!(serde_json::to_vec(&manifest).is_ok());
    if khai::schema::default_object(crd, object).is_ok() {
        let once = object.clone();
        let _ = khai::schema::default_object(crd, object);
        assert_eq!(*object, once, "defaulting twice changed the object");
    }
}

/// An AdmissionReview body: bad ones are rejected with a message, good ones are answered. The
/// "script's answer" is the request's `oldObject`: a mutation's JSON Patch, applied to the
/// request's object, yields exactly that answer.
pub fn admission(data: &[u8]) {
    if let Err(admission::BadReview(msg)) = admission::parse(data) {
        assert!(msg.starts_with("malformed AdmissionReview"), "{msg}");
        return;
    }
    // Objects stay raw until converted, so `parse` accepts an escape that is no character (a
    // lone surrogate) inside one, which a full parse refuses; converting that object then fails
    // the review with a message (webhook::conversion's unit tests).
    let Ok(doc) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let request = &doc["request"];
    let (uid, api_version) = (request["uid"].clone(), doc["apiVersion"].as_str());
    let original = request.get("object");
    let answer = request.get("oldObject").cloned().unwrap_or(Value::Null);
    for kind in [admission::Kind::Validate, admission::Kind::Mutate] {
        let verdict = admission::interpret(kind, original, answer.clone());
        if let admission::Verdict::Allow {
            patch: Some(patch), ..
        } = &verdict
        {
            let mut patched = original.cloned().unwrap_or(Value::Null);
            if let Err(e) = json_patch::patch(&mut patched, patch) {
                panic!("the mutation's patch does not apply to the object: {e}");
            }
            assert_eq!(patched, answer, "the patch does not yield the answer");
        }
        let out = admission::respond(api_version.unwrap_or_default(), uid.clone(), verdict);
        assert_eq!(out["response"]["uid"], uid);
        assert!(serde_json::to_vec(&out).is_ok());
    }
}

/// A ConversionReview body: bad ones are rejected with a message; every object of a good one
/// goes through a script (JSON → Rhai → JSON), as `convert` does, and comes back unchanged.
pub fn conversion(data: &[u8]) {
    if let Err(admission::BadReview(msg)) = conversion::parse(data) {
        assert!(msg.starts_with("malformed ConversionReview"), "{msg}");
        return;
    }
    // Objects stay raw until converted, so `parse` accepts an escape that is no character (a
    // lone surrogate) inside one, which a full parse refuses; converting that object then fails
    // the review with a message (webhook::conversion's unit tests).
    let Ok(doc) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let to_version = doc["request"]["desiredAPIVersion"].clone();
    let objects = doc["request"]["objects"].as_array().cloned();
    for obj in objects.into_iter().flatten() {
        let out = scripts().call("convert", &[obj.clone(), to_version.clone()]);
        assert_round_trip(&obj, out);
    }
}

/// Any JSON value through Rhai and back, the way objects reach scripts and answers leave them:
/// as a plain argument, as `reconcile(obj, ctx)`'s object, and through `ctx.get`/`ctx.list`.
pub fn rhai_json(data: &[u8]) {
    if let Ok(obj) = serde_json::from_slice::<kube::api::DynamicObject>(data) {
        assert!(
            script::object_view(&obj).is_ok(),
            "an object without a view"
        );
        // The object goes into Rhai straight, as its JSON view would.
        let view =
            script::object_view(&obj).map(|v| format!("{:?}", script::convert::to_dynamic(&v)));
        let direct = script::object_dynamic(&obj).map(|d| format!("{d:?}"));
        assert_eq!(
            direct.ok(),
            view.ok(),
            "the object's Rhai value is not its view's"
        );
        // The informers' own decoder reads what serde reads, `managedFields` left out. (It may
        // read more: malformed `managedFields`, which it skips, fail serde's decoding.)
        let mut want = obj;
        want.metadata.managed_fields = None;
        let got = khai::watch::decode_object(data);
        assert_eq!(
            got.ok(),
            Some(want),
            "the informers' decoder reads it differently"
        );
    }
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let depth = nesting(&value);
    assert_within_depth(
        depth,
        scripts().call("echo", std::slice::from_ref(&value)),
        |out| assert_round_trip(&value, out),
    );
    // The same value nested deeper by the script itself, up to far past any JSON reader: the
    // call fails naming the depth, never the process.
    let extra = data.first().map_or(0, |b| usize::from(*b) * 4);
    let nested = scripts().call("nest", &[value.clone(), json!(extra)]);
    assert_within_depth(depth + extra, nested, |out| {
        let mut out = out.expect("a nested value within the limit converts");
        for _ in 0..extra {
            out = out
                .as_array_mut()
                .and_then(Vec::pop)
                .expect("one array a level");
        }
        assert!(same(&value, &out), "nesting changed the value");
    });
    if depth + 2 > khai::nesting::MAX_DEPTH {
        // `reconcile` below answers with the value two levels down (`list[0]`).
        return;
    }
    let ctx = ScriptCtx {
        lookup: Arc::new(Echo(value.clone())),
        ..ScriptCtx::detached("fuzz", "fuzz", Some("ns"))
    };
    match scripts().call_with_ctx("reconcile", &value, ctx) {
        Ok(out) => {
            assert!(
                same(&value, &out["obj"]),
                "reconcile's object changed: {out}"
            );
            assert!(same(&value, &out["got"]), "ctx.get's object changed: {out}");
            assert!(
                same(&json!([value]), &out["list"]),
                "ctx.list's object changed: {out}"
            );
        }
        Err(e) => assert_clean_error(&value, &e),
    }
}

/// A script's answer → plan (judged by [`check_plan`]), and the same answer with a status the
/// script nests deeper.
pub fn plan(data: &[u8]) {
    let Ok(answer) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    check_plan(reconcile::parse_plan(answer.clone()));
    // The same answer with a status field the script nests deeper, up to far past any JSON
    // reader: the call fails naming the depth, never the process; within the limit the answer
    // makes a plan as any other.
    if !answer.is_object() {
        return;
    }
    let extra = data.last().map_or(0, |b| usize::from(*b) * 4);
    let mut shape = answer.clone();
    let mut status = match shape.get("status") {
        Some(Value::Object(fields)) => fields.clone(),
        _ => serde_json::Map::new(),
    };
    status.remove("deep");
    shape["status"] = Value::Object(status);
    // The answer, its status, and `extra + 1` arrays.
    let depth = nesting(&shape).max(extra + 3);
    let out = scripts().call("deepen_status", &[answer.clone(), json!(extra)]);
    assert_within_depth(depth, out, |out| match out {
        Ok(deeper) => check_plan(reconcile::parse_plan(deeper)),
        Err(e) => assert_clean_error(&answer, &e),
    });
}

/// A plan, or an error naming the field; children always carry apiVersion, kind and name; a
/// plan's status takes khai's conditions.
fn check_plan(parsed: Result<reconcile::Plan, reconcile::InvalidAnswer>) {
    match parsed {
        Err(e) => {
            let message = e.problem.to_string();
            assert!(
                !e.field.is_empty() && !message.is_empty(),
                "{}: {message}",
                e.field
            );
        }
        Ok(plan) => {
            for child in &plan.children {
                for key in ["apiVersion", "kind"] {
                    assert!(child[key].as_str().is_some_and(|s| !s.is_empty()));
                }
                assert!(child["metadata"]["name"].as_str().is_some());
            }
            if let Some(mut status) = plan.status {
                let obj: kube::api::DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "x.dev/v1", "kind": "X", "metadata": { "name": "a" },
                    "status": Value::Object(status.clone()),
                }))
                .expect("a valid object");
                let failing = conditions::Health::Failing {
                    reason: "Failed",
                    message: "m",
                };
                for health in [conditions::Health::Ready, failing] {
                    conditions::set(&mut status, &obj, health);
                    assert!(status["conditions"].is_array());
                }
            }
        }
    }
}

/// How many arrays and maps deep `v` nests.
fn nesting(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// A call whose result nests `depth` deep: past the limit it fails saying so; within it,
/// `check` judges the result.
fn assert_within_depth(
    depth: usize,
    out: Result<Value, ScriptError>,
    check: impl FnOnce(Result<Value, ScriptError>),
) {
    if depth <= khai::nesting::MAX_DEPTH {
        return check(out);
    }
    match out {
        Err(ScriptError::Convert { message, .. }) => assert!(
            message.contains(&format!(
                "nests more than {} arrays and maps deep",
                khai::nesting::MAX_DEPTH
            )),
            "{message}"
        ),
        other => panic!("a result {depth} deep: {other:?}"),
    }
}

/// A value that crossed into Rhai and back must be unchanged, or fail with an error that says
/// why (a script limit), never a panic or a silent change.
fn assert_round_trip(input: &Value, out: Result<Value, ScriptError>) {
    match out {
        Ok(out) => assert!(
            same(input, &out),
            "the value changed crossing into Rhai and back:\n  in: {input}\n out: {out}"
        ),
        Err(e) => assert_clean_error(input, &e),
    }
}

/// Equal, except that an integer beyond i64 may come back as the nearest float: Rhai's integers
/// are i64, and the API server itself decodes such a number as a float64.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_u64() && x.as_i64().is_none() => {
            y.as_f64() == x.as_f64()
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn assert_clean_error(input: &Value, e: &ScriptError) {
    match e {
        ScriptError::Convert { message, .. } | ScriptError::Runtime { message, .. } => {
            assert!(!message.is_empty());
            panic!("a JSON value could not cross into Rhai and back: {e}\ninput: {input}");
        }
        other => panic!("unexpected error kind: {other}"),
    }
}

/// `ctx.get` and `ctx.list` answer with the input value.
struct Echo(Value);

impl Lookup for Echo {
    fn get(&self, _: &str, _: &str, _: Option<&str>) -> Result<Option<Value>, LookupError> {
        Ok(Some(self.0.clone()))
    }
    fn list(&self, _: &str, _: Option<&str>, _: Option<&str>) -> Result<Vec<Value>, LookupError> {
        Ok(vec![self.0.clone()])
    }
    fn owned(&self, _: &str) -> Result<Vec<Value>, LookupError> {
        Ok(vec![self.0.clone()])
    }
}

/// The scripts the targets call, compiled once with khai's default limits.
fn scripts() -> &'static Script {
    static SCRIPTS: OnceLock<Script> = OnceLock::new();
    SCRIPTS.get_or_init(|| {
        let limits = Limits::default();
        let src = r#"
            fn echo(x) { x }
            fn nest(x, n) { for i in 0..n { x = [x]; } x }
            fn deepen_status(answer, n) {
                let status = answer.status;
                if type_of(status) != "map" { status = #{}; }
                status.deep = nest([], n);
                answer.status = status;
                answer
            }
            fn convert(obj, to_version) { obj }
            fn reconcile(obj, ctx) {
                #{ obj: obj, got: ctx.get("Thing", "a"), list: ctx.list("Thing") }
            }
        "#;
        Script::compile(
            Arc::new(script::engine(&limits)),
            &limits,
            Path::new("fuzz.rhai"),
            src,
        )
        .expect("the fuzz scripts compile")
    })
}
