//! `quantity::`: Kubernetes resource quantities (`"500m"`, `"1Gi"`, `"2.5"`, `"1e3"`) read,
//! compared, added and written back the way the API server's apimachinery does.
//!
//! A quantity is a number with an optional suffix: binary `Ki Mi Gi Ti Pi Ei` (powers of
//! 1024), decimal `n u m "" k M G T P E` (powers of 1000), or an exponent `e3`/`E-2`. It is
//! kept exactly, to the nano unit (a finer value rounds away from zero, as apimachinery's
//! does), and remembers its kind of suffix, which its canonical form keeps: `"1536Mi"` for
//! `"1.5Gi"`, `"100m"` for `"0.1"`, `"1k"` for `"1000"`. Functions also take numbers (`2`,
//! `0.5`), as quantities appear in JSON.

use super::{RhaiResult, error, quoted};
use rhai::{Dynamic, NativeCallContext};

/// Nano units in one unit: the finest a quantity holds.
const NANO: i128 = 1_000_000_000;

/// How a quantity was written, which decides how it is written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// `Ki`, `Mi`, …: powers of 1024.
    BinarySi,
    /// `m`, `k`, `M`, … or none: powers of 1000.
    DecimalSi,
    /// `e3`, `E-2`: powers of ten written out.
    DecimalExponent,
}

/// A quantity, exactly: its value in nano units and how it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Quantity {
    nanos: i128,
    format: Format,
}

