//! Which of two resourceVersions of one resource is the newer.
//!
//! Kubernetes made them comparable in v1.35 (KEP-5504, "Comparable Resource Version"): a
//! resourceVersion is a positive decimal integer without leading zeros, and of two versions of
//! objects of the same resource, the larger is the later write. client-go's
//! `resourceversion.CompareResourceVersion` is the reference; the API servers before v1.35 that
//! khai supports (etcd3 storage) hand out the same numbers, they just did not promise it. A
//! version outside that form (an aggregated API with its own storage, say) compares with
//! nothing, and callers fall back to equality, the only comparison older clients relied on.

use std::cmp::Ordering;

/// How `a` stands to `b`, both resourceVersions of the same resource; `None` when either is not
/// a positive integer in canonical form.
pub fn order(a: &str, b: &str) -> Option<Ordering> {
    (canonical(a) && canonical(b)).then(|| numeric(a, b))
}

/// The newest of `versions` that compare (all of them in canonical form), if any.
pub fn newest<'a>(versions: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    versions
        .into_iter()
        .filter(|v| canonical(v))
        .max_by(|a, b| numeric(a, b))
}

/// Two canonical versions compared as the integers they spell, of any length.
fn numeric(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// Whether `rv` is a positive decimal integer without leading zeros.
fn canonical(rv: &str) -> bool {
    let b = rv.as_bytes();
    b.first().is_some_and(|d| (b'1'..=b'9').contains(d)) && b.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_integers_of_any_length() {
        assert_eq!(order("9", "10"), Some(Ordering::Less));
        assert_eq!(order("10", "9"), Some(Ordering::Greater));
        assert_eq!(order("123", "123"), Some(Ordering::Equal));
        assert_eq!(order("123", "124"), Some(Ordering::Less));
        let huge = "1".repeat(40);
        assert_eq!(order(&huge, "99"), Some(Ordering::Greater), "no overflow");
    }

    #[test]
    fn the_newest_is_the_largest_of_those_that_compare() {
        assert_eq!(newest(["9", "", "12", "abc", "11"]), Some("12"));
        assert_eq!(newest(["", "x"]), None);
    }

    #[test]
    fn anything_else_compares_with_nothing() {
        for odd in ["", "0", "07", "12a", "-1", " 1", "1.0"] {
            assert_eq!(order(odd, "5"), None, "{odd:?}");
            assert_eq!(order("5", odd), None, "{odd:?}");
        }
    }
}
