//! Places a field path on its line in block-style YAML, for diagnostics found after parsing.
//!
//! The YAML parser reports positions for syntax errors only; checks that run on the typed model
//! know a field path (`controller[0].for`) but not where it was written. This walks the text by
//! indentation, as a reader would: a key is found among the lines of its parent's block, a
//! sequence item by counting `- ` entries. Flow collections (`{ ... }`, `[ ... ]`) are not
//! entered; the path then resolves to the line of the nearest enclosing key, which is still the
//! line to look at.

use super::field_path::Seg;

/// One line of the document as seen inside a block: its number, indentation and text.
#[derive(Clone, Copy)]
struct Line<'a> {
    number: usize,
    indent: usize,
    text: &'a str,
}

/// The 1-based (line, column) of `path`, or of the deepest part of it that was found.
pub(super) fn locate(src: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let mut block: Vec<Line> = src
        .lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let text = raw.trim_start();
            let significant = !text.is_empty() && !text.starts_with('#') && text != "---";
            significant.then(|| Line {
                number: i + 1,
                indent: raw.len() - text.len(),
                text,
            })
        })
        .collect();
    let mut found = None;
    for seg in path {
        let Some(first) = block.first().copied() else {
            break;
        };
        let base = first.indent;
        let at = match seg {
            Seg::Key(k) => block
                .iter()
                .position(|l| l.indent == base && key_of(l.text) == Some(k)),
            Seg::Index(i) => block
                .iter()
                .enumerate()
                .filter(|(_, l)| l.indent == base && (l.text == "-" || l.text.starts_with("- ")))
                .nth(*i)
                .map(|(pos, _)| pos),
        };
        let Some(at) = at else { break };
        let line = block[at];
        found = Some((line.number, line.indent + 1));
        block = children(&block, at, seg);
    }
    found
}

/// The lines belonging to the entry at `at`: for a key, what follows it (inline or indented);
/// for a sequence item, the item's own text after `- ` plus its indented continuation.
fn children<'a>(block: &[Line<'a>], at: usize, seg: &Seg) -> Vec<Line<'a>> {
    let line = block[at];
    let rest = block[at + 1..]
        .iter()
        .take_while(|l| l.indent > line.indent)
        .copied();
    match seg {
        Seg::Key(_) => rest.collect(),
        Seg::Index(_) => {
            let inner = line.text.strip_prefix('-').unwrap_or(line.text);
            let trimmed = inner.trim_start();
            let indent = line.indent + 1 + (inner.len() - trimmed.len());
            let head = (!trimmed.is_empty()).then_some(Line {
                number: line.number,
                indent,
                text: trimmed,
            });
            head.into_iter().chain(rest).collect()
        }
    }
}

/// The key of a `key: value` or `key:` line, unquoted.
fn key_of(text: &str) -> Option<&str> {
    let (key, _) = text.split_once(':')?;
    let key = key.trim();
    Some(key.trim_matches(|c| c == '"' || c == '\''))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = "operator: { name: hello }\ncrd:\n  - group: examples.khai.dev\n    kind: Hello\n    spec:\n      message: { type: string }\ncontroller:\n  # the one loop\n  - for: Hello\n    script: s.rhai\n  -\n    for: Other\n";

    #[test]
    fn keys_and_items_resolve_to_their_lines() {
        let at = |p: &[Seg]| locate(SRC, p);
        assert_eq!(
            at(&[Seg::Key("controller"), Seg::Index(0), Seg::Key("for")]),
            Some((9, 5))
        );
        assert_eq!(
            at(&[Seg::Key("controller"), Seg::Index(0), Seg::Key("script")]),
            Some((10, 5))
        );
        assert_eq!(
            at(&[Seg::Key("controller"), Seg::Index(1), Seg::Key("for")]),
            Some((12, 5))
        );
        assert_eq!(
            at(&[
                Seg::Key("crd"),
                Seg::Index(0),
                Seg::Key("spec"),
                Seg::Key("message")
            ]),
            Some((6, 7))
        );
    }

    #[test]
    fn a_path_into_a_flow_map_stops_at_the_enclosing_key() {
        assert_eq!(
            locate(SRC, &[Seg::Key("operator"), Seg::Key("name")]),
            Some((1, 1))
        );
        assert_eq!(locate(SRC, &[Seg::Key("missing")]), None);
    }
}
