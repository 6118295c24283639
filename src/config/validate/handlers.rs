//! `[[handler]]` entries that parse but cannot work: a field handler without its field, and two
//! handlers of one kind that would record their progress under one id.

use super::{Report, Seg};
use crate::config::handlers::{Handler, On};
use crate::config::model::Model;

pub(super) fn check(model: &Model, report: &mut Report<'_>) {
    for (i, h) in model.handlers.iter().enumerate() {
        let at = |k| [Seg::Key("handler"), Seg::Index(i), Seg::Key(k)];
        if h.on == On::Field && h.field.is_none() {
            report(
                &at("on"),
                "on = \"field\" needs the field to watch: add field = \"spec.<name>\" (a dotted \
                 path), or use on = \"update\" for any change"
                    .into(),
            );
        }
        let earlier = model.handlers[..i]
            .iter()
            .position(|o| o.for_kind.compatible(&h.for_kind) && o.id() == h.id() && together(o, h));
        if let Some(j) = earlier {
            let key = if h.id.is_some() {
                "id"
            } else if h.function.is_some() {
                "function"
            } else {
                "on"
            };
            report(
                &at(key),
                format!(
                    "handler[{j}] for {} records its progress under the same id {:?}, and both can \
                     run for one change: the second would be skipped as already done; give one \
                     of them its own id = \"...\"",
                    h.for_kind,
                    h.id()
                ),
            );
        }
    }
}

/// The changes a handler records progress for: create, update, none (a resume without a
/// change), delete.
fn changes(h: &Handler) -> &'static [&'static str] {
    match h.on {
        On::Create => &["create"],
        On::Update => &["update"],
        On::Field => &["create", "update"],
        On::Resume => &["update", "none"],
        On::Delete if h.optional => &[],
        On::Delete => &["delete"],
        On::Event => &[],
    }
}

/// Whether `a` and `b` can both run for one change (and so share its progress).
fn together(a: &Handler, b: &Handler) -> bool {
    changes(a).iter().any(|c| changes(b).contains(c))
}
