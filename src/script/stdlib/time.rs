//! `time::`: timestamps and durations in the forms a status stores and reads back unchanged.
//!
//! A timestamp is an RFC 3339 string (`"2024-05-01T12:00:00Z"`); functions accept any offset
//! and fractional seconds, and answer in UTC, to the second unless the input had a fraction. A
//! duration is a whole number of seconds (an integer), written `"1h30m"`, `"2d"`, `"90s"`,
//! `"1w"` where a function takes text; functions that take a duration accept either.

use super::{RhaiResult, error, quoted};
use jiff::{SignedDuration, Timestamp};
use rhai::{Dynamic, NativeCallContext};

/// Seconds in each unit a duration may be written in, largest first.
const UNITS: &[(&str, i64)] = &[
    ("w", 604_800),
    ("d", 86_400),
    ("h", 3600),
    ("m", 60),
    ("s", 1),
];

/// Parses an RFC 3339 timestamp.
fn parse(function: &str, text: &str) -> Result<Timestamp, String> {
    text.parse::<Timestamp>().map_err(|e| {
        format!(
            "{function}: {} is not an RFC 3339 timestamp like \"2024-05-01T12:00:00Z\": {e}",
            quoted(text)
        )
    })
}

/// A timestamp as scripts store it: RFC 3339 in UTC, with a fraction only when it has one.
fn show(t: Timestamp) -> String {
    t.to_string()
}

/// Parses `"1h30m"`, `"2d"`, `"-90s"` or a bare number of seconds into seconds.
fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = |why: &str| format!("{} is not a duration like \"1h30m\": {why}", quoted(text));
    let trimmed = text.trim();
    let (negative, mut rest) = match trimmed.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
    };
    if rest.is_empty() {
        return Err(bad("it is empty"));
    }
    if rest.bytes().all(|b| b.is_ascii_digit()) {
        let n: i64 = rest.parse().map_err(|_| bad("too long"))?;
        return Ok(if negative { -n } else { n });
    }
    let mut total: i64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad("each unit needs a whole number before it"));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let Some((_, secs)) = UNITS.iter().find(|(u, _)| *u == unit) else {
            return Err(if unit.is_empty() {
                bad("a number needs a unit after another unit")
            } else {
                bad(&format!("unknown unit {unit:?}; use w, d, h, m or s"))
            });
        };
        let n: i64 = number.parse().map_err(|_| bad("too long"))?;
        total = n
            .checked_mul(*secs)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| bad("too long"))?;
        rest = after;
    }
    Ok(if negative { -total } else { total })
}

