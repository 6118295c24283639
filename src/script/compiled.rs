//! A compiled script together with the engine that runs it, and bounded calls into it: JSON in
//! and out, a wall-clock deadline and a memory budget per call, inline on the worker thread when
//! short, else on tokio's blocking pool.

use super::ctx::{self, ScriptCtx};
use super::engine::{Limits, limit_hit};
use super::error::{ScriptError, position, strip_position};
use super::stop::{DEADLINE, is_over_memory, is_over_shared_memory};
use super::{convert, inline, memory};
use rhai::{AST, Dynamic, Engine, EvalAltResult};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An argument of a script call: a JSON value (an object, a change record, a state) or `ctx`.
#[derive(Clone)]
pub(crate) enum CallArg {
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

    /// `src` compiled in this script's place: the same engine, limits and file name (for the
    /// console's playground, which runs an edited script as the running one would run).
    pub(crate) fn recompile(&self, src: &str) -> Result<Self, ScriptError> {
        let limits = Limits {
            timeout: self.timeout,
            max_memory: self.max_memory,
            ..Limits::default()
        };
        Self::compile(self.engine.clone(), &limits, &self.file, src)
    }

    /// The compiled script, for checks that read it (`khai check`).
    pub(crate) fn ast(&self) -> &AST {
        &self.ast
    }

    /// A hash of the text the script was compiled from.
    pub(crate) fn source_hash(&self) -> u64 {
        self.source_hash
    }

    /// Whether the script defines `name` with exactly `arity` parameters.
    pub(crate) fn has_function(&self, name: &str, arity: usize) -> bool {
        self.ast
            .iter_functions()
            .any(|f| f.name == name && f.params.len() == arity)
    }

    /// Names of the functions the script defines.
    pub(crate) fn function_names(&self) -> Vec<String> {
        self.ast
            .iter_functions()
            .map(|f| f.name.to_string())
            .collect()
    }

    /// Calls `function` with JSON arguments and returns its result as JSON (`null` for `()`).
    ///
    /// This blocks the thread for up to the script timeout; async callers use [`Self::call_async`].
    pub fn call(
        &self,
        function: &str,
        args: &[serde_json::Value],
    ) -> Result<serde_json::Value, ScriptError> {
        let args = args.iter().map(convert::to_dynamic).collect();
        self.call_dynamic(function, args, None)
    }

    /// Calls `function(obj, ctx)`, the shape of `reconcile` and `finalize`.
    pub fn call_with_ctx(
        &self,
        function: &str,
        obj: &serde_json::Value,
        ctx: ScriptCtx,
    ) -> Result<serde_json::Value, ScriptError> {
        self.call_on(function, convert::to_dynamic(obj), ctx)
    }

    /// [`Self::call_with_ctx`] with the object already a Rhai value.
    fn call_on(
        &self,
        function: &str,
        obj: Dynamic,
        ctx: ScriptCtx,
    ) -> Result<serde_json::Value, ScriptError> {
        let effects = ctx.effects.clone();
        self.call_dynamic(function, vec![obj, Dynamic::from(ctx)], effects.as_ref())
    }

    /// Calls `function`; with `effects`, the call may make side effects (and its deadline is
    /// their time budget, which covers I/O, instead of the script timeout). The call, and the
    /// dropping of whatever it built, run on a stack deep enough for Rhai's recursive walks of
    /// any value it can build (see [`super::stack`]).
    fn call_dynamic(
        &self,
        function: &str,
        args: Vec<Dynamic>,
        effects: Option<&Arc<crate::effects::Effects>>,
    ) -> Result<serde_json::Value, ScriptError> {
        super::stack::with_script_stack(|| self.call_on_this_stack(function, args, effects))
    }

    fn call_on_this_stack(
        &self,
        function: &str,
        args: Vec<Dynamic>,
        effects: Option<&Arc<crate::effects::Effects>>,
    ) -> Result<serde_json::Value, ScriptError> {
        let timeout = effects.map_or(self.timeout, |e| e.budget.time.into());
        let deadline = Instant::now() + timeout;
        DEADLINE.with(|d| d.set(Some(deadline)));
        let call = effects.map(|e| crate::effects::Call::enter(e, deadline, inline::active()));
        memory::begin(self.max_memory);
        let mut scope = rhai::Scope::new();
        let result = self
            .engine
            .call_fn::<Dynamic>(&mut scope, &self.ast, function, args);
        memory::end();
        DEADLINE.with(|d| d.set(None));
        if call.as_ref().is_some_and(|c| c.left_inline()) {
            inline::leave();
        }
        drop(call);
        if inline::stopped() {
            // Not the script's error: the call moves to the blocking pool (see `inline`).
            return Ok(serde_json::Value::Null);
        }
        let value = result.map_err(|e| match (self.runtime_error(function, *e), effects) {
            // With side effects the deadline is the call's time budget: say which.
            (
                ScriptError::Runtime {
                    file,
                    pos,
                    function,
                    message,
                },
                Some(fx),
            ) if message == TIME_LIMIT => ScriptError::Runtime {
                file,
                pos,
                function,
                message: format!(
                    "script exceeded its time budget of {} (budget.time)",
                    fx.budget.time
                ),
            },
            (e, _) => e,
        })?;
        let json = convert::to_json(&value).map_err(|e| ScriptError::Convert {
            file: self.file.clone(),
            function: function.into(),
            message: format!("cannot convert the result to JSON: {e}"),
        });
        // A result too deep for JSON is too deep to drop recursively off this stack's end.
        crate::nesting::dismantle(value);
        json
    }

