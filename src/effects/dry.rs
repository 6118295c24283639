//! The side effects of a `khai diff`: reads go to the cluster as in `khai run`, nothing that
//! writes or leaves for another host does.
//!
//! A `k8s::` write (`create`, `apply`, `replace`, `patch`, `patch_status`, `delete`) is not
//! sent: the script gets what the API server would answer (the object as written, with the
//! metadata the server fills in, as `khai test` answers it), and the diff reports it as a write
//! `khai run` would make. An `http::` request is not sent either, since khai cannot know whether
//! it changes anything where it goes: the script gets an error value with `reason`
//! `"dry_run"`, which it can catch, and the diff reports the request. `k8s::get` and
//! `k8s::list` are answered by the cluster.

use super::stub::{Answer, as_written};
use serde_json::{Value, json};
use std::sync::Mutex;

/// At most this many held calls are remembered per object; past it they are counted only, so a
/// script looping on writes cannot grow the report without bound (its call budget stops it
/// sooner anyway).
const MAX_HELD: usize = 32;

/// The calls held back during the calls about one object, in order.
#[derive(Debug, Default)]
pub struct Held {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    calls: Vec<String>,
    more: usize,
}

impl Held {
    /// The answer to `request` when it is one a diff holds back (a write, or any HTTP request),
    /// recorded; `None` for a read, which goes to the cluster.
    pub fn hold(&self, request: &Value) -> Option<Answer> {
        let call = request["call"].as_str().unwrap_or_default();
        let answer = if call.starts_with("http::") {
            let message = format!(
                "{call} {} {}: not sent by khai diff",
                request["method"].as_str().unwrap_or_default(),
                request["url"].as_str().unwrap_or_default()
            );
            Answer::Error(json!({ "reason": "dry_run", "message": message }))
        } else if matches!(call, "k8s::get" | "k8s::list") {
            return None;
        } else {
            Answer::Response(as_written(request))
        };
        if let Ok(mut state) = self.state.lock() {
            if state.calls.len() < MAX_HELD {
                state.calls.push(describe(request));
            } else {
                state.more += 1;
            }
        }
        Some(answer)
    }

    /// The calls held back, each as one line (`k8s::apply v1/ConfigMap default/web`), and how
    /// many more there were past [`MAX_HELD`].
    pub fn calls(&self) -> (Vec<String>, usize) {
        self.state
            .lock()
            .map(|s| (s.calls.clone(), s.more))
            .unwrap_or_default()
    }
}

/// One line naming a held call: the function, then the kind and object, or the method and URL.
fn describe(request: &Value) -> String {
    let text = |k: &str| request[k].as_str().unwrap_or_default();
    if text("call").starts_with("http::") {
        return format!("{} {} {}", text("call"), text("method"), text("url"));
    }
    let object = match request["namespace"].as_str() {
        Some(ns) => format!("{ns}/{}", text("name")),
        None => text("name").to_string(),
    };
    format!("{} {} {object}", text("call"), text("kind"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_http_are_held_and_reads_pass() {
        let held = Held::default();
        let get = json!({ "call": "k8s::get", "kind": "v1/Pod", "namespace": "d", "name": "a" });
        assert_eq!(held.hold(&get), None);
        let apply = json!({ "call": "k8s::apply", "kind": "v1/ConfigMap", "namespace": "d",
            "name": "c", "object": { "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "c" }, "data": { "k": "v" } } });
        let Some(Answer::Response(written)) = held.hold(&apply) else {
            panic!("a write is answered as written");
        };
        assert_eq!(written["data"]["k"], "v");
        assert_eq!(written["metadata"]["namespace"], "d");
        let http = json!({ "call": "http::request", "method": "POST", "url": "https://x.dev/a" });
        let Some(Answer::Error(e)) = held.hold(&http) else {
            panic!("an HTTP request is refused");
        };
        assert_eq!(e["reason"], "dry_run");
        assert_eq!(
            held.calls(),
            (
                vec![
                    "k8s::apply v1/ConfigMap d/c".to_string(),
                    "http::request POST https://x.dev/a".to_string(),
                ],
                0
            )
        );
    }

    #[test]
    fn held_calls_are_bounded() {
        let held = Held::default();
        let delete = json!({ "call": "k8s::delete", "kind": "v1/Pod", "name": "p" });
        for _ in 0..MAX_HELD + 5 {
            held.hold(&delete);
        }
        let (calls, more) = held.calls();
        assert_eq!((calls.len(), more), (MAX_HELD, 5));
    }
}
