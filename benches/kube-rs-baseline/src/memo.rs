//! What this process wrote last, so a reconcile working from a stale cache does not repeat it.
//!
//! Right after a write, the next reconcile is often triggered by the *other* object's watch event
//! (the ConfigMap's, say) before the written object's own event has reached its store. The cache
//! then still shows the old state and the change-only check would send the same write again.
//! khai keeps the same memo (`already_written` in src/apply), so both sides count only real
//! writes.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Per key: the resourceVersion the cache showed when we wrote, and a fingerprint of what we wrote.
#[derive(Debug, Default)]
pub struct Written(Mutex<HashMap<String, (String, String)>>);

impl Written {
    /// Whether `what` was written for `key` while the cache showed `seen_rv`, and the cache
    /// still shows it. Forgets the entry once the cache has moved on: from then on the cache
    /// itself is the truth.
    pub fn already(&self, key: &str, seen_rv: &str, what: &str) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get(key) {
            Some((rv, w)) if rv == seen_rv => w == what,
            Some(_) => {
                map.remove(key);
                false
            }
            None => false,
        }
    }

    pub fn remember(&self, key: String, seen_rv: String, what: String) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(key, (seen_rv, what));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_a_repeat_only_while_the_cache_is_stale() {
        let w = Written::default();
        assert!(!w.already("k", "1", "a"));
        w.remember("k".into(), "1".into(), "a".into());
        assert!(w.already("k", "1", "a"), "same stale cache, same write");
        assert!(!w.already("k", "1", "b"), "different write");
        assert!(!w.already("k", "2", "a"), "cache moved on");
        assert!(!w.already("k", "1", "a"), "entry forgotten");
    }
}