const BINARY: &[&str] = &["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
const DECIMAL: &[(&str, i32)] = &[
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

/// Parses a quantity; the error says why, without naming the input (callers do).
fn parse(text: &str) -> Result<Quantity, String> {
    let s = text.trim();
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let int_len = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (int, rest) = rest.split_at(int_len);
    let (frac, suffix) = match rest.strip_prefix('.') {
        Some(after) => {
            let len = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            after.split_at(len)
        }
        None => ("", rest),
    };
    if int.is_empty() && frac.is_empty() {
        return Err("it has no number".into());
    }
    let (format, exp10, binary_power) = if let Some(k) =
        BINARY[1..].iter().position(|b| *b == suffix)
    {
        (Format::BinarySi, 0, k + 1)
    } else if let Some((_, e)) = DECIMAL.iter().find(|(d, _)| *d == suffix) {
        (Format::DecimalSi, *e, 0)
    } else if let Some(exp) = suffix.strip_prefix(['e', 'E']).filter(|e| !e.is_empty()) {
        let e: i32 = exp
            .parse()
            .map_err(|_| format!("the exponent {exp:?} is not a whole number"))?;
        (Format::DecimalExponent, e, 0)
    } else {
        return Err(format!(
            "unknown suffix {suffix:?} (use Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E or an exponent like e3)"
        ));
    };
    // The digits as one integer, the fraction's trailing zeros dropped (they change nothing).
    let frac = frac.trim_end_matches('0');
    let digits = format!("{int}{frac}");
    let digits = digits.trim_start_matches('0');
    let too_large = || "it is too large".to_string();
    let mut mantissa: i128 = if digits.is_empty() {
        0
    } else if digits.len() > 38 {
        return Err("it has too many digits".into());
    } else {
        digits.parse().map_err(|_| too_large())?
    };
    if binary_power > 0 {
        let scale = 1024_i128
            .checked_pow(u32::try_from(binary_power).map_err(|_| too_large())?)
            .ok_or_else(too_large)?;
        mantissa = mantissa.checked_mul(scale).ok_or_else(too_large)?;
    }
    let frac_len = i64::try_from(frac.len()).map_err(|_| too_large())?;
    let shift = i64::from(exp10) - frac_len + 9;
    let nanos = if mantissa == 0 {
        0
    } else if shift >= 0 {
        let scale = u32::try_from(shift)
            .ok()
            .and_then(|s| 10_i128.checked_pow(s))
            .ok_or_else(too_large)?;
        mantissa.checked_mul(scale).ok_or_else(too_large)?
    } else {
        // Finer than a nano unit: rounded away from zero, as apimachinery rounds.
        match u32::try_from(-shift)
            .ok()
            .and_then(|s| 10_i128.checked_pow(s))
        {
            Some(d) => mantissa / d + i128::from(mantissa % d != 0),
            None => 1,
        }
    };
    Ok(Quantity {
        nanos: if negative { -nanos } else { nanos },
        format,
    })
}

/// The canonical form apimachinery writes: the largest suffix of the quantity's kind that
/// keeps the number whole. A binary quantity under 1024 or with a fraction of a unit is
/// written in decimal, as apimachinery writes it.
fn canonical(q: Quantity) -> String {
    if q.nanos == 0 {
        return "0".into();
    }
    let format = match q.format {
        Format::BinarySi
            if q.nanos.unsigned_abs() < 1024 * NANO.unsigned_abs() || q.nanos % NANO != 0 =>
        {
            Format::DecimalSi
        }
        f => f,
    };
    if format == Format::BinarySi {
        let (mut n, mut k) = (q.nanos / NANO, 0);
        while k + 1 < BINARY.len() && n % 1024 == 0 {
            n /= 1024;
            k += 1;
        }
        return format!("{n}{}", BINARY[k]);
    }
    let (mut m, mut e) = (q.nanos, -9);
    while m % 1000 == 0 && (format == Format::DecimalExponent || e < 18) {
        m /= 1000;
        e += 3;
    }
    match format {
        Format::DecimalExponent if e == 0 => m.to_string(),
        Format::DecimalExponent => format!("{m}e{e}"),
        _ => {
            let suffix = DECIMAL.iter().find(|(_, x)| *x == e).map_or("", |(s, _)| s);
            format!("{m}{suffix}")
        }
    }
}

/// A quantity argument: text, or a number as JSON holds it.
fn arg(ctx: &NativeCallContext, function: &str, v: &Dynamic) -> RhaiResult<Quantity> {
    let text = if let Some(s) = v.read_lock::<rhai::ImmutableString>() {
        s.to_string()
    } else if let Ok(n) = v.as_int() {
        n.to_string()
    } else if let Ok(f) = v.as_float()
        && f.is_finite()
    {
        f.to_string()
    } else {
        return Err(error(
            ctx,
            format!(
                "{function}: a quantity is text like \"500m\" or a number, not {}",
                v.type_name()
            ),
        ));
    };
    parse(&text).map_err(|why| {
        error(
            ctx,
            format!(
                "{function}: {} is not a quantity like \"500m\" or \"1Gi\": {why}",
                quoted(&text)
            ),
        )
    })
}

/// `a` and `b` combined by `op`, in `a`'s format (`b`'s when `a` is zero, as apimachinery).
fn combine(
    ctx: &NativeCallContext,
    function: &str,
    a: &Dynamic,
    b: &Dynamic,
    op: fn(i128, i128) -> Option<i128>,
) -> RhaiResult<String> {
    let (a, b) = (arg(ctx, function, a)?, arg(ctx, function, b)?);
    let nanos = op(a.nanos, b.nanos)
        .ok_or_else(|| error(ctx, format!("{function}: the result is too large")))?;
    let format = if a.nanos == 0 { b.format } else { a.format };
    Ok(canonical(Quantity { nanos, format }))
}

/// `q` in units of `1 / per` of a unit, rounded away from zero (as apimachinery's `Value`).
fn whole(ctx: &NativeCallContext, function: &str, q: &Dynamic, per: i128) -> RhaiResult<rhai::INT> {
    let q = arg(ctx, function, q)?;
    let d = NANO / per;
    let n = q.nanos / d + i128::from(q.nanos % d > 0) - i128::from(q.nanos % d < 0);
    rhai::INT::try_from(n).map_err(|_| {
        error(
            ctx,
            format!("{function}: {} does not fit in an integer", canonical(q)),
        )
    })
}

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    use super::{RhaiResult, arg, combine, whole};
    use rhai::{Dynamic, FLOAT, INT, NativeCallContext};

    /// `q` written canonically: `"1.5Gi"` is `"1536Mi"`, `"0.1"` is `"100m"`.
    #[rhai_fn(return_raw)]
    pub fn canonical(ctx: NativeCallContext, q: Dynamic) -> RhaiResult<String> {
        arg(&ctx, "quantity::canonical", &q).map(super::canonical)
    }

    /// Whether `q` is a quantity.
    pub fn is_valid(q: Dynamic) -> bool {
        q.read_lock::<rhai::ImmutableString>()
            .is_some_and(|s| super::parse(&s).is_ok())
            || q.is_int()
            || q.as_float().is_ok_and(f64::is_finite)
    }

    /// -1, 0 or 1 as `a` is less than, equal to or greater than `b` (`"1Gi"` > `"1G"`).
    #[rhai_fn(return_raw)]
    pub fn compare(ctx: NativeCallContext, a: Dynamic, b: Dynamic) -> RhaiResult<INT> {
        let a = arg(&ctx, "quantity::compare", &a)?;
        let b = arg(&ctx, "quantity::compare", &b)?;
        Ok(super::super::sign(a.nanos.cmp(&b.nanos)))
    }

    /// `a + b`, canonical, in `a`'s kind of suffix.
    #[rhai_fn(return_raw)]
    pub fn add(ctx: NativeCallContext, a: Dynamic, b: Dynamic) -> RhaiResult<String> {
        combine(&ctx, "quantity::add", &a, &b, i128::checked_add)
    }

    /// `a - b`, canonical, in `a`'s kind of suffix.
    #[rhai_fn(return_raw)]
    pub fn sub(ctx: NativeCallContext, a: Dynamic, b: Dynamic) -> RhaiResult<String> {
        combine(&ctx, "quantity::sub", &a, &b, i128::checked_sub)
    }

    /// `q` times a whole number, canonical: `quantity::mul("250m", 3)` is `"750m"`.
    #[rhai_fn(return_raw)]
    pub fn mul(ctx: NativeCallContext, q: Dynamic, n: INT) -> RhaiResult<String> {
        let q = arg(&ctx, "quantity::mul", &q)?;
        let nanos = q
            .nanos
            .checked_mul(i128::from(n))
            .ok_or_else(|| super::error(&ctx, "quantity::mul: the result is too large"))?;
        Ok(super::canonical(super::Quantity { nanos, ..q }))
    }

    /// `q` as a whole number of units, rounded away from zero: `"1500m"` is 2, `"1Ki"` 1024.
    #[rhai_fn(return_raw)]
    pub fn value(ctx: NativeCallContext, q: Dynamic) -> RhaiResult<INT> {
        whole(&ctx, "quantity::value", &q, 1)
    }

    /// `q` in thousandths of a unit, rounded away from zero: `"0.5"` is 500 (millicores).
    #[rhai_fn(return_raw)]
    pub fn milli_value(ctx: NativeCallContext, q: Dynamic) -> RhaiResult<INT> {
        whole(&ctx, "quantity::milli_value", &q, 1000)
    }

    /// `q` as a floating-point number of units (inexact for very large or fine values).
    #[rhai_fn(return_raw)]
    pub fn as_float(ctx: NativeCallContext, q: Dynamic) -> RhaiResult<FLOAT> {
        let q = arg(&ctx, "quantity::as_float", &q)?;
        Ok(q.nanos as FLOAT / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        canonical(parse(s).unwrap())
    }

    use crate::script::eval_json as eval;

    /// Canonical forms as apimachinery's `Quantity.String()` writes them (its quantity_test.go).
    #[test]
    fn canonical_forms_are_apimachinerys() {
        for (written, canonical) in [
            ("0", "0"),
            ("0Mi", "0"),
            ("1", "1"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("1.5", "1500m"),
            ("0.1", "100m"),
            ("1000m", "1"),
            ("100m", "100m"),
            ("500m", "500m"),
            ("1Ki", "1Ki"),
            ("1024", "1024"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("0.5Ki", "512"),
            ("1.5Ki", "1536"),
            ("1Ei", "1Ei"),
            ("1e3", "1e3"),
            ("1e4", "10e3"),
            ("1.5e3", "1500"),
            ("1E-3", "1e-3"),
            ("12e6", "12e6"),
            ("1k", "1k"),
            ("1M", "1M"),
            ("1000k", "1M"),
            ("1E", "1E"),
            ("1000E", "1000E"),
            ("-1.5", "-1500m"),
            ("+2", "2"),
            ("1n", "1n"),
            ("0.0000000001", "1n"),
            ("-0.0000000001", "-1n"),
            ("1u", "1u"),
            ("5.", "5"),
            (".5", "500m"),
            ("1.0000000000000000000000000000000000000000000", "1"),
        ] {
            assert_eq!(canon(written), canonical, "{written}");
        }
    }

    #[test]
    fn the_extremes_of_the_range_are_written_without_overflow() {
        for nanos in [i128::MIN, i128::MAX, i128::MIN + 1] {
            for format in [Format::BinarySi, Format::DecimalSi, Format::DecimalExponent] {
                let written = canonical(Quantity { nanos, format });
                assert!(!written.is_empty());
            }
        }
    }

    #[test]
    fn bad_quantities_say_why() {
        for (written, why) in [
            ("", "it has no number"),
            ("m", "it has no number"),
            ("1Q", "unknown suffix \"Q\""),
            ("1ki", "unknown suffix \"ki\""),
            ("1e", "unknown suffix \"e\""),
            ("1ex", "the exponent \"x\" is not a whole number"),
            ("1e99999999999", "the exponent"),
            ("1e40", "it is too large"),
            ("1 Gi", "unknown suffix \" Gi\""),
            ("1.2.3", "unknown suffix \".3\""),
        ] {
            let err = parse(written).unwrap_err();
            assert!(err.contains(why), "{written}: {err}");
        }
        assert!(
            parse(&"9".repeat(40))
                .unwrap_err()
                .contains("too many digits")
        );
    }

    #[test]
    fn scripts_compare_add_and_convert_quantities() {
        let v = eval(
            r#"[quantity::compare("1Gi", "1G"), quantity::compare("500m", 0.5),
                quantity::compare("1", "2"), quantity::add("500m", "1.5"),
                quantity::add("1Gi", "512Mi"), quantity::sub("1", "250m"),
                quantity::add(0, "1Gi"), quantity::mul("250m", 3), quantity::value("1500m"),
                quantity::milli_value("0.5"), quantity::value("-1.5"), quantity::as_float("2.5"),
                quantity::canonical(2), quantity::is_valid("1Qi"), quantity::is_valid("1Gi")]"#,
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!([
                1, 0, -1, "2", "1536Mi", "750m", "1Gi", "750m", 2, 500, -2, 2.5, "2", false, true
            ])
        );
    }

    #[test]
    fn script_errors_name_the_function_and_the_input() {
        let err = eval(r#"quantity::add("1Gi", "lots")"#).unwrap_err();
        assert!(
            err.starts_with(
                "quantity::add: \"lots\" is not a quantity like \"500m\" or \"1Gi\": it has no number"
            ),
            "{err}"
        );
        let err = eval("quantity::compare([], 1)").unwrap_err();
        assert!(
            err.contains("a quantity is text like \"500m\" or a number, not array"),
            "{err}"
        );
        let err = eval(r#"quantity::value("1e20")"#).unwrap_err();
        assert!(err.contains("does not fit in an integer"), "{err}");
        let err = eval(r#"quantity::mul("1e28", 1000000000000)"#).unwrap_err();
        assert!(err.contains("too large"), "{err}");
    }
}
