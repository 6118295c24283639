//! `re::`: regular expressions (the `regex` crate's syntax: linear time, no backreferences),
//! compiled under a size limit and kept in a small cache shared by every script.
//!
//! The pattern comes first, as in Python's `re`: `re::is_match(pattern, text)`. A pattern
//! matches anywhere in the text unless anchored with `^`/`$`.

use super::{RhaiResult, error, interrupted, quoted};
use ::regex::{Regex, RegexBuilder};
use std::sync::{Arc, Mutex};

/// Longest pattern accepted, in bytes: far beyond any pattern an operator needs, short enough
/// that parsing one is cheap.
const MAX_PATTERN: usize = 16 << 10;
/// Bytes a compiled pattern may take (the regex crate's `size_limit`); its lazy DFA's cache is
/// bounded the same way (`dfa_size_limit`). Together they bound what one cached regex holds.
const SIZE_LIMIT: usize = 1 << 20;
/// Compiled patterns kept, most recently used last; the least recently used goes first.
const CACHED: usize = 64;
/// Matches a function handles between two looks at the call's memory budget and deadline.
const CHECK_EVERY: usize = 1024;

static CACHE: Mutex<Vec<(String, Arc<Regex>)>> = Mutex::new(Vec::new());

/// `pattern` compiled, from the cache when it is there. `function` names the caller in errors.
fn compile(function: &str, pattern: &str) -> Result<Arc<Regex>, String> {
    {
        let mut cache = crate::sync::lock(&CACHE);
        if let Some(i) = cache.iter().position(|(p, _)| p == pattern) {
            let hit = cache.remove(i);
            let re = Arc::clone(&hit.1);
            cache.push(hit);
            return Ok(re);
        }
    }
    if pattern.len() > MAX_PATTERN {
        return Err(format!(
            "{function}: the pattern is {} bytes long; at most {MAX_PATTERN} are allowed",
            pattern.len()
        ));
    }
    let re = RegexBuilder::new(pattern)
        .size_limit(SIZE_LIMIT)
        .dfa_size_limit(SIZE_LIMIT)
        .build()
        .map_err(|e| {
            format!(
                "{function}: invalid pattern {}: {}",
                quoted(pattern),
                reason(&e)
            )
        })?;
    let re = Arc::new(re);
    let mut cache = crate::sync::lock(&CACHE);
    if cache.len() >= CACHED {
        cache.remove(0);
    }
    cache.push((pattern.to_string(), Arc::clone(&re)));
    Ok(re)
}

/// The regex crate's reason alone: its syntax errors draw the pattern with a caret over
/// several lines and end with `error: <reason>`.
fn reason(e: &::regex::Error) -> String {
    match e {
        ::regex::Error::Syntax(text) => text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(text)
            .to_string(),
        ::regex::Error::CompiledTooBig(limit) => {
            format!("it compiles to more than the limit of {limit} bytes")
        }
        other => other.to_string(),
    }
}

