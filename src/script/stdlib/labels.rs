//! `labels::`: Kubernetes label selectors, in the string syntax (`"app=x,tier in (a,b),!legacy"`)
//! or as a `LabelSelector` map (`#{ matchLabels, matchExpressions }`), read and matched as
//! apimachinery's `labels.Parse` and `LabelSelectorAsSelector` do.
//!
//! The string syntax: requirements joined by commas, each `key=value`, `key==value`,
//! `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` (exists), `!key` (does not exist),
//! `key>1`, `key<1` (integer comparison). Keys are qualified names (`app`,
//! `example.com/tier`), values label values (at most 63 characters). An empty selector
//! matches everything; a missing `LabelSelector` (`()`) matches nothing, as in Kubernetes.

use super::quoted;
use rhai::{Array, Dynamic, ImmutableString, Map};

/// What a requirement asks of a label. `=` and `==` are `In` with one value, `!=` `NotIn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    /// Sorted, without repeats.
    values: Vec<String>,
}

impl Requirement {
    fn new(key: &str, op: Op, values: Vec<String>) -> Result<Self, String> {
        check_key(key)?;
        match op {
            Op::In | Op::NotIn if values.is_empty() => {
                return Err(format!("{key}: in and notin need at least one value"));
            }
            Op::Exists | Op::DoesNotExist if !values.is_empty() => {
                return Err(format!("{key}: Exists and DoesNotExist take no values"));
            }
            Op::Gt | Op::Lt if values.len() != 1 || values[0].parse::<i64>().is_err() => {
                return Err(format!("{key}: > and < compare with one whole number"));
            }
            _ => {}
        }
        for v in &values {
            check_value(v)?;
        }
        let mut values = values;
        values.sort();
        values.dedup();
        Ok(Self {
            key: key.to_string(),
            op,
            values,
        })
    }

    fn matches(&self, value: Option<&str>) -> bool {
        let number = || value.and_then(|v| v.parse::<i64>().ok());
        let bound = || self.values.first().and_then(|v| v.parse::<i64>().ok());
        match self.op {
            Op::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::NotIn => !value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
            Op::Gt => number().zip(bound()).is_some_and(|(n, b)| n > b),
            Op::Lt => number().zip(bound()).is_some_and(|(n, b)| n < b),
        }
    }

    /// The requirement in the string syntax.
    fn written(&self) -> String {
        let key = &self.key;
        match self.op {
            Op::In if self.values.len() == 1 => format!("{key}={}", self.values[0]),
            Op::In => format!("{key} in ({})", self.values.join(",")),
            Op::NotIn if self.values.len() == 1 => format!("{key}!={}", self.values[0]),
            Op::NotIn => format!("{key} notin ({})", self.values.join(",")),
            Op::Exists => key.clone(),
            Op::DoesNotExist => format!("!{key}"),
            Op::Gt => format!("{key}>{}", self.values[0]),
            Op::Lt => format!("{key}<{}", self.values[0]),
        }
    }
}

/// A label name: at most 63 characters, alphanumeric at both ends, `-`, `_`, `.` inside.
fn is_name(s: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(ok)
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A DNS subdomain: at most 253 characters, dot-separated lowercase labels.
fn is_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// A label key: a name, optionally prefixed by a DNS subdomain and `/`.
fn check_key(key: &str) -> Result<(), String> {
    let ok = match key.split_once('/') {
        Some((prefix, name)) => is_subdomain(prefix) && is_name(name),
        None => is_name(key),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{} is not a label key (a name of at most 63 letters, digits, '-', '_', '.', \
             optionally prefixed by a DNS subdomain and '/')",
            quoted(key)
        ))
    }
}

/// A label value: empty, or a name of at most 63 characters.
fn check_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name(value) {
        Ok(())
    } else {
        Err(format!(
            "{} is not a label value (at most 63 letters, digits, '-', '_', '.', \
             alphanumeric at both ends)",
            quoted(value)
        ))
    }
}

