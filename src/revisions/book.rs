//! What the candidate revision does differently, kept while the daemon runs: which objects of
//! each controller diverge now (counted in `khai_candidate_divergent_objects`) and the latest
//! [`LATEST`] of them with their diffs, served on the metrics port.
//!
//! The divergent set holds keys of objects in the controllers' caches only (an object is
//! dropped when it converges or goes), so it is bounded by what the informers hold.

use crate::diff::{ObjectDiff, Verdict};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::sync::Mutex;

/// Divergent objects listed with their diffs, newest first; older ones are only counted.
pub(crate) const LATEST: usize = 100;

/// The divergences of every shadowed controller.
#[derive(Default)]
pub(crate) struct Book {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Per controller, the objects (`namespace/name`) whose last shadow run diverged.
    divergent: HashMap<String, HashSet<String>>,
    /// The latest divergent objects, oldest first.
    latest: VecDeque<Entry>,
}

/// One listed object; rendered when the page is asked for, not on the reconcile's path.
struct Entry {
    object: String,
    diff: ObjectDiff,
}

/// Whether a shadow run differs from the active revision: another plan, a failure, or no plan
/// where the active revision made one. Held calls alone are not a divergence.
fn diverges(d: &ObjectDiff) -> bool {
    match &d.verdict {
        Verdict::Planned(p) => {
            !(p.children.is_empty() && p.pruned.is_empty() && p.status.is_empty())
        }
        Verdict::Failed(_) | Verdict::Skipped(_) => true,
    }
}

fn object(d: &ObjectDiff) -> String {
    format!("{}/{}", d.namespace.as_deref().unwrap_or_default(), d.name)
}

impl Book {
    /// Records the outcome of one shadow run.
    pub(crate) fn record(&self, d: ObjectDiff) {
        let object = object(&d);
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.latest
            .retain(|e| !(e.diff.controller == d.controller && e.object == object));
        let set = s.divergent.entry(d.controller.clone()).or_default();
        if diverges(&d) {
            set.insert(object.clone());
            crate::metrics::candidate_divergent(&d.controller, set.len());
            s.latest.push_back(Entry { object, diff: d });
            if s.latest.len() > LATEST {
                s.latest.pop_front();
            }
        } else if set.remove(&object) {
            crate::metrics::candidate_divergent(&d.controller, set.len());
        }
    }

    /// The object of `d` is gone.
    pub(crate) fn forget(&self, d: &ObjectDiff) {
        let object = object(d);
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.latest
            .retain(|e| !(e.diff.controller == d.controller && e.object == object));
        if let Some(set) = s.divergent.get_mut(&d.controller)
            && set.remove(&object)
        {
            crate::metrics::candidate_divergent(&d.controller, set.len());
        }
    }

    /// The page `/candidate/divergent` serves: the latest divergent objects, newest first (as
    /// `khai diff` lists objects), and how many diverge per controller; as text or JSON.
    pub(crate) fn page(&self, text: bool) -> String {
        let Ok(s) = self.state.lock() else {
            return String::new();
        };
        let counts: serde_json::Map<String, Value> = s
            .divergent
            .iter()
            .map(|(c, set)| (c.clone(), json!(set.len())))
            .collect();
        let total: usize = s.divergent.values().map(HashSet::len).sum();
        if text {
            let mut out = String::new();
            for e in s.latest.iter().rev() {
                let before = out.len();
                e.diff.text(&mut out);
                if out.len() == before {
                    let _ = writeln!(
                        out,
                        "{} (controller {}): diverges",
                        e.object, e.diff.controller
                    );
                }
            }
            let _ = writeln!(
                out,
                "{total} objects diverge under the candidate ({} listed)",
                s.latest.len()
            );
            return out;
        }
        let objects: Vec<Value> = s.latest.iter().rev().map(|e| e.diff.json()).collect();
        let doc = json!({ "objects": objects, "divergent": counts, "listed": LATEST });
        serde_json::to_string_pretty(&doc).unwrap_or_else(|_| doc.to_string()) + "\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::{Preview, StatusChange};
    use kube::api::DynamicObject;

    fn outcome(name: &str, diverging: bool) -> ObjectDiff {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Cache",
            "metadata": { "name": name, "namespace": "ns" },
        }))
        .unwrap();
        let mut d = ObjectDiff::of("cache", &obj);
        let mut p = Preview::default();
        if diverging {
            p.status.push(StatusChange {
                field: "phase".into(),
                before: Some(json!("Ready")),
                after: json!("Big"),
            });
        }
        d.verdict = Verdict::Planned(p);
        d
    }

    fn listed(book: &Book) -> Vec<String> {
        let page: Value = serde_json::from_str(&book.page(false)).unwrap();
        page["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn an_object_diverges_until_a_later_run_agrees_or_it_goes() {
        let book = Book::default();
        book.record(outcome("a", true));
        book.record(outcome("b", true));
        book.record(outcome("a", true));
        assert_eq!(listed(&book), ["a", "b"], "newest first, each object once");
        book.record(outcome("a", false));
        assert_eq!(listed(&book), ["b"]);
        book.forget(&outcome("b", false));
        assert!(listed(&book).is_empty());
        let page: Value = serde_json::from_str(&book.page(false)).unwrap();
        assert_eq!(page["divergent"]["cache"], 0);
    }

    #[test]
    fn the_list_keeps_only_the_latest_but_the_count_keeps_all() {
        let book = Book::default();
        for i in 0..LATEST + 5 {
            book.record(outcome(&format!("o{i}"), true));
        }
        let names = listed(&book);
        assert_eq!(names.len(), LATEST);
        assert_eq!(names[0], format!("o{}", LATEST + 4));
        let page: Value = serde_json::from_str(&book.page(false)).unwrap();
        assert_eq!(page["divergent"]["cache"], LATEST + 5);
        assert!(book.page(true).ends_with(&format!(
            "{} objects diverge under the candidate ({LATEST} listed)\n",
            LATEST + 5
        )));
    }
}