/// `text` with `pattern`'s matches replaced, up to `limit` of them (0: all), the result no
/// longer than `max_len` bytes (0: no bound).
fn replace(
    ctx: &rhai::NativeCallContext,
    function: &str,
    pattern: &str,
    text: &str,
    with: &str,
    limit: usize,
) -> RhaiResult<String> {
    let re = compile(function, pattern).map_err(|m| error(ctx, m))?;
    let max_len = ctx.engine().max_string_size();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (n, caps) in re.captures_iter(text).enumerate() {
        if limit > 0 && n >= limit {
            break;
        }
        if n % CHECK_EVERY == CHECK_EVERY - 1 {
            interrupted(ctx)?;
        }
        let Some(whole) = caps.get(0) else { continue };
        out.push_str(&text[last..whole.start()]);
        caps.expand(with, &mut out);
        last = whole.end();
        if max_len > 0 && out.len() > max_len {
            return Err(error(
                ctx,
                format!(
                    "{function}: the result is longer than the string limit of {max_len} bytes"
                ),
            ));
        }
    }
    out.push_str(&text[last..]);
    Ok(out)
}

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    use super::{CHECK_EVERY, RhaiResult, compile, error, interrupted};
    use rhai::{Array, Dynamic, Map, NativeCallContext};

    /// Whether `pattern` matches somewhere in `text`.
    #[rhai_fn(return_raw)]
    pub fn is_match(ctx: NativeCallContext, pattern: &str, text: &str) -> RhaiResult<bool> {
        let re = compile("re::is_match", pattern).map_err(|m| error(&ctx, m))?;
        Ok(re.is_match(text))
    }

    /// The first match of `pattern` in `text`, or `()`.
    #[rhai_fn(return_raw)]
    pub fn find(ctx: NativeCallContext, pattern: &str, text: &str) -> RhaiResult<Dynamic> {
        let re = compile("re::find", pattern).map_err(|m| error(&ctx, m))?;
        Ok(re.find(text).map_or(Dynamic::UNIT, |m| m.as_str().into()))
    }

    /// Every match of `pattern` in `text`, in order.
    #[rhai_fn(return_raw)]
    pub fn find_all(ctx: NativeCallContext, pattern: &str, text: &str) -> RhaiResult<Array> {
        let re = compile("re::find_all", pattern).map_err(|m| error(&ctx, m))?;
        let mut out = Array::new();
        for (n, m) in re.find_iter(text).enumerate() {
            if n % CHECK_EVERY == CHECK_EVERY - 1 {
                interrupted(&ctx)?;
            }
            out.push(m.as_str().into());
        }
        Ok(out)
    }

    /// The groups of the first match: index 0 the whole match, then each group in order, `()`
    /// for a group that took no part. `()` when nothing matches.
    #[rhai_fn(return_raw)]
    pub fn captures(ctx: NativeCallContext, pattern: &str, text: &str) -> RhaiResult<Dynamic> {
        let re = compile("re::captures", pattern).map_err(|m| error(&ctx, m))?;
        Ok(re.captures(text).map_or(Dynamic::UNIT, |caps| {
            let groups: Array = caps
                .iter()
                .map(|g| g.map_or(Dynamic::UNIT, |g| g.as_str().into()))
                .collect();
            groups.into()
        }))
    }

    /// The named groups (`(?<name>…)`) of the first match, by name, `()` for a group that took
    /// no part. `()` when nothing matches.
    #[rhai_fn(return_raw)]
    pub fn named_captures(
        ctx: NativeCallContext,
        pattern: &str,
        text: &str,
    ) -> RhaiResult<Dynamic> {
        let re = compile("re::named_captures", pattern).map_err(|m| error(&ctx, m))?;
        Ok(re.captures(text).map_or(Dynamic::UNIT, |caps| {
            let named: Map = re
                .capture_names()
                .flatten()
                .map(|name| {
                    let v = caps.name(name).map_or(Dynamic::UNIT, |g| g.as_str().into());
                    (name.into(), v)
                })
                .collect();
            named.into()
        }))
    }

    /// `text` with the first match of `pattern` replaced by `with`, where `$1` and `${name}`
    /// stand for groups (`$$` for a dollar sign).
    #[rhai_fn(return_raw)]
    pub fn replace(
        ctx: NativeCallContext,
        pattern: &str,
        text: &str,
        with: &str,
    ) -> RhaiResult<String> {
        super::replace(&ctx, "re::replace", pattern, text, with, 1)
    }

    /// `text` with every match of `pattern` replaced by `with` (`$1`, `${name}` as in
    /// `replace`).
    #[rhai_fn(return_raw)]
    pub fn replace_all(
        ctx: NativeCallContext,
        pattern: &str,
        text: &str,
        with: &str,
    ) -> RhaiResult<String> {
        super::replace(&ctx, "re::replace_all", pattern, text, with, 0)
    }

    /// The pieces of `text` between matches of `pattern`.
    #[rhai_fn(return_raw)]
    pub fn split(ctx: NativeCallContext, pattern: &str, text: &str) -> RhaiResult<Array> {
        let re = compile("re::split", pattern).map_err(|m| error(&ctx, m))?;
        let mut out = Array::new();
        for (n, piece) in re.split(text).enumerate() {
            if n % CHECK_EVERY == CHECK_EVERY - 1 {
                interrupted(&ctx)?;
            }
            out.push(piece.into());
        }
        Ok(out)
    }

    /// `text` with every character that means something in a pattern escaped, so it matches
    /// itself.
    pub fn escape(text: &str) -> String {
        ::regex::escape(text)
    }
}

#[cfg(test)]
mod tests {
    use crate::script::{Limits, engine};
    use rhai::Dynamic;

    use crate::script::eval_dynamic as eval;

    fn json(src: &str) -> serde_json::Value {
        crate::script::eval_json(src).unwrap()
    }