    /// [`Self::call_with_ctx`] without blocking the runtime: inline when the call is short,
    /// else on tokio's blocking pool (see [`inline`]). The caller's tracing span follows the
    /// call, so script logs carry the object.
    pub(crate) async fn call_async(
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

    /// [`Self::call_async`] given the cached object itself, which goes into Rhai without a JSON
    /// copy ([`super::object_dynamic`]). The caller checks first that it has a view
    /// ([`super::has_view`]).
    pub(crate) async fn call_object_async(
        &self,
        function: &str,
        obj: Arc<kube::api::DynamicObject>,
        ctx: ScriptCtx,
    ) -> Result<serde_json::Value, ScriptError> {
        self.off_runtime(function, move |s, name| {
            let view = super::object_dynamic(&obj).map_err(|e| ScriptError::Convert {
                file: s.file.clone(),
                function: name.into(),
                message: format!("cannot read the object: {e}"),
            })?;
            s.call_on(name, view, ctx.clone())
        })
        .await
    }

    /// Calls `function` with `args` (JSON values and `ctx`) and returns its result as JSON.
    pub(crate) fn call_args(
        &self,
        function: &str,
        args: &[CallArg],
    ) -> Result<serde_json::Value, ScriptError> {
        let effects = args.iter().find_map(|a| match a {
            CallArg::Ctx(c) => c.effects.clone(),
            CallArg::Json(_) => None,
        });
        let args = args
            .iter()
            .map(|a| match a {
                CallArg::Json(v) => convert::to_dynamic(v),
                CallArg::Ctx(c) => Dynamic::from(c.clone()),
            })
            .collect();
        self.call_dynamic(function, args, effects.as_ref())
    }

    /// [`Self::call_args`] without blocking the runtime.
    pub(crate) async fn call_args_async(
        &self,
        function: &str,
        args: Vec<CallArg>,
    ) -> Result<serde_json::Value, ScriptError> {
        self.off_runtime(function, move |s, name| s.call_args(name, &args))
            .await
    }

    /// [`Self::call`] without blocking the runtime, for one-argument helpers such as
    /// `when(obj)` and webhook functions. An argument the caller reads again afterwards (a
    /// mutating webhook compares the answer with the request's object) is passed as an `Arc`,
    /// shared with the call instead of copied.
    pub(crate) async fn call_one_async(
        &self,
        function: &str,
        arg: impl Into<Arc<serde_json::Value>>,
    ) -> Result<serde_json::Value, ScriptError> {
        let arg = arg.into();
        self.off_runtime(function, move |s, name| {
            s.call(name, std::slice::from_ref(&*arg))
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
        if let EvalAltResult::ErrorRuntime(v, _) = &err
            && let Some(m) = v.read_lock::<rhai::Map>()
            && m.contains_key("verb")
            && let (Some(message), Some(reason)) = (m.get("error"), m.get("reason"))
        {
            return ScriptError::Api {
                file: self.file.clone(),
                pos: position(pos),
                function: function.into(),
                message: message.to_string(),
                reason: reason.to_string(),
            };
        }
        let message = match &err {
            EvalAltResult::ErrorTerminated(token, _) if is_over_memory(token) => format!(
                "script exceeded its memory limit ({} per call)",
                memory::describe(self.max_memory)
            ),
            EvalAltResult::ErrorTerminated(token, _) if is_over_shared_memory(token) => format!(
                "script stopped: the script calls running at once hold more than the {} they \
                 may hold together",
                memory::describe(memory::shared_limit())
            ),
            EvalAltResult::ErrorTerminated(..) => TIME_LIMIT.to_string(),
            EvalAltResult::ErrorTooManyOperations(..) => {
                "script exceeded its operation limit".to_string()
            }
            EvalAltResult::ErrorRuntime(v, _) => thrown(v),
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

/// The message of a call stopped at its deadline.
const TIME_LIMIT: &str = "script exceeded its time limit";

/// What a script threw, as its error reads: the `error` line of a map that has one (the value
/// a failed `k8s::…` call throws), else its `message` (an `http::` failure, or a script's own
/// `throw #{ message: … }`), else the value.
fn thrown(v: &Dynamic) -> String {
    v.read_lock::<rhai::Map>()
        .and_then(|m| {
            m.get("error")
                .or_else(|| m.get("message").filter(|m| m.is_string()))
                .map(ToString::to_string)
        })
        .unwrap_or_else(|| v.to_string())
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
        // `retry()` and `fail()` checked the status was a map before they threw.
        let status = map
            .get("status")
            .and_then(|s| s.clone().try_cast::<serde_json::Value>())
            .and_then(|s| match s {
                serde_json::Value::Object(m) => Some(Box::new(m)),
                _ => None,
            });
        match kind.as_str() {
            "retry" => Some(ScriptError::Retry {
                file,
                function,
                message,
                // `retry()` read the delay before it threw (see `ctx::retry`).
                delay: map.get("delay")?.clone().try_cast()?,
                status,
            }),
            "fail" => Some(ScriptError::Fail {
                file,
                function,
                message,
                status,
            }),
            _ => None,
        }
    }
}
