//! Rhai scripts: one hardened engine, compiled scripts, and bounded calls into them.
//!
//! Every engine khai runs comes from [`engine`], which sets every limit explicitly (Rhai leaves
//! most of them off, and its depth defaults differ between debug and release builds). A call gets
//! a wall-clock deadline on top of the operation budget, checked from Rhai's progress hook.
//! Values cross the boundary as JSON through Rhai's serde support, so scripts see Kubernetes
//! objects as plain maps.

pub mod ctx;
mod inline;
pub mod memo;
mod memory;

pub use ctx::{Attempt, Indexes, Lookup, ScriptCtx};

use rhai::{AST, Dynamic, Engine, EvalAltResult, OptimizationLevel, Position};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bounds on one script call. The defaults fit a reconcile that builds a handful of objects.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub max_operations: u64,
    pub max_call_levels: usize,
    pub max_expr_depth: usize,
    pub max_function_expr_depth: usize,
    /// Rhai's size limits, which count a value with everything nested in it: a script's input
    /// is such a value, so they must fit any object the API server accepts (see
    /// [`LARGEST_OBJECT`]), or an object could never be read, only ever fail.
    pub max_string_size: usize,
    pub max_array_size: usize,
    pub max_map_size: usize,
    /// Bytes a call may allocate beyond what it was given, whatever it builds (see [`memory`]).
    pub max_memory: usize,
    pub timeout: Duration,
}

/// The largest request body the API server accepts (3 MiB), so the largest object a script can
/// be given. Its JSON holds at most that many bytes of strings, half as many array elements
/// (`0,`) and a fifth as many map entries (`"":0,`).
pub const LARGEST_OBJECT: usize = 3 << 20;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_operations: 1_000_000,
            max_call_levels: 48,
            max_expr_depth: 64,
            max_function_expr_depth: 48,
            max_string_size: LARGEST_OBJECT,
            max_array_size: LARGEST_OBJECT / 2,
            max_map_size: LARGEST_OBJECT / 5,
            max_memory: 64 << 20,
            timeout: Duration::from_secs(5),
        }
    }
}

/// Errors from compiling or running a script; each names the file and, when known, line:col.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ScriptError {
    /// The script does not parse.
    #[error("{}: syntax error: {message}", at(file, *pos))]
    Syntax {
        file: PathBuf,
        pos: Option<(usize, usize)>,
        message: String,
    },
    /// The script file cannot be read.
    #[error("{}: cannot read script: {message}", file.display())]
    Read { file: PathBuf, message: String },
    /// A function the config names is not defined with the expected number of parameters.
    #[error("{}: function {name}({}) is not defined", file.display(), param_list(*arity))]
    MissingFunction {
        file: PathBuf,
        name: String,
        arity: usize,
    },
    /// The script raised an error or hit a limit while running.
    #[error("{}: in {function}: {message}", at(file, *pos))]
    Runtime {
        file: PathBuf,
        pos: Option<(usize, usize)>,
        function: String,
        message: String,
    },
    /// The script asked, with `retry(message, delay)`, to be run again after `delay`.
    #[error("{}: in {function}: {message} (retry in {delay})", file.display())]
    Retry {
        file: PathBuf,
        function: String,
        message: String,
        delay: crate::config::duration::Duration,
    },
    /// The script declared, with `fail(message)`, that retrying cannot help until the object
    /// changes.
    #[error("{}: in {function}: {message}", file.display())]
    Fail {
        file: PathBuf,
        function: String,
        message: String,
    },
    /// A value could not be converted between JSON and Rhai.
    #[error("{}: in {function}: {message}", file.display())]
    Convert {
        file: PathBuf,
        function: String,
        message: String,
    },
}

fn at(file: &Path, pos: Option<(usize, usize)>) -> String {
    match pos {
        Some((l, c)) => format!("{}:{l}:{c}", file.display()),
        None => file.display().to_string(),
    }
}