    #[test]
    fn matching_finds_anywhere_unless_anchored() {
        assert_eq!(json(r#"re::is_match("b+", "abbc")"#), true);
        assert_eq!(json(r#"re::is_match("^b+$", "abbc")"#), false);
        assert_eq!(json(r#"re::find("\\d+", "v12.3")"#), "12");
        assert_eq!(json(r#"re::find("\\d+", "none")"#), serde_json::Value::Null);
        assert_eq!(
            json(r#"re::find_all("\\d+", "1.22.333")"#),
            serde_json::json!(["1", "22", "333"])
        );
    }

    #[test]
    fn captures_give_groups_by_number_and_by_name() {
        assert_eq!(
            json(r#"re::captures("(\\w+)@(\\w+)?(x)?", "me@host")"#),
            serde_json::json!(["me@host", "me", "host", null])
        );
        assert_eq!(
            json(r#"re::named_captures("(?<user>\\w+)@(?<host>\\w+)(?<port>:\\d+)?", "me@h")"#),
            serde_json::json!({ "user": "me", "host": "h", "port": null })
        );
        assert_eq!(json(r#"re::captures("x", "y")"#), serde_json::Value::Null);
        assert_eq!(
            json(r#"re::named_captures("x", "y")"#),
            serde_json::Value::Null
        );
    }

    #[test]
    fn replacing_expands_groups_and_splitting_cuts_at_matches() {
        assert_eq!(
            json(r#"re::replace("(\\w+)-(\\w+)", "a-b c-d", "$2-$1")"#),
            "b-a c-d"
        );
        assert_eq!(
            json(r#"re::replace_all("(?<k>\\w+)=(\\w+)", "a=1 b=2", "${k}:$2")"#),
            "a:1 b:2"
        );
        assert_eq!(json(r#"re::replace_all("x", "abc", "$$")"#), "abc");
        assert_eq!(
            json(r#"re::split("\\s*,\\s*", "a , b,c")"#),
            serde_json::json!(["a", "b", "c"])
        );
        assert_eq!(json(r#"re::escape("a.b*")"#), "a\\.b\\*");
    }

    #[test]
    fn bad_patterns_are_errors_in_the_users_words() {
        let err = eval(r#"re::is_match("a(", "a")"#).unwrap_err();
        assert!(
            err.starts_with("re::is_match: invalid pattern \"a(\": unclosed group"),
            "{err}"
        );
        let err = eval(r#"re::split("[z-a]", "a")"#).unwrap_err();
        assert!(
            err.starts_with("re::split: invalid pattern \"[z-a]\": invalid character class range"),
            "{err}"
        );
        let err = eval(r#"re::find("(?<=a)b", "ab")"#).unwrap_err();
        assert!(err.contains("look-around"), "{err}");
    }

    #[test]
    fn patterns_are_bounded_in_length_and_compiled_size() {
        let err = eval(&format!(r#"re::is_match("{}", "a")"#, "a".repeat(20_000))).unwrap_err();
        assert!(err.contains("at most 16384 are allowed"), "{err}");
        // Small to write, huge once compiled: counted repetitions of a Unicode class.
        let err = eval(r#"re::is_match("\\w{1000}{1000}", "a")"#).unwrap_err();
        assert!(err.contains("compiles to more than the limit"), "{err}");
    }

    #[test]
    fn the_cache_keeps_at_most_its_bound_and_the_latest_patterns() {
        for i in 0..(super::CACHED + 10) {
            super::compile("t", &format!("cache-test-{i}")).unwrap();
        }
        let cache = crate::sync::lock(&super::CACHE);
        assert!(cache.len() <= super::CACHED);
        assert!(
            cache
                .iter()
                .any(|(p, _)| p == &format!("cache-test-{}", super::CACHED + 9))
        );
    }

    #[test]
    fn a_long_loop_stops_at_the_calls_memory_budget_as_the_progress_hook_would() {
        let e = engine(&Limits::default());
        let mut scope = rhai::Scope::new();
        scope.push("text", "a".repeat(2 << 20));
        crate::script::memory::begin(1 << 20);
        let err = e
            .eval_with_scope::<Dynamic>(&mut scope, r#"re::find_all("a", text)"#)
            .unwrap_err();
        crate::script::memory::end();
        match *err {
            rhai::EvalAltResult::ErrorTerminated(token, _) => {
                assert!(crate::script::stop::is_over_memory(&token), "{token}");
            }
            other => panic!("not stopped for memory: {other}"),
        }
    }

    #[test]
    fn a_replacement_longer_than_the_string_limit_is_an_error_not_an_allocation() {
        let limits = Limits {
            max_string_size: 1000,
            ..Limits::default()
        };
        let err = engine(&limits)
            .eval::<Dynamic>(r#"re::replace_all("", "aaaaaaaaaa", "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789")"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("longer than the string limit of 1000 bytes"),
            "{err}"
        );
    }
}