/// A token of the string syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Not,
    Eq,
    NotEq,
    In,
    NotIn,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Word(w) => format!("{w:?}"),
            Token::Not => "'!'".into(),
            Token::Eq => "'='".into(),
            Token::NotEq => "'!='".into(),
            Token::In => "'in'".into(),
            Token::NotIn => "'notin'".into(),
            Token::Gt => "'>'".into(),
            Token::Lt => "'<'".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::Comma => "','".into(),
            Token::End => "the end".into(),
        }
    }
}

/// Splits a selector into tokens, as apimachinery's lexer does: words run until a blank or
/// one of `! = ( ) , < >`; `in` and `notin` are words only where an operator is expected
/// (the parser decides).
fn tokens(s: &str) -> Vec<Token> {
    let special = |c: char| c.is_whitespace() || "!=(),<>".contains(c);
    let mut out = Vec::new();
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let two = |next: char, chars: &mut std::iter::Peekable<std::str::CharIndices>| {
            chars.next_if(|(_, n)| *n == next).is_some()
        };
        match c {
            c if c.is_whitespace() => {}
            '!' if two('=', &mut chars) => out.push(Token::NotEq),
            '!' => out.push(Token::Not),
            '=' => {
                two('=', &mut chars);
                out.push(Token::Eq);
            }
            '(' => out.push(Token::Open),
            ')' => out.push(Token::Close),
            ',' => out.push(Token::Comma),
            '>' => out.push(Token::Gt),
            '<' => out.push(Token::Lt),
            _ => {
                let mut end = i + c.len_utf8();
                while let Some((j, n)) = chars.next_if(|(_, n)| !special(*n)) {
                    end = j + n.len_utf8();
                }
                out.push(match &s[i..end] {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    w => Token::Word(w.to_string()),
                });
            }
        }
    }
    out.push(Token::End);
    out
}

/// Parses the string syntax; the error says what was found where something else was expected.
fn parse(s: &str) -> Result<Vec<Requirement>, String> {
    let toks = tokens(s);
    let mut at = 0;
    let mut next = || {
        let t = toks.get(at).cloned().unwrap_or(Token::End);
        at += 1;
        t
    };
    let mut out = Vec::new();
    let mut tok = next();
    if tok == Token::End {
        return Ok(out);
    }
    loop {
        let negated = tok == Token::Not;
        if negated {
            tok = next();
        }
        // `in` and `notin` are keys too when they stand where a key does.
        let key = match tok {
            Token::Word(w) => w,
            Token::In => "in".into(),
            Token::NotIn => "notin".into(),
            other => return Err(format!("found {}, expected a label key", other.describe())),
        };
        tok = next();
        if negated {
            out.push(Requirement::new(&key, Op::DoesNotExist, Vec::new())?);
        } else {
            let single = |tok: &mut Token, next: &mut dyn FnMut() -> Token| match next() {
                Token::Word(w) => {
                    *tok = next();
                    vec![w]
                }
                // `key=` is the empty value.
                t => {
                    *tok = t;
                    vec![String::new()]
                }
            };
            let (op, values) = match tok.clone() {
                Token::Comma | Token::End => (Op::Exists, Vec::new()),
                Token::Eq => (Op::In, single(&mut tok, &mut next)),
                Token::NotEq => (Op::NotIn, single(&mut tok, &mut next)),
                Token::Gt => (Op::Gt, single(&mut tok, &mut next)),
                Token::Lt => (Op::Lt, single(&mut tok, &mut next)),
                t @ (Token::In | Token::NotIn) => {
                    let op = if t == Token::In { Op::In } else { Op::NotIn };
                    let open = next();
                    if open != Token::Open {
                        return Err(format!(
                            "found {}, expected '(' after {key}'s operator",
                            open.describe()
                        ));
                    }
                    let mut values = Vec::new();
                    let mut value = String::new();
                    loop {
                        match next() {
                            Token::Word(w) if value.is_empty() => value = w,
                            Token::Comma => values.push(std::mem::take(&mut value)),
                            Token::Close => {
                                if !value.is_empty() || !values.is_empty() {
                                    values.push(std::mem::take(&mut value));
                                }
                                break;
                            }
                            other => {
                                return Err(format!(
                                    "found {} in the values of {key}, expected a value, ',' or ')'",
                                    other.describe()
                                ));
                            }
                        }
                    }
                    tok = next();
                    (op, values)
                }
                other => {
                    return Err(format!(
                        "found {} after {key}, expected =, ==, !=, in, notin, >, <, ',' or the end",
                        other.describe()
                    ));
                }
            };
            out.push(Requirement::new(&key, op, values)?);
        }
        match tok {
            Token::End => return Ok(out),
            Token::Comma => tok = next(),
            other => {
                return Err(format!(
                    "found {} after a requirement, expected ',' or the end",
                    other.describe()
                ));
            }
        }
    }
}

