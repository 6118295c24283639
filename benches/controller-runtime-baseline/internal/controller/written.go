package controller

import "sync"

// Written remembers what this process last wrote and over which cached resourceVersion, so a
// reconcile working from a stale cache does not send the same write again.
//
// Right after a write, the next reconcile is often triggered by the *other* object's watch event
// (the ConfigMap's, say) before the written object's own event has reached the informer cache.
// The cache then still shows the old state and the compare-before-write would repeat the write
// (a no-op patch, or a conflict). The kube-rs baseline (benches/kube-rs-baseline/src/memo.rs) and
// khai (`already_written` in src/apply) keep the same memo, so every contender counts only real
// writes. controller-runtime's opt-in EnableReadYourWritesConsistency would do the same job by
// making reads wait for the cache instead.
type Written struct {
	mu sync.Mutex
	m  map[string]writtenEntry
}

type writtenEntry struct {
	seenRV string
	what   string
}

// Already reports whether what was written for key while the cache showed seenRV, and the cache
// still shows it. It forgets the entry once the cache has moved on: from then on the cache itself
// is the truth.
func (w *Written) Already(key, seenRV, what string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	switch {
	case !ok:
		return false
	case e.seenRV == seenRV:
		return e.what == what
	default:
		delete(w.m, key)
		return false
	}
}

// Remember records that what was written for key while the cache showed seenRV.
func (w *Written) Remember(key, seenRV, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]writtenEntry{}
	}
	w.m[key] = writtenEntry{seenRV: seenRV, what: what}
}
