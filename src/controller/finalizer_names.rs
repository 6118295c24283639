//! The names of khai's finalizers, decided from the config alone (no I/O): one for each
//! controller of a kind that needs one. The first `[[controller]]` of a kind (or, with none, the
//! controller of its handlers) keeps the finalizer `khai.dev/<operator>` that a single controller
//! always had; the others are `<controller>.khai.dev/<operator>`. A finalizer of the operator's
//! that no controller of the kind uses any more is stale. [`super::finalizers`] adds and removes
//! them on objects.

use crate::watch::Kind;
use kube::ResourceExt;
use kube::api::DynamicObject;

/// The finalizers of one controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    /// The finalizer it adds and removes.
    pub own: String,
    /// Every finalizer the controllers of its kind use (its own included).
    pub kind: Vec<String>,
    /// Whether it removes the operator's stale finalizers from the objects of its kind.
    pub sweeps: bool,
}

impl Names {
    /// The finalizers of `operator` on `obj` that no controller of the kind uses.
    pub(crate) fn stale(&self, operator: &str, obj: &DynamicObject) -> Vec<String> {
        if !self.sweeps {
            return Vec::new();
        }
        obj.finalizers()
            .iter()
            .filter(|f| is_khai(f, operator) && !self.kind.contains(f))
            .cloned()
            .collect()
    }
}

/// What tells kinds apart for finalizers: the group and the kind (not the version).
pub(crate) fn key(kind: &Kind) -> (&str, &str) {
    (&kind.resource.group, &kind.resource.kind)
}

/// The finalizer a single controller of a kind uses.
pub(crate) fn base(operator: &str) -> String {
    format!("khai.dev/{operator}")
}

/// Whether `finalizer` is one of `operator`'s: `khai.dev/<operator>` or
/// `<controller>.khai.dev/<operator>`.
pub(crate) fn is_khai(finalizer: &str, operator: &str) -> bool {
    finalizer.rsplit_once('/').is_some_and(|(prefix, name)| {
        name == operator && (prefix == "khai.dev" || prefix.ends_with(".khai.dev"))
    })
}

/// One controller of the config, as naming its finalizer needs it.
pub(crate) struct Consumer<'a, K> {
    pub kind: &'a K,
    /// Its name (`display_name`).
    pub name: &'a str,
    /// Whether it runs only a kind's handlers, timers and daemons (khai made it up).
    pub handlers_only: bool,
}

/// The finalizers of each of `consumers`, in order (the config's controllers first).
pub(crate) fn assign<K: PartialEq>(operator: &str, consumers: &[Consumer<'_, K>]) -> Vec<Names> {
    let mut own: Vec<String> = Vec::with_capacity(consumers.len());
    for (i, c) in consumers.iter().enumerate() {
        let first = consumers.iter().position(|o| o.kind == c.kind) == Some(i);
        if first {
            own.push(base(operator));
            continue;
        }
        let mut label = dns_label(c.name);
        let taken = |l: &str| own.iter().any(|o| *o == format!("{l}.khai.dev/{operator}"));
        if taken(&label) {
            label = format!("{}-{i}", label.chars().take(56).collect::<String>());
        }
        own.push(format!("{label}.khai.dev/{operator}"));
    }
    consumers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let same: Vec<usize> = (0..consumers.len())
                .filter(|&j| consumers[j].kind == c.kind)
                .collect();
            // The controller of the handlers sees every object of the kind (no filter); with
            // none, the first controller of the kind does it.
            let sweeper = same
                .iter()
                .copied()
                .find(|&j| consumers[j].handlers_only)
                .or_else(|| same.first().copied());
            Names {
                own: own[i].clone(),
                kind: same.iter().map(|&j| own[j].clone()).collect(),
                sweeps: sweeper == Some(i),
            }
        })
        .collect()
}

/// `name` as a DNS label: lower case letters, digits and `-`, at most 63 characters, starting
/// and ending with a letter or digit.
fn dns_label(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9') => c,
            _ => '-',
        })
        .take(63)
        .collect();
    let trimmed = mapped.trim_matches('-');
    if trimmed.is_empty() {
        "controller".into()
    } else {
        trimmed.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer<'a>(
        kind: &'a &'static str,
        name: &'a str,
        handlers_only: bool,
    ) -> Consumer<'a, &'static str> {
        Consumer {
            kind,
            name,
            handlers_only,
        }
    }

    #[test]
    fn a_lone_controller_keeps_the_operators_finalizer() {
        let names = assign("op", &[consumer(&"Widget", "widget", false)]);
        assert_eq!(
            names,
            vec![Names {
                own: "khai.dev/op".into(),
                kind: vec!["khai.dev/op".into()],
                sweeps: true,
            }]
        );
    }

    #[test]
    fn controllers_of_one_kind_get_a_finalizer_each() {
        let names = assign(
            "op",
            &[
                consumer(&"Widget", "big", false),
                consumer(&"Gadget", "gadget", false),
                consumer(&"Widget", "Small_Ones", false),
                consumer(&"Widget", "widget-handlers", true),
            ],
        );
        let own: Vec<&str> = names.iter().map(|n| n.own.as_str()).collect();
        assert_eq!(
            own,
            [
                "khai.dev/op",
                "khai.dev/op",
                "small-ones.khai.dev/op",
                "widget-handlers.khai.dev/op"
            ]
        );
        assert_eq!(names[0].kind, names[3].kind);
        assert_eq!(names[0].kind.len(), 3);
        assert_eq!(names[1].kind, ["khai.dev/op"]);
        let sweeps: Vec<bool> = names.iter().map(|n| n.sweeps).collect();
        assert_eq!(
            sweeps,
            [false, true, false, true],
            "the handlers' controller sweeps"
        );
        for n in &names {
            assert!(is_khai(&n.own, "op"), "{}", n.own);
        }
    }

    #[test]
    fn two_controllers_of_one_name_do_not_share_a_finalizer() {
        let names = assign(
            "op",
            &[
                consumer(&"Widget", "w", false),
                consumer(&"Widget", "x", false),
                consumer(&"Widget", "x", false),
            ],
        );
        assert_eq!(names[1].own, "x.khai.dev/op");
        assert_eq!(names[2].own, "x-2.khai.dev/op");
    }

    #[test]
    fn only_the_operators_own_finalizers_are_khais() {
        assert!(is_khai("khai.dev/op", "op"));
        assert!(is_khai("a.khai.dev/op", "op"));
        assert!(!is_khai("khai.dev/op.b", "op"));
        assert!(!is_khai("a.khai.dev/other", "op"));
        assert!(!is_khai("notkhai.dev/op", "op"));
        assert!(!is_khai("kubernetes", "op"));
    }

    #[test]
    fn a_finalizer_no_controller_of_the_kind_uses_is_stale() {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "x", "finalizers": [
                "khai.dev/op", "gone.khai.dev/op", "other.io/keep", "khai.dev/other"
            ] },
        }))
        .unwrap();
        let names = assign("op", &[consumer(&"ConfigMap", "c", false)]);
        assert_eq!(names[0].stale("op", &obj), ["gone.khai.dev/op"]);
        let quiet = Names {
            sweeps: false,
            ..names[0].clone()
        };
        assert!(quiet.stale("op", &obj).is_empty());
    }
}