/// Seconds written the way [`parse_duration`] reads them: `"1d2h3m4s"`, `"0s"`, `"-5m"`.
/// Weeks are left as days, which read more easily.
fn format_duration(secs: i64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    if secs < 0 {
        out.push('-');
    }
    let mut left = secs.unsigned_abs();
    for (unit, size) in &UNITS[1..] {
        let size = size.unsigned_abs();
        if left >= size {
            out.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    out
}

/// A duration argument: whole seconds, or text [`parse_duration`] reads.
fn duration_arg(ctx: &NativeCallContext, function: &str, d: &Dynamic) -> RhaiResult<i64> {
    if let Ok(n) = d.as_int() {
        return Ok(n);
    }
    match d.read_lock::<rhai::ImmutableString>() {
        Some(s) => parse_duration(s.as_str()).map_err(|m| error(ctx, format!("{function}: {m}"))),
        None => Err(error(
            ctx,
            format!(
                "{function}: a duration is a number of seconds or text like \"1h30m\", not {}",
                d.type_name()
            ),
        )),
    }
}

/// `t` moved by `secs` seconds.
fn shift(ctx: &NativeCallContext, function: &str, t: &str, secs: i64) -> RhaiResult<String> {
    let t = parse(function, t).map_err(|m| error(ctx, m))?;
    t.checked_add(SignedDuration::from_secs(secs))
        .map(show)
        .map_err(|_| error(ctx, format!("{function}: the result is out of range")))
}

/// Both timestamps, parsed.
fn pair(
    ctx: &NativeCallContext,
    function: &str,
    a: &str,
    b: &str,
) -> RhaiResult<(Timestamp, Timestamp)> {
    let a = parse(function, a).map_err(|m| error(ctx, m))?;
    let b = parse(function, b).map_err(|m| error(ctx, m))?;
    Ok((a, b))
}

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    use super::{RhaiResult, Timestamp, duration_arg, error, pair, shift, show};
    use rhai::{Dynamic, INT, NativeCallContext};

    /// The current time, RFC 3339 in UTC, to the second. Volatile: never folded into a
    /// constant when a script is compiled.
    #[rhai_fn(volatile)]
    pub fn now() -> String {
        Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// `text` as the canonical RFC 3339 timestamp in UTC.
    #[rhai_fn(return_raw)]
    pub fn parse(ctx: NativeCallContext, text: &str) -> RhaiResult<String> {
        super::parse("time::parse", text)
            .map(show)
            .map_err(|m| error(&ctx, m))
    }

    /// Whether `text` is an RFC 3339 timestamp.
    pub fn is_valid(text: &str) -> bool {
        text.parse::<Timestamp>().is_ok()
    }

    /// Seconds since 1970-01-01T00:00:00Z (rounded down).
    #[rhai_fn(return_raw)]
    pub fn unix(ctx: NativeCallContext, t: &str) -> RhaiResult<INT> {
        super::parse("time::unix", t)
            .map(|t| t.as_second())
            .map_err(|m| error(&ctx, m))
    }

    /// The timestamp `secs` seconds after 1970-01-01T00:00:00Z.
    #[rhai_fn(return_raw)]
    pub fn from_unix(ctx: NativeCallContext, secs: INT) -> RhaiResult<String> {
        Timestamp::from_second(secs).map(show).map_err(|e| {
            error(
                &ctx,
                format!("time::from_unix: {secs} is out of range: {e}"),
            )
        })
    }

    /// `t` written with a strftime format (`"%Y-%m-%d"`), in UTC.
    #[rhai_fn(return_raw)]
    pub fn format(ctx: NativeCallContext, t: &str, format: &str) -> RhaiResult<String> {
        let t = super::parse("time::format", t).map_err(|m| error(&ctx, m))?;
        jiff::fmt::strtime::format(format, t)
            .map_err(|e| error(&ctx, format!("time::format: format {format:?}: {e}")))
    }

    /// `t` plus a duration (seconds or `"1h30m"`).
    #[rhai_fn(return_raw)]
    pub fn add(ctx: NativeCallContext, t: &str, duration: Dynamic) -> RhaiResult<String> {
        let secs = duration_arg(&ctx, "time::add", &duration)?;
        shift(&ctx, "time::add", t, secs)
    }

    /// `t` minus a duration (seconds or `"1h30m"`).
    #[rhai_fn(return_raw)]
    pub fn sub(ctx: NativeCallContext, t: &str, duration: Dynamic) -> RhaiResult<String> {
        let secs = duration_arg(&ctx, "time::sub", &duration)?;
        let back = secs
            .checked_neg()
            .ok_or_else(|| error(&ctx, "time::sub: the duration is out of range"))?;
        shift(&ctx, "time::sub", t, back)
    }

    /// Whole seconds from `b` to `a` (`a - b`, negative when `a` is earlier).
    #[rhai_fn(return_raw)]
    pub fn diff(ctx: NativeCallContext, a: &str, b: &str) -> RhaiResult<INT> {
        let (a, b) = pair(&ctx, "time::diff", a, b)?;
        Ok(a.duration_since(b).as_secs())
    }

    /// Whole seconds since `t` (negative when `t` is in the future). Volatile, like `now`.
    #[rhai_fn(volatile, return_raw)]
    pub fn since(ctx: NativeCallContext, t: &str) -> RhaiResult<INT> {
        let t = super::parse("time::since", t).map_err(|m| error(&ctx, m))?;
        Ok(Timestamp::now().duration_since(t).as_secs())
    }

    /// -1, 0 or 1 as `a` is before, at or after `b`.
    #[rhai_fn(return_raw)]
    pub fn compare(ctx: NativeCallContext, a: &str, b: &str) -> RhaiResult<INT> {
        let (a, b) = pair(&ctx, "time::compare", a, b)?;
        Ok(super::super::sign(a.cmp(&b)))
    }

    /// Whether `a` is strictly before `b`.
    #[rhai_fn(return_raw)]
    pub fn before(ctx: NativeCallContext, a: &str, b: &str) -> RhaiResult<bool> {
        let (a, b) = pair(&ctx, "time::before", a, b)?;
        Ok(a < b)
    }

    /// Whether `a` is strictly after `b`.
    #[rhai_fn(return_raw)]
    pub fn after(ctx: NativeCallContext, a: &str, b: &str) -> RhaiResult<bool> {
        let (a, b) = pair(&ctx, "time::after", a, b)?;
        Ok(a > b)
    }

    /// Seconds in a duration written `"1h30m"`, `"2d"`, `"90s"`, `"1w"` (or a bare number).
    #[rhai_fn(return_raw)]
    pub fn duration(ctx: NativeCallContext, text: &str) -> RhaiResult<INT> {
        super::parse_duration(text).map_err(|m| error(&ctx, format!("time::duration: {m}")))
    }

    /// Seconds written as a duration: `5400` is `"1h30m"`.
    pub fn format_duration(secs: INT) -> String {
        super::format_duration(secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::script::eval_dynamic as eval;

    fn json(src: &str) -> serde_json::Value {
        crate::script::eval_json(src).unwrap()
    }

    #[test]
    fn durations_read_every_unit_and_write_back_the_same_seconds() {
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("1w1s"), Ok(604_801));
        assert_eq!(parse_duration("-5m"), Ok(-300));
        assert_eq!(parse_duration("42"), Ok(42));
        for secs in [
            0, 1, 59, 60, 90, 3600, 5400, 86_400, 90_061, -300, 1_000_000,
        ] {
            assert_eq!(parse_duration(&format_duration(secs)), Ok(secs), "{secs}");
        }
        assert_eq!(format_duration(90_061), "1d1h1m1s");
        assert_eq!(format_duration(-90), "-1m30s");
    }

    #[test]
    fn durations_authors_cannot_mean_are_errors_that_say_why() {
        assert_eq!(
            parse_duration("5ms").unwrap_err(),
            "\"5ms\" is not a duration like \"1h30m\": unknown unit \"ms\"; use w, d, h, m or s"
        );
        assert!(parse_duration("").unwrap_err().contains("it is empty"));
        assert!(parse_duration("h").unwrap_err().contains("whole number"));
        assert!(parse_duration("1.5h").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("1h30").unwrap_err().contains("needs a unit"));
        assert!(
            parse_duration("99999999999999999999w")
                .unwrap_err()
                .contains("too long")
        );
        assert!(
            parse_duration("9999999999999999w")
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn timestamps_parse_from_any_offset_and_answer_in_utc() {
        assert_eq!(
            json(r#"time::parse("2024-01-02T03:04:05+02:00")"#),
            "2024-01-02T01:04:05Z"
        );
        assert_eq!(
            json(r#"time::parse("2024-01-02T03:04:05.250Z")"#),
            "2024-01-02T03:04:05.25Z"
        );
        assert_eq!(json(r#"time::is_valid("yesterday")"#), false);
        assert_eq!(json(r#"time::unix("1970-01-01T00:01:00Z")"#), 60);
        assert_eq!(json("time::from_unix(86400)"), "1970-01-02T00:00:00Z");
        assert_eq!(
            json(r#"time::format("2024-05-01T12:00:00Z", "%Y/%m/%d %H:%M")"#),
            "2024/05/01 12:00"
        );
        let err = eval(r#"time::parse("2024-13-01")"#).unwrap_err();
        assert!(
            err.starts_with("time::parse: \"2024-13-01\" is not an RFC 3339 timestamp"),
            "{err}"
        );
        let err = eval(r#"time::format("2024-05-01T12:00:00Z", "%!")"#).unwrap_err();
        assert!(err.starts_with("time::format: format \"%!\""), "{err}");
        assert!(eval("time::from_unix(999999999999999)").is_err());
    }

    #[test]
    fn arithmetic_and_comparison_take_seconds_or_duration_text() {
        let t = "2024-01-31T23:00:00Z";
        assert_eq!(
            json(&format!(r#"time::add("{t}", "2h")"#)),
            "2024-02-01T01:00:00Z"
        );
        assert_eq!(
            json(&format!(r#"time::sub("{t}", 3600)"#)),
            "2024-01-31T22:00:00Z"
        );
        assert_eq!(
            json(&format!(r#"time::diff("{t}", "2024-01-31T22:59:00Z")"#)),
            60
        );
        assert_eq!(
            json(&format!(r#"time::diff("2024-01-31T22:59:00Z", "{t}")"#)),
            -60
        );
        assert_eq!(
            json(&format!(
                r#"[time::compare("{t}", "{t}"), time::before("{t}", "2025-01-01T00:00:00+05:00"), time::after("{t}", "2025-01-01T00:00:00Z")]"#
            )),
            serde_json::json!([0, true, false])
        );
        assert_eq!(json("time::format_duration(5400)"), "1h30m");
        assert_eq!(json(r#"time::duration("1h30m")"#), 5400);
        let err = eval(r#"time::add("2024-01-01T00:00:00Z", 1.5)"#).unwrap_err();
        assert!(err.contains("a duration is a number of seconds"), "{err}");
        let err = eval(r#"time::add("2024-01-01T00:00:00Z", "soon")"#).unwrap_err();
        assert!(
            err.starts_with("time::add: \"soon\" is not a duration"),
            "{err}"
        );
        assert!(eval(r#"time::add("9999-12-31T00:00:00Z", "2d")"#).is_err());
        assert!(eval(&format!(r#"time::sub("{t}", {})"#, i64::MIN)).is_err());
    }

    #[test]
    fn now_and_since_read_the_clock() {
        let now = json("time::now()");
        let now = now.as_str().unwrap();
        assert_eq!(now.len(), 20, "{now}");
        assert!(now.ends_with('Z'));
        let since = json(&format!(r#"time::since("{now}")"#)).as_i64().unwrap();
        assert!((0..5).contains(&since), "{since}");
    }
}
