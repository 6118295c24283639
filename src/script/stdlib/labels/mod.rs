//! `labels::`: Kubernetes label selectors, in the string syntax (`"app=x,tier in (a,b),!legacy"`)
//! or as a `LabelSelector` map (`#{ matchLabels, matchExpressions }`), read and matched as
//! apimachinery's `labels.Parse` and `LabelSelectorAsSelector` do.
//!
//! The string syntax: requirements joined by commas, each `key=value`, `key==value`,
//! `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` (exists), `!key` (does not exist),
//! `key>1`, `key<1` (integer comparison). Keys are qualified names (`app`,
//! `example.com/tier`), values label values (at most 63 characters). An empty selector
//! matches everything; a missing `LabelSelector` (`()`) matches nothing, as in Kubernetes.

mod syntax;

use super::quoted;
use rhai::{Array, Dynamic, ImmutableString, Map};
use syntax::{Op, Requirement, parse};

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
    use crate::script::eval_json as eval;

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
}
