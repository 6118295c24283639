//! `[[handler]]` entries that parse but cannot work: a field handler without its field, and two
//! handlers of one kind that would record their progress under one id.

use super::{Report, Seg};
use crate::config::handlers::{Handler, On};
use crate::config::model::Model;

pub(super) fn check(model: &Model, report: &mut Report<'_>) {
    schedules(model, report);
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

/// `[[schedule]]` entries: a unique name, and exactly one of a cron expression that parses and
/// an interval.
fn schedules(model: &Model, report: &mut Report<'_>) {
    use std::str::FromStr as _;
    for (i, s) in model.schedules.iter().enumerate() {
        let at = |k| [Seg::Key("schedule"), Seg::Index(i), Seg::Key(k)];
        if let Some(j) = model.schedules[..i].iter().position(|o| o.name == s.name) {
            report(
                &at("name"),
                format!(
                    "schedule[{j}] is named {:?} too; names must be unique",
                    s.name
                ),
            );
        }
        match (&s.cron, &s.interval) {
            (Some(_), Some(_)) => report(&at("interval"), "give cron or interval, not both".into()),
            (None, None) => report(
                &at("name"),
                "needs cron = \"<expression>\" or interval = \"<duration>\"".into(),
            ),
            (Some(cron), None) => {
                if let Err(e) = croner::Cron::from_str(cron) {
                    report(
                        &at("cron"),
                        format!(
                            "{cron:?} is not a cron expression: {e} (five fields, minute hour \
                             day-of-month month day-of-week, or six with seconds first)"
                        ),
                    );
                }
            }
            (None, Some(d)) if d.get().is_zero() => {
                report(&at("interval"), "must be longer than 0s".into());
            }
            (None, Some(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    fn check(src: &str) -> String {
        let file = std::path::Path::new("operator.toml");
        let model = crate::config::parse(file, src).unwrap();
        super::super::validate(&model, file, src)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    }

    #[test]
    fn a_schedule_needs_a_cron_expression_that_parses_or_an_interval() {
        let schedule = |clock: &str| {
            format!("[[schedule]]\nname = \"s\"\nscript = \"s.rhai\"\nfunction = \"f\"\n{clock}")
        };
        assert_eq!(check(&schedule("cron = \"*/5 * * * *\"\n")), "");
        assert_eq!(check(&schedule("interval = \"30s\"\n")), "");
        let bad = check(&schedule("cron = \"61 * * * *\"\n"));
        assert!(
            bad.starts_with(
                "operator.toml:5:8: schedule[0].cron: \"61 * * * *\" is not a cron expression: "
            ),
            "{bad}"
        );
        assert_eq!(
            check(&schedule("")),
            "operator.toml:2:8: schedule[0].name: needs cron = \"<expression>\" or interval = \"<duration>\""
        );
        assert_eq!(
            check(&schedule("cron = \"@hourly\"\ninterval = \"1s\"\n")),
            "operator.toml:6:12: schedule[0].interval: give cron or interval, not both"
        );
        let twice = format!(
            "{}\n{}",
            schedule("interval = \"1s\"\n"),
            schedule("interval = \"2s\"\n")
        );
        assert!(check(&twice).contains("schedule[1].name: schedule[0] is named \"s\" too"));
    }
}
