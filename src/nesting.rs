//! How deep script values may nest, checked without recursing past the limit, and dropping a
//! deep value without recursion.
//!
//! A script can build a value nested hundreds of thousands of levels deep in a plain loop
//! (`x = [x]`). Every recursive walk of such a value (Rhai's deserializer, serde's serializer,
//! hashing, comparing, dropping) takes a stack frame or more per level, and a stack overflow
//! aborts the whole process, not just the call. So a value that leaves a script call (a result,
//! an argument of `k8s::` or `http::request`, a value kept in `ctx.memo`) is [`check`]ed first:
//! one nested deeper than [`MAX_DEPTH`] is refused with where it goes too deep, and
//! [`dismantle`]d instead of dropped.

use rhai::{Array, Dynamic, Map};

/// How many arrays and maps deep a value leaving a script may nest. The API server's JSON
/// reader and khai's own (serde_json's) stop at 128 levels, and a child sits two levels into a
/// result (`children[i]`), so no result khai accepts makes an object it could not read back.
pub const MAX_DEPTH: usize = 120;

/// How many segments of a too-deep value's path its error shows: the outermost say where, the
/// hundred after them say nothing more.
const SHOWN_SEGMENTS: usize = 6;

/// A value nested deeper than [`MAX_DEPTH`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} nests more than {MAX_DEPTH} arrays and maps deep")]
pub struct TooDeep {
    /// Where the value that nests too deep starts: its first few segments (`.status.a[0]…`),
    /// or `the value` itself.
    pub path: String,
}

/// Whether `v` nests at most [`MAX_DEPTH`] arrays and maps deep; the walk stops there.
pub fn check(v: &Dynamic) -> Result<(), TooDeep> {
    let Some(mut path) = too_deep(v, MAX_DEPTH) else {
        return Ok(());
    };
    if path.is_empty() {
        return Err(TooDeep {
            path: "the value".into(),
        });
    }
    let hidden = path.len().saturating_sub(SHOWN_SEGMENTS);
    path.drain(..hidden);
    path.reverse();
    let mut path = path.concat();
    if hidden > 0 {
        path.push('…');
    }
    Err(TooDeep { path })
}

/// The way to the first array or map nested more than `left` levels below `v`, innermost
/// segment first; recursion stops at `left`.
fn too_deep(v: &Dynamic, left: usize) -> Option<Vec<String>> {
    if let Some(fields) = v.read_lock::<Map>() {
        if left == 0 {
            return Some(Vec::new());
        }
        for (k, item) in fields.iter() {
            if let Some(mut path) = too_deep(item, left - 1) {
                path.push(format!(".{k}"));
                return Some(path);
            }
        }
    } else if let Some(items) = v.read_lock::<Array>() {
        if left == 0 {
            return Some(Vec::new());
        }
        for (i, item) in items.iter().enumerate() {
            if let Some(mut path) = too_deep(item, left - 1) {
                path.push(format!("[{i}]"));
                return Some(path);
            }
        }
    }
    None
}

/// Drops `v` without recursion, however deep it nests: dropping a Rhai value drops what it
/// holds first, one stack frame or more per level.
pub(crate) fn dismantle(v: Dynamic) {
    let mut pending = vec![v];
    while let Some(mut v) = pending.pop() {
        if let Some(mut items) = v.write_lock::<Array>() {
            pending.append(&mut items);
        } else if let Some(mut fields) = v.write_lock::<Map>() {
            pending.extend(std::mem::take(&mut *fields).into_values());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `depth` single-key maps, built without recursion.
    fn map_chain(depth: usize) -> Dynamic {
        let mut v = Dynamic::UNIT;
        for _ in 0..depth {
            let mut m = Map::new();
            m.insert("x".into(), v);
            v = Dynamic::from_map(m);
        }
        v
    }

    #[test]
    fn a_value_up_to_the_limit_passes_and_one_level_more_is_named() {
        let ok = map_chain(MAX_DEPTH);
        assert_eq!(check(&ok), Ok(()));
        let deeper = map_chain(MAX_DEPTH + 1);
        let err = check(&deeper).unwrap_err();
        assert_eq!(err.path, ".x.x.x.x.x.x…");
        dismantle(ok);
        dismantle(deeper);
    }

    #[test]
    fn dismantling_drops_a_chain_far_deeper_than_any_stack() {
        let v = map_chain(1_000_000);
        let err = check(&v);
        dismantle(v);
        assert!(err.is_err());
    }
}