/// A `LabelSelector` map (`matchLabels`, `matchExpressions`) as requirements.
fn from_map(m: &Map) -> Result<Vec<Requirement>, String> {
    let mut out = Vec::new();
    for (k, v) in m {
        match k.as_str() {
            "matchLabels" if v.is_unit() => {}
            "matchLabels" => {
                let labels = v
                    .read_lock::<Map>()
                    .ok_or_else(|| format!("matchLabels is a map, not {}", v.type_name()))?;
                for (key, value) in labels.iter() {
                    let value = text(value).ok_or_else(|| {
                        format!("matchLabels.{key} is {}, not text", value.type_name())
                    })?;
                    out.push(Requirement::new(key, Op::In, vec![value])?);
                }
            }
            "matchExpressions" if v.is_unit() => {}
            "matchExpressions" => {
                let exprs = v.read_lock::<Array>().ok_or_else(|| {
                    format!("matchExpressions is an array, not {}", v.type_name())
                })?;
                for (i, e) in exprs.iter().enumerate() {
                    out.push(expression(e).map_err(|m| format!("matchExpressions[{i}]: {m}"))?);
                }
            }
            other => {
                return Err(format!(
                    "unknown key {other:?} in a LabelSelector (matchLabels, matchExpressions)"
                ));
            }
        }
    }
    Ok(out)
}

/// One of `matchExpressions`: `#{ key, operator, values }`.
fn expression(e: &Dynamic) -> Result<Requirement, String> {
    let e = e.read_lock::<Map>().ok_or_else(|| {
        format!(
            "is {}, not a map of key, operator and values",
            e.type_name()
        )
    })?;
    if let Some(k) = e
        .keys()
        .find(|k| !matches!(k.as_str(), "key" | "operator" | "values"))
    {
        return Err(format!(
            "unknown key {:?} (key, operator, values)",
            k.as_str()
        ));
    }
    let key = e
        .get("key")
        .and_then(text)
        .ok_or("key is missing or not text")?;
    let operator = e
        .get("operator")
        .and_then(text)
        .ok_or("operator is missing or not text")?;
    let op = match operator.as_str() {
        "In" => Op::In,
        "NotIn" => Op::NotIn,
        "Exists" => Op::Exists,
        "DoesNotExist" => Op::DoesNotExist,
        other => {
            return Err(format!(
                "unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)"
            ));
        }
    };
    let values = match e.get("values") {
        None => Vec::new(),
        Some(v) if v.is_unit() => Vec::new(),
        Some(v) => v
            .read_lock::<Array>()
            .ok_or_else(|| format!("values is an array, not {}", v.type_name()))?
            .iter()
            .map(|x| text(x).ok_or_else(|| format!("values holds {}, not text", x.type_name())))
            .collect::<Result<_, _>>()?,
    };
    Requirement::new(&key, op, values)
}

fn text(v: &Dynamic) -> Option<String> {
    v.read_lock::<ImmutableString>().map(|s| s.to_string())
}