/// `obj, ctx` for arity 2: how khai names the parameters it passes.
pub fn param_list(arity: usize) -> String {
    ["obj", "ctx", "arg3", "arg4"]
        .iter()
        .take(arity)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

fn position(pos: Position) -> Option<(usize, usize)> {
    Some((pos.line()?, pos.position().unwrap_or(1)))
}

/// A Kubernetes object as scripts see it: the whole object minus `metadata.managedFields`,
/// which is bookkeeping no script needs and the bulk of many objects.
pub fn object_view(obj: &kube::api::DynamicObject) -> Result<serde_json::Value, serde_json::Error> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(meta) = v
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
    Ok(v)
}

/// How a script's value is named in messages to its author: "a map", "an array", "nothing".
pub fn type_name(v: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a map",
    }
}

thread_local! {
    /// Deadline of the call running on this thread; read by the engine's progress hook.
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// How the progress hook says it stopped a call for its memory budget.
const OVER_MEMORY: &str = "memory budget used up";

/// Builds the one kind of engine khai runs scripts in, with every limit set.
pub fn engine(limits: &Limits) -> Engine {
    let mut e = Engine::new();
    e.set_max_operations(limits.max_operations)
        .set_max_call_levels(limits.max_call_levels)
        .set_max_expr_depths(limits.max_expr_depth, limits.max_function_expr_depth)
        .set_max_string_size(limits.max_string_size)
        .set_max_array_size(limits.max_array_size)
        .set_max_map_size(limits.max_map_size)
        .set_max_variables(10_000)
        .set_max_functions(1_000)
        // No `import`: scripts get no file access, not even to other scripts.
        .set_max_modules(0)
        .set_strict_variables(true)
        // Simple folds only built-in operators on constants, never registered functions, so
        // functions that read the clock or the cache are always called at run time.
        .set_optimization_level(OptimizationLevel::Simple);
    // `new` is reserved in Rhai, but a change record's `change.new` (Kopf's name, next to
    // `change.old`) must read naturally: khai lets it be an ordinary name.
    #[allow(deprecated)]
    e.on_parse_token(|token, _, _| match token {
        rhai::Token::Reserved(s) if s.as_str() == "new" => rhai::Token::Identifier(s),
        t => t,
    });
    ctx::register(&mut e);
    memo::register(&mut e);
    nothing_indexes_to_nothing(&mut e);
    e.on_progress(|ops| {
        if inline::over_budget(ops) {
            return Some(Dynamic::from("inline budget used up"));
        }
        if memory::over_budget() {
            return Some(Dynamic::from(OVER_MEMORY));
        }
        // Reading the clock on every operation would cost more than most operations; every
        // 64th keeps the deadline within microseconds.
        let expired =
            ops % 64 == 0 && DEADLINE.with(|d| d.get().is_some_and(|t| Instant::now() >= t));
        expired.then(|| Dynamic::from("deadline exceeded"))
    });
    e.on_print(inline::print);
    e.on_debug(|s, src, pos| inline::debug(s, src, pos.line()));
    e
}

/// Lets `?[` chains through a missing field: `x?.items?[0]?.name` is `()` when `items` is.
///
/// Rhai 1.27's parser drops the "stop at `()`" mark of `?[` when a property follows the index
/// (`x?.items?[0]?.name` runs as `x?.items[0]?.name`), so a missing `items` threw "Indexer
/// unavailable: () [i64]". Authors porting from CEL and KRO write exactly this, so indexing
/// nothing, with a number or a name, gives nothing, as reading a missing field of a map does.
fn nothing_indexes_to_nothing(e: &mut Engine) {
    e.register_indexer_get(|_: &mut (), _: rhai::INT| ());
    e.register_indexer_get(|_: &mut (), _: rhai::ImmutableString| ());
}

/// An argument of a script call: a JSON value (an object, a change record, a state) or `ctx`.
#[derive(Clone)]
pub enum CallArg {
    Json(serde_json::Value),
    Ctx(ScriptCtx),
}

/// A compiled script together with the engine that runs it.
#[derive(Clone)]
pub struct Script {
    file: PathBuf,
    /// Hash of the text this script was compiled from (not of the file now, which may have
    /// changed since): what says whether two versions of a config run the same script.
    source_hash: u64,
    ast: Arc<AST>,
    engine: Arc<Engine>,
    timeout: Duration,
    max_memory: usize,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Script")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl Script {
    /// Reads and compiles `file`. `display` is how the file is named in errors.
    pub fn compile_file(
        engine: Arc<Engine>,
        limits: &Limits,
        file: &Path,
    ) -> Result<Self, ScriptError> {
        let src = std::fs::read_to_string(file).map_err(|e| ScriptError::Read {
            file: file.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::compile(engine, limits, file, &src)
    }

    /// Compiles script text; `file` is used in error messages.
    pub fn compile(
        engine: Arc<Engine>,
        limits: &Limits,
        file: &Path,
        src: &str,
    ) -> Result<Self, ScriptError> {
        let mut ast = engine.compile(src).map_err(|e| ScriptError::Syntax {
            file: file.to_path_buf(),
            pos: position(e.1),
            message: e.0.to_string(),
        })?;
        ast.set_source(file.display().to_string());
        Ok(Self {
            file: file.to_path_buf(),
            source_hash: xxhash_rust::xxh3::xxh3_64(src.as_bytes()),
            ast: Arc::new(ast),
            engine,
            timeout: limits.timeout,
            max_memory: limits.max_memory,
        })
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// A hash of the text the script was compiled from.
    pub fn source_hash(&self) -> u64 {
        self.source_hash
    }

    /// Whether the script defines `name` with exactly `arity` parameters.
    pub fn has_function(&self, name: &str, arity: usize) -> bool {
        self.ast
            .iter_functions()
            .any(|f| f.name == name && f.params.len() == arity)
    }

    /// Names of the functions the script defines.
    pub fn function_names(&self) -> Vec<String> {
        self.ast
            .iter_functions()
            .map(|f| f.name.to_string())
            .collect()
    }

    /// Fails unless the script defines `name` with exactly `arity` parameters.
    pub fn require_function(&self, name: &str, arity: usize) -> Result<(), ScriptError> {
        if self.has_function(name, arity) {
            Ok(())
        } else {
            Err(ScriptError::MissingFunction {
                file: self.file.clone(),
                name: name.into(),
                arity,
            })
        }
    }

    /// Calls `function` with JSON arguments and returns its result as JSON (`null` for `()`).
    ///
    /// This blocks the thread for up to the script timeout; async callers use [`Self::call_async`].
    pub fn call(
        &self,
        function: &str,
        args: &[serde_json::Value],
    ) -> Result<serde_json::Value, ScriptError> {
        let args = args
            .iter()
            .map(|a| self.to_dynamic(function, a))
            .collect::<Result<Vec<_>, _>>()?;
        self.call_dynamic(function, args)
    }

    /// Calls `function(obj, ctx)`, the shape of `reconcile` and `finalize`.
    pub fn call_with_ctx(
        &self,
        function: &str,
        obj: &serde_json::Value,
        ctx: ScriptCtx,
    ) -> Result<serde_json::Value, ScriptError> {
        let obj = self.to_dynamic(function, obj)?;
        self.call_dynamic(function, vec![obj, Dynamic::from(ctx)])
    }

    fn to_dynamic(&self, function: &str, v: &serde_json::Value) -> Result<Dynamic, ScriptError> {
        rhai::serde::to_dynamic(v).map_err(|e| ScriptError::Convert {
            file: self.file.clone(),
            function: function.into(),
            message: e.to_string(),
        })
    }

    fn call_dynamic(
        &self,
        function: &str,
        args: Vec<Dynamic>,
    ) -> Result<serde_json::Value, ScriptError> {
        DEADLINE.with(|d| d.set(Some(Instant::now() + self.timeout)));
        memory::begin(self.max_memory);
        let mut scope = rhai::Scope::new();
        let result = self
            .engine
            .call_fn::<Dynamic>(&mut scope, &self.ast, function, args);
        memory::end();
        DEADLINE.with(|d| d.set(None));
        if inline::stopped() {
            // Not the script's error: the call moves to the blocking pool (see `inline`).
            return Ok(serde_json::Value::Null);
        }
        let value = result.map_err(|e| self.runtime_error(function, *e))?;
        rhai::serde::from_dynamic(&value).map_err(|e| ScriptError::Convert {
            file: self.file.clone(),
            function: function.into(),
            message: format!("cannot convert result to JSON: {e}"),
        })
    }

    /// [`Self::call_with_ctx`] without blocking the runtime: inline when the call is short,
    /// else on tokio's blocking pool (see [`inline`]). The caller's tracing span follows the
    /// call, so script logs carry the object.
    pub async fn call_async(
        &self,
        function: &str,
        obj: serde_json::Value,
        ctx: ScriptCtx,
    ) -> Result<serde_json::Value, ScriptError> {
        self.off_runtime(function, move |s, name| {
            s.call_with_ctx(name, &obj, ctx.clone())
        })
        .await
    }

    /// Calls `function` with `args` (JSON values and `ctx`) and returns its result as JSON.
    pub fn call_args(
        &self,
        function: &str,
        args: &[CallArg],
    ) -> Result<serde_json::Value, ScriptError> {
        let args = args
            .iter()
            .map(|a| match a {
                CallArg::Json(v) => self.to_dynamic(function, v),
                CallArg::Ctx(c) => Ok(Dynamic::from(c.clone())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.call_dynamic(function, args)
    }

    /// [`Self::call_args`] without blocking the runtime.
    pub async fn call_args_async(
        &self,
        function: &str,
        args: Vec<CallArg>,
    ) -> Result<serde_json::Value, ScriptError> {
        self.off_runtime(function, move |s, name| s.call_args(name, &args))
            .await
    }

    /// [`Self::call`] without blocking the runtime, for one-argument helpers such as
    /// `when(obj)` and webhook functions.
    pub async fn call_one_async(
        &self,
        function: &str,
        arg: serde_json::Value,
    ) -> Result<serde_json::Value, ScriptError> {
        self.off_runtime(function, move |s, name| {
            s.call(name, std::slice::from_ref(&arg))
        })
        .await
    }

    async fn off_runtime<F>(&self, function: &str, f: F) -> Result<serde_json::Value, ScriptError>
    where
        F: Fn(&Script, &str) -> Result<serde_json::Value, ScriptError> + Send + 'static,
    {
        let started = Instant::now();
        let result = match inline::attempt(|| f(self, function)) {
            Some(done) => done,
            None => self.on_blocking_pool(function, f).await,
        };
        let error = result.as_ref().err().map(ScriptError::kind);
        crate::metrics::script_call(&self.label(), function, started.elapsed(), error);
        result
    }

    async fn on_blocking_pool<F>(
        &self,
        function: &str,
        f: F,
    ) -> Result<serde_json::Value, ScriptError>
    where
        F: Fn(&Script, &str) -> Result<serde_json::Value, ScriptError> + Send + 'static,
    {
        let script = self.clone();
        let name = function.to_string();
        let span = tracing::Span::current();
        // The caller's subscriber too, should it not be the global one (a test's).
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        tokio::task::spawn_blocking(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                let _entered = span.enter();
                f(&script, &name)
            })
        })
        .await
        .unwrap_or_else(|e| {
            Err(ScriptError::Runtime {
                file: self.file.clone(),
                pos: None,
                function: function.into(),
                message: format!("script task failed: {e}"),
            })
        })
    }

    /// How metrics name this script: its file name.
    fn label(&self) -> String {
        self.file.file_name().map_or_else(
            || self.file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    }

    /// Flattens Rhai's chain of "in function call" wrappers to the innermost position and cause.
    fn runtime_error(&self, function: &str, err: EvalAltResult) -> ScriptError {
        let mut err = err;
        let mut pos = err.position();
        while let EvalAltResult::ErrorInFunctionCall(_, _, inner, p) = err {
            if !inner.position().is_none() {
                pos = inner.position();
            } else if !p.is_none() {
                pos = p;
            }
            err = *inner;
        }
        if let Some(control) = self.control_flow(function, &err) {
            return control;
        }
        if let Some(limit) = limit_hit(&err) {
            crate::metrics::script_limit_abort(&self.label(), function, limit);
        }
        let message = match &err {
            EvalAltResult::ErrorTerminated(token, _) if is_over_memory(token) => format!(
                "script exceeded its memory limit ({} per call)",
                memory::describe(self.max_memory)
            ),
            EvalAltResult::ErrorTerminated(..) => "script exceeded its time limit".to_string(),
            EvalAltResult::ErrorTooManyOperations(..) => {
                "script exceeded its operation limit".to_string()
            }
            EvalAltResult::ErrorRuntime(v, _) => v.to_string(),
            other => strip_position(&other.to_string()),
        };
        ScriptError::Runtime {
            file: self.file.clone(),
            pos: position(pos),
            function: function.into(),
            message,
        }
    }
}

impl Script {
    /// Recognises the maps thrown by `retry()` and `fail()`.
    fn control_flow(&self, function: &str, err: &EvalAltResult) -> Option<ScriptError> {
        let EvalAltResult::ErrorRuntime(v, _) = err else {
            return None;
        };
        let map = v.read_lock::<rhai::Map>()?;
        let kind = map.get(ctx::CONTROL_KEY)?.to_string();
        let field = |k: &str| map.get(k).map(ToString::to_string).unwrap_or_default();
        let (file, function, message) = (self.file.clone(), function.to_string(), field("message"));
        match kind.as_str() {
            "retry" => Some(ScriptError::Retry {
                file,
                function,
                message,
                // `retry()` read the delay before it threw (see `ctx::retry`).
                delay: map.get("delay")?.clone().try_cast()?,
            }),
            "fail" => Some(ScriptError::Fail {
                file,
                function,
                message,
            }),
            _ => None,
        }
    }
}

/// The limit that stopped a script, if one did: the `limit` label of
/// `khai_script_limit_aborts_total`.
fn limit_hit(err: &EvalAltResult) -> Option<&'static str> {
    Some(match err {
        EvalAltResult::ErrorTerminated(token, _) if is_over_memory(token) => "memory",
        EvalAltResult::ErrorTerminated(..) => "time",
        EvalAltResult::ErrorTooManyOperations(..) => "operations",
        EvalAltResult::ErrorStackOverflow(..) => "call_depth",
        EvalAltResult::ErrorDataTooLarge(..) => "data_size",
        EvalAltResult::ErrorTooManyVariables(..) => "variables",
        EvalAltResult::ErrorTooManyModules(..) => "modules",
        _ => return None,
    })
}

fn is_over_memory(token: &Dynamic) -> bool {
    token.to_string() == OVER_MEMORY
}

impl ScriptError {
    /// The `kind` label of `khai_script_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            ScriptError::Syntax { .. } | ScriptError::Read { .. } => "load",
            ScriptError::MissingFunction { .. } => "missing_function",
            ScriptError::Runtime { .. } => "runtime",
            ScriptError::Retry { .. } => "retry",
            ScriptError::Fail { .. } => "fail",
            ScriptError::Convert { .. } => "convert",
        }
    }
}

/// Rhai appends " (line N, position M)" to messages; the position is reported separately.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" (line ") {
        Some(i) if msg.ends_with(')') => msg[..i].to_string(),
        _ => msg.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A script with the default limits, for calls that must not depend on how busy the machine
    /// is (the 200 ms of [`compile`] is short for a long call in a debug build under load).
    fn compile_default(src: &str) -> Script {
        let limits = Limits::default();
        Script::compile(Arc::new(engine(&limits)), &limits, Path::new("t.rhai"), src).unwrap()
    }

    fn compile(src: &str) -> Result<Script, ScriptError> {
        let limits = Limits {
            timeout: Duration::from_millis(200),
            ..Limits::default()
        };
        Script::compile(
            Arc::new(engine(&limits)),
            &limits,
            Path::new("scripts/t.rhai"),
            src,
        )
    }

    #[tokio::test]
    async fn short_calls_finish_inline_and_long_ones_start_over_on_the_pool_with_one_answer() {
        let s = compile_default("fn count(n) { let c = 0; for i in 0..n { c += 1; } c }");
        assert_eq!(
            s.call_one_async("count", json!(10)).await.unwrap(),
            json!(10)
        );
        // Far beyond the inline budget: abandoned inline, run again from the start.
        let n = inline::INLINE_OPS * 3;
        assert_eq!(s.call_one_async("count", json!(n)).await.unwrap(), json!(n));
        // Errors of a long call are the script's own, reported once from the pool.
        let err = s.call_one_async("count", json!("x")).await.unwrap_err();
        assert!(err.to_string().contains("count"), "{err}");
    }

    /// An object as large as the API server stores: a map of 12,000 entries and 1.1 MB of text.
    pub(crate) fn large_object() -> serde_json::Value {
        let entries: serde_json::Map<String, serde_json::Value> = (0..12_000)
            .map(|i| (format!("key-{i}"), json!(i)))
            .collect();
        json!({ "apiVersion": "g/v1", "kind": "Big", "metadata": { "name": "big" },
            "spec": { "entries": entries, "text": "x".repeat(1_100_000) } })
    }

    #[tokio::test]
    async fn an_input_as_large_as_the_api_server_stores_is_read_iterated_changed_and_returned() {
        let src = r#"fn reconcile(obj, ctx) {
            let sum = 0;
            for k in obj.spec.entries.keys() { sum += obj.spec.entries[k]; }
            obj.status = #{ sum: sum, length: obj.spec.text.len() };
            #{ status: obj.status, children: [#{ metadata: #{ name: "copy" },
                data: #{ text: obj.spec.text }, entries: obj.spec.entries }] }
        }"#;
        let s = compile_default(src);
        let obj = large_object();
        let ctx = ScriptCtx::detached("op", "c", None);
        let out = s.call_async("reconcile", obj.clone(), ctx).await.unwrap();
        let sum: i64 = (0..12_000).sum();
        assert_eq!(out["status"], json!({ "sum": sum, "length": 1_100_000 }));
        assert_eq!(out["children"][0]["data"]["text"], obj["spec"]["text"]);
        assert_eq!(out["children"][0]["entries"], obj["spec"]["entries"]);
    }

    #[test]
    fn a_map_of_huge_keys_stops_at_the_memory_limit() {
        let limits = Limits {
            max_memory: 16 << 20,
            ..Limits::default()
        };
        // 600 keys of 1 MiB: each within the string limit, and Rhai's map limit counts entries,
        // not the size of their keys.
        let src = r#"fn build() {
            let key = "k"; for i in 0..20 { key += key; }
            let m = #{}; for i in 0..600 { m[key + i] = i; } m.len()
        }"#;
        let s =
            Script::compile(Arc::new(engine(&limits)), &limits, Path::new("t.rhai"), src).unwrap();
        let (result, peak) = memory::peak_during(|| s.call("build", &[]));
        let err = result.unwrap_err().to_string();
        assert!(
            err.ends_with("in build: script exceeded its memory limit (16 MiB per call)"),
            "{err}"
        );
        assert!(peak < limits.max_memory + (4 << 20), "peak {peak}");
    }

    #[tokio::test]
    async fn a_call_of_few_but_slow_operations_leaves_the_worker_thread_within_its_time_budget() {
        // A few hundred operations, far under the inline operation budget, each upper-casing
        // 1 MiB: together far more than the inline time budget.
        let s = compile_default(
            "fn shout(s) { let n = 0; for i in 0..200 { n += s.to_upper().len(); } n }",
        );
        let text = json!("x".repeat(1 << 20));
        let inline = inline::attempt(|| s.call("shout", std::slice::from_ref(&text)));
        assert_eq!(inline, None, "given up inline, to run on the blocking pool");
        assert_eq!(
            s.call_one_async("shout", text).await.unwrap(),
            json!(200 << 20)
        );
    }

    /// Log lines written while `f` runs on this thread or, called from it, on the blocking pool.
    async fn logs<F: std::future::Future>(f: F) -> (F::Output, String) {
        #[derive(Clone, Default)]
        struct Sink(Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                crate::sync::lock(&self.0).extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let out = f.await;
        let text = String::from_utf8_lossy(&crate::sync::lock(&sink.0)).into_owned();
        (out, text)
    }

    /// Issue 11: `log_*` calls were logged twice by a call that ran out of its inline budget
    /// (once inline, once again on the blocking pool); `print` and `debug` were held back.
    #[tokio::test]
    async fn a_call_moved_to_the_pool_logs_each_line_once() {
        // The default time limit: the test is about logs, not a slow machine.
        let limits = Limits::default();
        let s = Script::compile(
            Arc::new(engine(&limits)),
            &limits,
            Path::new("scripts/t.rhai"),
            "fn count(n) {\n\
               log_debug(\"d-line\"); log_info(\"i-line\"); log_warn(\"w-line\");\n\
               log_error(\"e-line\"); print(\"p-line\"); debug(\"g-line\");\n\
               let c = 0; for i in 0..n { c += 1; } c\n\
             }",
        )
        .unwrap();
        let n = inline::INLINE_OPS * 3;
        let (out, log) = logs(s.call_one_async("count", json!(n))).await;
        assert_eq!(out.unwrap(), json!(n));
        for line in ["d-line", "i-line", "w-line", "e-line", "p-line", "g-line"] {
            assert_eq!(log.matches(line).count(), 1, "{line} in:\n{log}");
        }
        // A call that finishes inline logs its lines too, once.
        let (_, log) = logs(s.call_one_async("count", json!(1))).await;
        assert_eq!(log.matches("i-line").count(), 1, "{log}");
    }

    #[test]
    fn values_round_trip_through_json() {
        let s = compile("fn echo(x) { x }").unwrap();
        let v = json!({"a": [1, 2.5, "s", true, null], "b": {"c": {}}});
        assert_eq!(s.call("echo", std::slice::from_ref(&v)).unwrap(), v);
    }

    #[test]
    fn syntax_error_names_file_line_and_column() {
        let err = compile("fn reconcile(obj, ctx) {\n  let x = ;\n}").unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("scripts/t.rhai:2:11: syntax error:"),
            "{text}"
        );
    }

    #[test]
    fn runtime_error_names_function_and_line() {
        let s = compile("fn reconcile(obj, ctx) {\n  throw \"boom\";\n}").unwrap();
        let err = s.call("reconcile", &[json!({}), json!({})]).unwrap_err();
        assert_eq!(err.to_string(), "scripts/t.rhai:2:3: in reconcile: boom");
    }

    #[test]
    fn endless_loop_stops_at_a_limit() {
        let s = compile("fn spin() { loop { } }").unwrap();
        let err = s.call("spin", &[]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("exceeded its"), "{text}");
    }

    #[test]
    fn deadline_stops_a_slow_script_that_stays_under_the_operation_budget() {
        let limits = Limits {
            timeout: Duration::from_millis(50),
            max_operations: 0,
            ..Limits::default()
        };
        let s = Script::compile(
            Arc::new(engine(&limits)),
            &limits,
            Path::new("t.rhai"),
            "fn spin() { loop {} }",
        )
        .unwrap();
        let err = s.call("spin", &[]).unwrap_err();
        assert!(err.to_string().contains("exceeded its time limit"), "{err}");
    }

    #[test]
    fn deep_recursion_fails_cleanly() {
        let s = compile("fn r(n) { r(n + 1) }").unwrap();
        assert!(matches!(
            s.call("r", &[json!(0)]),
            Err(ScriptError::Runtime { .. })
        ));
    }

    #[test]
    fn huge_string_fails_cleanly() {
        let s = compile("fn big() { let s = \"x\"; loop { s += s; } }").unwrap();
        assert!(matches!(
            s.call("big", &[]),
            Err(ScriptError::Runtime { .. })
        ));
    }

    #[test]
    fn ctx_exposes_run_facts_and_lookups() {
        let s = compile("fn reconcile(obj, ctx) { #{ op: ctx.operator, ns: ctx.namespace, none: ctx.get(\"ConfigMap\", \"x\"), n: ctx.list(\"ConfigMap\").len() } }").unwrap();
        let out = s
            .call_with_ctx(
                "reconcile",
                &json!({}),
                ScriptCtx::detached("op", "c", Some("ns1")),
            )
            .unwrap();
        assert_eq!(
            out,
            json!({ "op": "op", "ns": "ns1", "none": null, "n": 0 })
        );
    }

    /// Issue 11, defect 5: `?[` followed by `?.` threw "Indexer unavailable: () [i64]" when
    /// the list was missing.
    #[test]
    fn optional_index_chains_give_nothing_for_a_missing_list_or_map() {
        let s = compile(
            "fn first(x) { x?.items?[0]?.field }\n\
             fn port(x) { x?.spec?.ports?[\"http\"]?.port }\n\
             fn short(x) { x?.items?[0] }",
        )
        .unwrap();
        for f in ["first", "port", "short"] {
            for x in [json!({}), json!(null), json!({ "items": null, "spec": {} })] {
                assert_eq!(
                    s.call(f, std::slice::from_ref(&x)).unwrap(),
                    json!(null),
                    "{f}({x})"
                );
            }
        }
        let x =
            json!({ "items": [{ "field": "a" }], "spec": { "ports": { "http": { "port": 80 } } } });
        assert_eq!(
            s.call("first", std::slice::from_ref(&x)).unwrap(),
            json!("a")
        );
        assert_eq!(s.call("port", std::slice::from_ref(&x)).unwrap(), json!(80));
        // An index past the end of a list that is there is still an error.
        let err = s.call("first", &[json!({ "items": [] })]).unwrap_err();
        assert!(err.to_string().contains("out of bounds"), "{err}");
    }

    #[test]
    fn retry_and_fail_become_their_own_errors() {
        let s = compile(
            "fn a(obj, ctx) { retry(\"not yet\", \"10s\") }\nfn b(obj, ctx) { fail(\"bad spec\") }",
        )
        .unwrap();
        let ctx = || ScriptCtx::detached("op", "c", None);
        assert_eq!(
            s.call_with_ctx("a", &json!({}), ctx()).unwrap_err(),
            ScriptError::Retry {
                file: "scripts/t.rhai".into(),
                function: "a".into(),
                message: "not yet".into(),
                delay: crate::config::duration::Duration::from_secs(10)
            }
        );
        assert_eq!(
            s.call_with_ctx("a", &json!({}), ctx())
                .unwrap_err()
                .to_string(),
            "scripts/t.rhai: in a: not yet (retry in 10s)"
        );
        assert!(
            matches!(s.call_with_ctx("b", &json!({}), ctx()), Err(ScriptError::Fail { message, .. }) if message == "bad spec")
        );
    }

    /// Issue 11: a delay `retry()` could not read silently became backoff.
    #[test]
    fn a_bad_retry_delay_is_an_error_at_its_line_naming_it() {
        let s = compile("fn a(obj, ctx) {\n  retry(\"not yet\", \"5 parsecs\")\n}").unwrap();
        let err = s
            .call_with_ctx("a", &json!({}), ScriptCtx::detached("op", "c", None))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "scripts/t.rhai:2:3: in a: retry: cannot read '5 parsecs' as a duration: \
             unknown unit \" parsecs\" in \"5 parsecs\"; use ms, s, m or h"
        );
        assert_eq!(err.kind(), "runtime");
    }

    #[test]
    fn missing_function_is_reported_with_arity() {
        let s = compile("fn reconcile(obj) { }").unwrap();
        let err = s.require_function("reconcile", 2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "scripts/t.rhai: function reconcile(obj, ctx) is not defined"
        );
        assert!(s.require_function("reconcile", 1).is_ok());
    }
}

/// One problem found while compiling and checking scripts.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The script does not read or compile.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// The config names something the script does not define; located in the config.
    #[error("{0}")]
    Config(crate::config::Diagnostic),
}

/// The path (as shown in messages) and text of a script the config names; a file that cannot
/// be read is a [`ScriptError::Read`].
pub fn read_script(
    config: &crate::config::Config,
    rel: &Path,
) -> Result<(std::path::PathBuf, String), ScriptError> {
    let file = config.resolve(rel);
    match config.read(rel) {
        Ok(src) => Ok((file, src)),
        Err(e) => Err(ScriptError::Read {
            file,
            message: e.to_string(),
        }),
    }
}
