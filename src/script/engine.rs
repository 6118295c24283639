//! The one kind of Rhai engine khai runs scripts in: every limit set explicitly, the `ctx` and
//! memo APIs registered, and the progress hook that stops a call at its deadline or memory
//! budget.

use super::stop::{
    DEADLINE, OVER_MEMORY, OVER_SHARED_MEMORY, is_over_memory, is_over_shared_memory,
};
use super::{ctx, inline, memo, memory, stdlib};
use rhai::{Dynamic, Engine, EvalAltResult, OptimizationLevel};
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
pub(crate) const LARGEST_OBJECT: usize = 3 << 20;

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

/// Why a script may not `import`.
pub(super) const NO_IMPORT: &str =
    "`import` is not available: scripts cannot load other files; put the functions in this script";

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
    // `change.old`) must read naturally: khai lets it be an ordinary name. `import` is refused
    // where it is written: with no modules allowed, a script using it compiled and then failed
    // on its first call ("Too many modules imported"), after `khai check` had passed it.
    #[allow(deprecated)]
    e.on_parse_token(|token, _, _| match token {
        rhai::Token::Reserved(s) if s.as_str() == "new" => rhai::Token::Identifier(s),
        rhai::Token::Import => rhai::Token::LexError(Box::new(rhai::LexError::ImproperSymbol(
            "import".into(),
            NO_IMPORT.into(),
        ))),
        t => t,
    });
    ctx::register(&mut e);
    memo::register(&mut e);
    crate::effects::k8s::register(&mut e);
    e.register_static_module("http", crate::effects::http::script::module().into());
    stdlib::register(&mut e);
    nothing_indexes_to_nothing(&mut e);
    e.on_progress(|ops| {
        if inline::over_budget(ops) {
            return Some(Dynamic::from("inline budget used up"));
        }
        match memory::over_budget() {
            Some(memory::Over::Call) => return Some(Dynamic::from(OVER_MEMORY)),
            Some(memory::Over::AllCalls) => return Some(Dynamic::from(OVER_SHARED_MEMORY)),
            None => {}
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

/// The limit that stopped a script, if one did: the `limit` label of
/// `khai_script_limit_aborts_total`.
pub(super) fn limit_hit(err: &EvalAltResult) -> Option<&'static str> {
    Some(match err {
        EvalAltResult::ErrorTerminated(token, _) if is_over_memory(token) => "memory",
        EvalAltResult::ErrorTerminated(token, _) if is_over_shared_memory(token) => "shared_memory",
        EvalAltResult::ErrorTerminated(..) => "time",
        EvalAltResult::ErrorTooManyOperations(..) => "operations",
        EvalAltResult::ErrorStackOverflow(..) => "call_depth",
        EvalAltResult::ErrorDataTooLarge(..) => "data_size",
        EvalAltResult::ErrorTooManyVariables(..) => "variables",
        EvalAltResult::ErrorTooManyModules(..) => "modules",
        _ => return None,
    })
}
