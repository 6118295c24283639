//! What can go wrong compiling, checking or calling a script, each error naming the file and,
//! when known, the line and column.

use rhai::Position;
use std::path::{Path, PathBuf};

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
    /// A `k8s::…` call failed and the script did not catch it.
    #[error("{}: in {function}: {message}", at(file, *pos))]
    Api {
        file: PathBuf,
        pos: Option<(usize, usize)>,
        function: String,
        message: String,
        /// The failure's `reason` (`forbidden`, `conflict`, …).
        reason: String,
    },
    /// The script asked, with `retry(message, delay)`, to be run again after `delay`.
    #[error("{}: in {function}: {message} (retry in {delay})", file.display())]
    Retry {
        file: PathBuf,
        function: String,
        message: String,
        delay: crate::config::duration::Duration,
        /// The status the script asked to write with khai's `Ready=False`
        /// (`retry(msg, delay, #{ status })`).
        status: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    },
    /// The script declared, with `fail(message)`, that retrying cannot help until the object
    /// changes.
    #[error("{}: in {function}: {message}", file.display())]
    Fail {
        file: PathBuf,
        function: String,
        message: String,
        /// The status the script asked to write with khai's `Ready=False`
        /// (`fail(msg, #{ status })`).
        status: Option<Box<serde_json::Map<String, serde_json::Value>>>,
    },
    /// A value could not be converted between JSON and Rhai.
    #[error("{}: in {function}: {message}", file.display())]
    Convert {
        file: PathBuf,
        function: String,
        message: String,
    },
}

pub(super) fn at(file: &Path, pos: Option<(usize, usize)>) -> String {
    match pos {
        Some((l, c)) => format!("{}:{l}:{c}", file.display()),
        None => file.display().to_string(),
    }
}

/// `obj, ctx` for arity 2: how khai names the parameters it passes.
pub(crate) fn param_list(arity: usize) -> String {
    ["obj", "ctx", "arg3", "arg4"]
        .iter()
        .take(arity)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn position(pos: Position) -> Option<(usize, usize)> {
    Some((pos.line()?, pos.position().unwrap_or(1)))
}

impl ScriptError {
    /// The status a failing answer (`retry`, `fail`) asked to write, if any.
    pub(crate) fn failing_status(&self) -> Option<&serde_json::Map<String, serde_json::Value>> {
        match self {
            ScriptError::Retry { status, .. } | ScriptError::Fail { status, .. } => {
                status.as_deref()
            }
            _ => None,
        }
    }

    /// The `kind` label of `khai_script_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            ScriptError::Syntax { .. } | ScriptError::Read { .. } => "load",
            ScriptError::MissingFunction { .. } => "missing_function",
            ScriptError::Runtime { .. } => "runtime",
            ScriptError::Api { .. } => "api",
            ScriptError::Retry { .. } => "retry",
            ScriptError::Fail { .. } => "fail",
            ScriptError::Convert { .. } => "convert",
        }
    }
}

/// Rhai appends " (line N, position M)" to messages; the position is reported separately.
pub(super) fn strip_position(msg: &str) -> String {
    match msg.rfind(" (line ") {
        Some(i) if msg.ends_with(')') => msg[..i].to_string(),
        _ => msg.to_string(),
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
