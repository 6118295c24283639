//! A path to a field of the config, as diagnostics name and locate it: `controller[0].for`.

/// One segment of a field path.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

/// `base` followed by `more`.
pub(crate) fn join<'a>(base: &[Seg<'a>], more: &[Seg<'a>]) -> Vec<Seg<'a>> {
    base.iter().chain(more).copied().collect()
}