/// A selector argument: the string syntax, a `LabelSelector` map, or `()` (`None`: nothing
/// matches).
fn selector(function: &str, v: &Dynamic) -> Result<Option<Vec<Requirement>>, String> {
    let parsed = if v.is_unit() {
        return Ok(None);
    } else if let Some(s) = v.read_lock::<ImmutableString>() {
        parse(&s).map_err(|m| format!("{function}: invalid selector {}: {m}", quoted(&s)))
    } else if let Some(m) = v.read_lock::<Map>() {
        from_map(&m).map_err(|m| format!("{function}: invalid LabelSelector: {m}"))
    } else {
        Err(format!(
            "{function}: a selector is text like \"app=web\" or a LabelSelector map, not {}",
            v.type_name()
        ))
    };
    parsed.map(Some)
}

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    use super::super::{RhaiResult, error};
    use super::{Op, Requirement, text};
    use rhai::{Array, Dynamic, Map, NativeCallContext};

    /// Whether `labels` (a map of text, or `()` for none) meet `selector`: the string syntax
    /// or a `LabelSelector` map. A selector of `()` matches nothing.
    #[rhai_fn(return_raw)]
    pub fn matches(ctx: NativeCallContext, labels: Dynamic, selector: Dynamic) -> RhaiResult<bool> {
        let f = "labels::matches";
        let Some(reqs) = super::selector(f, &selector).map_err(|m| error(&ctx, m))? else {
            return Ok(false);
        };
        let empty = Map::new();
        let labels = if labels.is_unit() {
            None
        } else {
            Some(labels.read_lock::<Map>().ok_or_else(|| {
                error(
                    &ctx,
                    format!("{f}: the labels are a map, not {}", labels.type_name()),
                )
            })?)
        };
        let labels = labels.as_deref().unwrap_or(&empty);
        for r in &reqs {
            let value = match labels.get(r.key.as_str()) {
                None => None,
                Some(v) => Some(text(v).ok_or_else(|| {
                    error(
                        &ctx,
                        format!("{f}: the label {} is {}, not text", r.key, v.type_name()),
                    )
                })?),
            };
            if !r.matches(value.as_deref()) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether `selector` is a valid selector (string syntax or `LabelSelector` map).
    pub fn is_valid(selector: Dynamic) -> bool {
        super::selector("", &selector).is_ok_and(|s| s.is_some())
    }

    /// The selector in the string syntax (for `ctx.list` or a Service's selector text), its
    /// requirements sorted by key: `#{ matchLabels: #{ app: "web" } }` is `"app=web"`.
    #[rhai_fn(return_raw)]
    pub fn stringify(ctx: NativeCallContext, selector: Dynamic) -> RhaiResult<String> {
        let f = "labels::stringify";
        let reqs = super::selector(f, &selector)
            .map_err(|m| error(&ctx, m))?
            .ok_or_else(|| {
                error(
                    &ctx,
                    format!("{f}: the selector is (), which matches nothing"),
                )
            })?;
        let mut reqs: Vec<&Requirement> = reqs.iter().collect();
        reqs.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(reqs
            .iter()
            .map(|r| r.written())
            .collect::<Vec<_>>()
            .join(","))
    }

    /// The string syntax as a `LabelSelector` map, to put in a child's spec: equalities in
    /// `matchLabels`, the rest in `matchExpressions` (`!=` as `NotIn`). `>` and `<` have no
    /// such form.
    #[rhai_fn(return_raw)]
    pub fn parse(ctx: NativeCallContext, selector: &str) -> RhaiResult<Map> {
        let f = "labels::parse";
        let reqs = super::parse(selector).map_err(|m| {
            error(
                &ctx,
                format!("{f}: invalid selector {}: {m}", super::quoted(selector)),
            )
        })?;
        let mut match_labels = Map::new();
        let mut exprs = Array::new();
        for r in reqs {
            let operator = match r.op {
                Op::In if r.values.len() == 1 && !match_labels.contains_key(r.key.as_str()) => {
                    match_labels.insert(r.key.as_str().into(), r.values[0].clone().into());
                    continue;
                }
                Op::In => "In",
                Op::NotIn => "NotIn",
                Op::Exists => "Exists",
                Op::DoesNotExist => "DoesNotExist",
                Op::Gt | Op::Lt => {
                    return Err(error(
                        &ctx,
                        format!("{f}: {} has no LabelSelector form", r.written()),
                    ));
                }
            };
            let mut e = Map::new();
            e.insert("key".into(), r.key.into());
            e.insert("operator".into(), operator.into());
            if !r.values.is_empty() {
                let values: Array = r.values.into_iter().map(Dynamic::from).collect();
                e.insert("values".into(), values.into());
            }
            exprs.push(e.into());
        }
        let mut out = Map::new();
        if !match_labels.is_empty() {
            out.insert("matchLabels".into(), match_labels.into());
        }
        if !exprs.is_empty() {
            out.insert("matchExpressions".into(), exprs.into());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{Limits, engine};

    fn eval(src: &str) -> Result<serde_json::Value, String> {
        engine(&Limits::default())
            .eval::<Dynamic>(src)
            .map(|v| crate::script::convert::to_json(&v).unwrap())
            .map_err(|e| e.to_string().replacen("Runtime error: ", "", 1))
    }

    fn matches(labels: &str, selector: &str) -> bool {
        eval(&format!("labels::matches({labels}, {selector})"))
            .unwrap()
            .as_bool()
            .unwrap()
    }

    #[test]
    fn every_operator_of_the_string_syntax_matches_as_kubernetes_does() {
        let l = r#"#{ app: "x", tier: "a", "example.com/zone": "eu", n: "5" }"#;
        for (sel, want) in [
            ("", true),
            ("app=x", true),
            ("app==x", true),
            ("app = x", true),
            ("app!=x", false),
            ("app!=y", true),
            ("missing!=y", true),
            ("tier in (a,b)", true),
            ("tier in (b, c)", false),
            ("missing in (a)", false),
            ("tier notin (b)", true),
            ("tier notin (a,b)", false),
            ("missing notin (a)", true),
            ("app", true),
            ("missing", false),
            ("!legacy", true),
            ("!app", false),
            ("example.com/zone=eu", true),
            ("n>4", true),
            ("n<5", false),
            ("app>1", false),
            ("app=x,tier in (a,b),!legacy", true),
            ("app=x,tier in (a,b),legacy", false),
            ("app=", false),
        ] {
            assert_eq!(matches(l, &format!("{sel:?}")), want, "{sel}");
        }
        assert!(matches(r#"#{ app: "" }"#, r#""app=""#));
        assert!(matches("()", r#""!app""#), "no labels at all");
        assert!(
            !matches("#{}", "()"),
            "a missing LabelSelector matches nothing"
        );
    }

    #[test]
    fn label_selector_maps_match_like_the_string_syntax() {
        let l = r#"#{ app: "x", tier: "a" }"#;
        for (sel, want) in [
            ("#{}", true),
            (r#"#{ matchLabels: #{ app: "x" } }"#, true),
            (r#"#{ matchLabels: #{ app: "y" } }"#, false),
            (
                r#"#{ matchExpressions: [#{ key: "tier", operator: "In", values: ["a", "b"] }] }"#,
                true,
            ),
            (
                r#"#{ matchExpressions: [#{ key: "tier", operator: "NotIn", values: ["a"] }] }"#,
                false,
            ),
            (
                r#"#{ matchLabels: #{ app: "x" }, matchExpressions: [#{ key: "legacy", operator: "DoesNotExist" }, #{ key: "tier", operator: "Exists" }] }"#,
                true,
            ),
            ("#{ matchLabels: (), matchExpressions: () }", true),
        ] {
            assert_eq!(matches(l, sel), want, "{sel}");
        }
    }

    #[test]
    fn bad_selectors_are_errors_that_say_what_is_wrong() {
        for (sel, why) in [
            (r#""a in (b""#, "found the end in the values of a"),
            (r#""a b""#, "found \"b\" after a, expected"),
            (r#""a in ()""#, "a: in and notin need at least one value"),
            (
                r#""a in b""#,
                "found \"b\", expected '(' after a's operator",
            ),
            (r#""=a""#, "found '=', expected a label key"),
            (r#""a=b,""#, "found the end, expected a label key"),
            (r#""a=b c""#, "found \"c\" after a requirement"),
            (r#""a>b""#, "a: > and < compare with one whole number"),
            (r#""-a=b""#, "\"-a\" is not a label key"),
            (r#""Example.com/a=b""#, "is not a label key"),
            (r#""a=-b""#, "\"-b\" is not a label value"),
            (
                r#"#{ matchLabel: #{} }"#,
                "unknown key \"matchLabel\" in a LabelSelector",
            ),
            (
                r#"#{ matchExpressions: [#{ key: "a", operator: "in", values: ["b"] }] }"#,
                "matchExpressions[0]: unknown operator \"in\"",
            ),
            (
                r#"#{ matchExpressions: [#{ key: "a", operator: "Exists", values: ["b"] }] }"#,
                "take no values",
            ),
            (
                r#"#{ matchLabels: #{ a: 1 } }"#,
                "matchLabels.a is i64, not text",
            ),
            (
                "42",
                "a selector is text like \"app=web\" or a LabelSelector map, not i64",
            ),
        ] {
            let err = eval(&format!("labels::matches(#{{}}, {sel})")).unwrap_err();
            assert!(err.starts_with("labels::matches: "), "{sel}: {err}");
            assert!(err.contains(why), "{sel}: {err}");
        }
        let err = eval(r#"labels::matches(#{ a: 1 }, "a=1")"#).unwrap_err();
        assert!(err.contains("the label a is i64, not text"), "{err}");
        let err = eval(r#"labels::matches("a=1", "a=1")"#).unwrap_err();
        assert!(err.contains("the labels are a map, not string"), "{err}");
        assert_eq!(
            eval(r#"[labels::is_valid("a in (b"), labels::is_valid("a,b!=c")]"#).unwrap(),
            serde_json::json!([false, true])
        );
    }

    #[test]
    fn selectors_convert_between_the_two_forms() {
        assert_eq!(
            eval(
                r#"labels::stringify(#{ matchLabels: #{ tier: "a", app: "x" },
                    matchExpressions: [#{ key: "env", operator: "NotIn", values: ["prod", "dev"] },
                                       #{ key: "old", operator: "DoesNotExist" }] })"#
            )
            .unwrap(),
            "app=x,env notin (dev,prod),!old,tier=a"
        );
        assert_eq!(
            eval(r#"labels::parse("app=x, tier in (b,a), !old, zone")"#).unwrap(),
            serde_json::json!({
                "matchLabels": { "app": "x" },
                "matchExpressions": [
                    { "key": "tier", "operator": "In", "values": ["a", "b"] },
                    { "key": "old", "operator": "DoesNotExist" },
                    { "key": "zone", "operator": "Exists" },
                ],
            })
        );
        let err = eval(r#"labels::parse("n>1")"#).unwrap_err();
        assert!(
            err.starts_with("labels::parse: n>1 has no LabelSelector form"),
            "{err}"
        );
        assert_eq!(
            eval(r#"labels::parse("a!=b")"#).unwrap(),
            serde_json::json!({ "matchExpressions": [
                { "key": "a", "operator": "NotIn", "values": ["b"] }] })
        );
    }

    #[test]
    fn in_and_notin_are_keys_where_a_key_stands() {
        assert_eq!(parse("in=a").unwrap()[0].key, "in");
        assert_eq!(parse("!notin").unwrap()[0].op, Op::DoesNotExist);
    }
}
