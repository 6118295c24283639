//! `semver::`: semantic versions (`"1.2.3"`, `"v1.28.0-rc.1"`), ordered by SemVer precedence,
//! and requirements in Cargo's syntax (`">=1.2, <2"`, `"^1.4"`, `"~1.2.3"`, `"1.*"`).
//!
//! A leading `v` is accepted, as Kubernetes and most images write versions.

use super::{RhaiResult, error, quoted};
use ::semver::{Version, VersionReq};
use rhai::NativeCallContext;

/// Parses a version, with or without a leading `v`.
fn parse(ctx: &NativeCallContext, function: &str, text: &str) -> RhaiResult<Version> {
    let bare = text.trim();
    let bare = bare.strip_prefix(['v', 'V']).unwrap_or(bare);
    Version::parse(bare).map_err(|e| {
        error(
            ctx,
            format!(
                "{function}: {} is not a semantic version like \"1.2.3\": {e}",
                quoted(text)
            ),
        )
    })
}

// `export_module` registers a module's `pub` functions only; the module stays private to the
// standard library.
#[allow(unreachable_pub)]
#[rhai::export_module]
pub mod api {
    use super::{RhaiResult, VersionReq, error, quoted};
    use rhai::{INT, Map, NativeCallContext};

    /// `#{ major, minor, patch, pre, build }` of a version (`pre` and `build` are `""` when
    /// absent).
    #[rhai_fn(return_raw)]
    pub fn parse(ctx: NativeCallContext, version: &str) -> RhaiResult<Map> {
        let v = super::parse(&ctx, "semver::parse", version)?;
        let number = |n: u64| {
            INT::try_from(n).map_err(|_| {
                error(
                    &ctx,
                    format!("semver::parse: {} has a number too large", quoted(version)),
                )
            })
        };
        let mut m = Map::new();
        m.insert("major".into(), number(v.major)?.into());
        m.insert("minor".into(), number(v.minor)?.into());
        m.insert("patch".into(), number(v.patch)?.into());
        m.insert("pre".into(), v.pre.as_str().into());
        m.insert("build".into(), v.build.as_str().into());
        Ok(m)
    }

    /// Whether `version` is a semantic version.
    pub fn is_valid(version: &str) -> bool {
        let bare = version.trim();
        ::semver::Version::parse(bare.strip_prefix(['v', 'V']).unwrap_or(bare)).is_ok()
    }

    /// -1, 0 or 1 as `a` precedes, equals or follows `b` (`1.2.3-rc.1` precedes `1.2.3`; build
    /// metadata is ignored).
    #[rhai_fn(return_raw)]
    pub fn compare(ctx: NativeCallContext, a: &str, b: &str) -> RhaiResult<INT> {
        let a = super::parse(&ctx, "semver::compare", a)?;
        let b = super::parse(&ctx, "semver::compare", b)?;
        Ok(super::super::sign(a.cmp_precedence(&b)))
    }

    /// Whether `version` meets `requirement`, in Cargo's syntax: comparators joined by commas
    /// (`">=1.2, <2"`), a bare version meaning `^` (compatible). A pre-release only matches a
    /// comparator that names a pre-release of the same `major.minor.patch`.
    #[rhai_fn(return_raw)]
    pub fn matches(ctx: NativeCallContext, version: &str, requirement: &str) -> RhaiResult<bool> {
        let v = super::parse(&ctx, "semver::matches", version)?;
        let req = VersionReq::parse(requirement).map_err(|e| {
            error(
                &ctx,
                format!(
                    "semver::matches: {} is not a version requirement like \">=1.2, <2\": {e}",
                    quoted(requirement)
                ),
            )
        })?;
        Ok(req.matches(&v))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::eval_json as eval;

    #[test]
    fn versions_parse_with_or_without_a_v() {
        assert_eq!(
            eval(r#"semver::parse("v1.28.3-rc.1+build.5")"#).unwrap(),
            serde_json::json!({ "major": 1, "minor": 28, "patch": 3, "pre": "rc.1",
                "build": "build.5" })
        );
        assert_eq!(
            eval(r#"[semver::is_valid("1.2"), semver::is_valid("V1.2.3")]"#).unwrap(),
            serde_json::json!([false, true])
        );
        let err = eval(r#"semver::parse("1.2")"#).unwrap_err();
        assert!(
            err.starts_with("semver::parse: \"1.2\" is not a semantic version like \"1.2.3\": "),
            "{err}"
        );
    }

    #[test]
    fn precedence_orders_numbers_numerically_and_pre_releases_first() {
        assert_eq!(
            eval(
                r#"[semver::compare("1.2.3", "1.10.0"), semver::compare("1.2.3", "1.2.3-rc.1"),
                    semver::compare("1.2.3+a", "1.2.3+b"), semver::compare("1.0.0-alpha.2", "1.0.0-alpha.10")]"#
            )
            .unwrap(),
            serde_json::json!([-1, 1, 0, -1])
        );
    }

    #[test]
    fn requirements_follow_cargos_syntax() {
        assert_eq!(
            eval(
                r#"[semver::matches("1.4.0", ">=1.2, <2"), semver::matches("2.0.0", ">=1.2, <2"),
                    semver::matches("1.9.9", "^1.4"), semver::matches("1.3.0", "~1.2"),
                    semver::matches("1.2.7", "1.2.*"), semver::matches("2.0.0-rc.1", ">=1.2")]"#
            )
            .unwrap(),
            serde_json::json!([true, false, true, false, true, false])
        );
        let err = eval(r#"semver::matches("1.0.0", ">=> 1")"#).unwrap_err();
        assert!(
            err.starts_with("semver::matches: \">=> 1\" is not a version requirement"),
            "{err}"
        );
    }
}
