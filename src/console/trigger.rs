//! What triggered a reconcile, as the console shows it on each turn.
//!
//! The trigger streams name theirs when they queue an object (`crate::queue::Pending` keeps
//! them, a few bits per waiting object); a reconcile that starts with none queued was scheduled
//! by kube-runtime itself, at the end of the object's previous turn: a retry after a failure,
//! or the wake that turn asked for (a timer's or daemon's, or the script's `requeue_after`).

use serde::{Serialize, Serializer};

/// One cause of a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Trigger {
    /// The controller started and listed the object: at khai's start, or a reload replaced it.
    Start = 1,
    /// A watch event of the object itself.
    Parent = 1 << 1,
    /// A change of a child it owns.
    Child = 1 << 2,
    /// A change of a watched object mapped to it.
    Watched = 1 << 3,
    /// The controller's periodic resync.
    Resync = 1 << 4,
    /// The previous turn asked to run again (`requeue_after`, a handler's retry).
    Requeue = 1 << 5,
    /// A timer or daemon of the object was due.
    Timer = 1 << 6,
    /// The retry after a failed turn, with backoff.
    Backoff = 1 << 7,
}

const ALL: [Trigger; 8] = [
    Trigger::Start,
    Trigger::Parent,
    Trigger::Child,
    Trigger::Watched,
    Trigger::Resync,
    Trigger::Requeue,
    Trigger::Timer,
    Trigger::Backoff,
];

impl Trigger {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Parent => "parent",
            Trigger::Child => "child",
            Trigger::Watched => "watched",
            Trigger::Resync => "resync",
            Trigger::Requeue => "requeue",
            Trigger::Timer => "timer",
            Trigger::Backoff => "backoff",
        }
    }
}

/// The causes of one reconcile: every request merged into it while it waited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Triggers(u8);

impl Triggers {
    pub(crate) fn add(&mut self, t: Trigger) {
        self.0 |= t as u8;
    }

    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub(crate) fn contains(self, t: Trigger) -> bool {
        self.0 & t as u8 != 0
    }

    fn iter(self) -> impl Iterator<Item = Trigger> {
        ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

impl From<Trigger> for Triggers {
    fn from(t: Trigger) -> Self {
        Self(t as u8)
    }
}

/// The triggers of a turn as recorded: `start` named `reload` when the controller was started
/// by a reload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) triggers: Triggers,
    pub(crate) reloaded: bool,
}

impl Serialize for Named {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let reloaded = self.reloaded;
        s.collect_seq(self.triggers.iter().map(|t| match t {
            Trigger::Start if reloaded => "reload",
            t => t.name(),
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn merged_triggers_serialize_as_their_names_and_start_after_a_reload_as_reload() {
        let mut t = Triggers::from(Trigger::Child);
        t.add(Trigger::Parent);
        t.add(Trigger::Start);
        let named = |reloaded| {
            serde_json::to_string(&Named {
                triggers: t,
                reloaded,
            })
            .unwrap()
        };
        assert_eq!(named(false), r#"["start","parent","child"]"#);
        assert_eq!(named(true), r#"["reload","parent","child"]"#);
        assert!(Triggers::default().is_empty());
    }
}
