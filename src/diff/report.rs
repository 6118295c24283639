//! What a diff found, per object and in sum, and how it is printed: text for people (a unified
//! diff of each child's fields khai writes, the status fields that change) or one JSON document
//! for tools. No I/O.
//!
//! Unified diffs come from the `similar` crate over the YAML of the live child (cut to the
//! fields khai writes) and of the child khai would write.

use crate::apply::{ChildRef, ChildWrite, Preview};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};
use std::fmt::Write as _;

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
}

/// What `khai run` would do for one object.
#[derive(Debug)]
pub(crate) struct ObjectDiff {
    pub controller: String,
    /// `Kind` of the object, with its group: `Cache.bench.khai.dev`.
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub verdict: Verdict,
    /// The script's `k8s::` writes and HTTP requests that were held back.
    pub calls: Vec<String>,
    /// How many more were held back than are listed.
    pub more_calls: usize,
}

/// The outcome for one object.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// The writes its plan would make.
    Planned(Preview),
    /// Its reconcile (or filter) fails; `khai run` would report it and retry.
    Failed(String),
    /// `khai run` would not reconcile it.
    Skipped(String),
}

impl ObjectDiff {
    /// An object of `controller` with no verdict yet.
    pub(crate) fn of(controller: &str, obj: &DynamicObject) -> Self {
        let types = obj.types.as_ref();
        let kind = types.map_or_else(String::new, |t| match t.api_version.rsplit_once('/') {
            Some((group, _)) => format!("{}.{group}", t.kind),
            None => t.kind.clone(),
        });
        Self {
            controller: controller.to_string(),
            kind,
            namespace: obj.namespace(),
            name: obj.name_any(),
            verdict: Verdict::Skipped(String::new()),
            calls: Vec::new(),
            more_calls: 0,
        }
    }

    fn object(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// Whether `khai run` would write anything for it (or hold back a call).
    fn changes(&self) -> bool {
        let planned = match &self.verdict {
            Verdict::Planned(p) => {
                !(p.children.is_empty() && p.pruned.is_empty() && p.status.is_empty())
            }
            Verdict::Failed(_) | Verdict::Skipped(_) => false,
        };
        planned || !self.calls.is_empty()
    }

    /// Whether the object would change or fails: what a report lists.
    pub(crate) fn listed(&self) -> bool {
        self.changes() || !matches!(self.verdict, Verdict::Planned(_))
    }

    /// The object as one entry of a report's `objects`.
    pub(crate) fn json(&self) -> Value {
        let mut v = json!({
            "controller": self.controller, "kind": self.kind,
            "namespace": self.namespace, "name": self.name,
        });
        match &self.verdict {
            Verdict::Failed(why) => v["error"] = json!(why),
            Verdict::Planned(p) => {
                v["children"] = p.children.iter().map(child_json).collect();
                v["pruned"] = json!(p.pruned);
                v["status"] = json!(p.status);
            }
            Verdict::Skipped(why) => v["skipped"] = json!(why),
        }
        if !self.calls.is_empty() {
            v["calls"] = json!(self.calls);
        }
        v
    }

    /// The object's block of a text report, when it would change or fails.
    pub(crate) fn text(&self, out: &mut String) {
        match &self.verdict {
            Verdict::Failed(why) => {
                let _ = writeln!(
                    out,
                    "{} (controller {}): fails: {why}",
                    self.object(),
                    self.controller
                );
            }
            Verdict::Planned(p) if self.changes() => {
                let _ = writeln!(out, "{} (controller {}):", self.object(), self.controller);
                planned_text(out, p);
            }
            _ if !self.calls.is_empty() => {
                let _ = writeln!(out, "{} (controller {}):", self.object(), self.controller);
            }
            _ => return,
        }
        for call in &self.calls {
            let _ = writeln!(out, "  would call {call} (not sent)");
        }
        if self.more_calls > 0 {
            let _ = writeln!(out, "  and {} more calls (not sent)", self.more_calls);
        }
    }

    fn refused(&self) -> usize {
        match &self.verdict {
            Verdict::Planned(p) => p.children.iter().filter(|c| c.refused.is_some()).count(),
            _ => 0,
        }
    }
}

/// Every object's outcome, and the sums.
#[derive(Debug)]
pub(crate) struct Report {
    pub objects: Vec<ObjectDiff>,
}

/// Counts over a report.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Summary {
    /// Objects for which `khai run` would write something.
    pub changed: usize,
    pub unchanged: usize,
    /// Objects whose reconcile fails.
    pub failed: usize,
    pub skipped: usize,
    pub created: usize,
    pub updated: usize,
    pub pruned: usize,
    /// Child writes the API server's dry run refuses.
    pub refused: usize,
    pub status: usize,
    /// Script calls held back.
    pub calls: usize,
}

impl Report {
    pub(crate) fn new(objects: Vec<ObjectDiff>) -> Self {
        Self { objects }
    }

    pub(crate) fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for o in &self.objects {
            s.calls += o.calls.len() + o.more_calls;
            s.refused += o.refused();
            match &o.verdict {
                Verdict::Failed(_) => s.failed += 1,
                Verdict::Skipped(_) => s.skipped += 1,
                Verdict::Planned(p) => {
                    s.created += p.children.iter().filter(|c| c.before.is_none()).count();
                    s.updated += p.children.iter().filter(|c| c.before.is_some()).count();
                    s.pruned += p.pruned.len();
                    s.status += usize::from(!p.status.is_empty());
                    if !o.changes() {
                        s.unchanged += 1;
                    }
                }
            }
            if o.changes() {
                s.changed += 1;
            }
        }
        s
    }

    /// The exit code, as `kubectl diff` has it: 0 when nothing would change, 1 when something
    /// would, 2 when `khai run` would fail somewhere (a reconcile fails, a child is refused).
    pub(crate) fn exit_code(&self) -> u8 {
        let s = self.summary();
        if s.failed + s.refused > 0 {
            2
        } else {
            u8::from(s.changed > 0)
        }
    }

    pub(crate) fn render(&self, format: Format) -> String {
        match format {
            Format::Text => self.text(),
            Format::Json => {
                let doc = self.json();
                serde_json::to_string_pretty(&doc).unwrap_or_else(|_| doc.to_string()) + "\n"
            }
        }
    }

    /// One block per object that would change or fails, then the summary line.
    fn text(&self) -> String {
        let mut out = String::new();
        for o in &self.objects {
            o.text(&mut out);
        }
        let s = self.summary();
        let _ = writeln!(
            out,
            "{} objects would change, {} unchanged, {} failing, {} skipped; children: {} to \
             create, {} to change, {} to prune, {} refused by the API server; {} status writes",
            s.changed,
            s.unchanged,
            s.failed,
            s.skipped,
            s.created,
            s.updated,
            s.pruned,
            s.refused,
            s.status
        );
        out
    }

    /// The whole report as one JSON document: the objects that would change or fail, and the
    /// summary.
    fn json(&self) -> Value {
        let objects: Vec<Value> = self
            .objects
            .iter()
            .filter(|o| o.listed())
            .map(ObjectDiff::json)
            .collect();
        json!({ "objects": objects, "summary": self.summary() })
    }
}

fn planned_text(out: &mut String, p: &Preview) {
    for c in &p.children {
        let (mark, action) = match c.before {
            None => ('+', "create"),
            Some(_) => ('~', "change"),
        };
        let _ = writeln!(out, "  {mark} {} ({action})", id_text(&c.id));
        if let Some(e) = &c.refused {
            let _ = writeln!(out, "    refused by the API server's dry run: {e}");
            continue;
        }
        for line in unified(c).lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    for id in &p.pruned {
        let _ = writeln!(out, "  - {} (prune)", id_text(id));
    }
    for s in &p.status {
        let before = s
            .before
            .as_ref()
            .map_or_else(|| "(none)".into(), Value::to_string);
        let _ = writeln!(out, "  status.{}: {before} -> {}", s.field, s.after);
    }
}

fn id_text(id: &ChildRef) -> String {
    match &id.namespace {
        Some(ns) => format!("{}/{} {ns}/{}", id.api_version, id.kind, id.name),
        None => format!("{}/{} {}", id.api_version, id.kind, id.name),
    }
}

fn child_json(c: &ChildWrite) -> Value {
    let mut v = json!(c.id);
    v["action"] = json!(if c.before.is_some() {
        "change"
    } else {
        "create"
    });
    v["before"] = c.before.clone().unwrap_or(Value::Null);
    v["after"] = c.after.clone();
    v["diff"] = json!(unified(c));
    if let Some(e) = &c.refused {
        v["refused"] = json!(e.to_string());
    }
    v
}

/// The unified diff of the child's fields khai writes: live (empty when it does not exist)
/// against what khai would write, as YAML.
fn unified(c: &ChildWrite) -> String {
    let yaml = |v: &Value| serde_saphyr::to_string(v).unwrap_or_else(|_| v.to_string());
    let before = c.before.as_ref().map(yaml).unwrap_or_default();
    let after = yaml(&c.after);
    similar::TextDiff::from_lines(&before, &after)
        .unified_diff()
        .context_radius(3)
        .header("live", "khai")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::StatusChange;

    fn cache(name: &str, verdict: Verdict) -> ObjectDiff {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bench.khai.dev/v1", "kind": "Cache",
            "metadata": { "name": name, "namespace": "ns" },
        }))
        .unwrap();
        let mut o = ObjectDiff::of("Cache", &obj);
        o.verdict = verdict;
        o
    }

    fn configmap(name: &str, size: &str) -> Value {
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": "ns" }, "data": { "size": size } })
    }

    fn id(name: &str) -> ChildRef {
        ChildRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    fn report() -> Report {
        let changed = Preview {
            children: vec![ChildWrite {
                id: id("big-config"),
                before: Some(configmap("big-config", "6")),
                after: configmap("big-config", "7"),
                refused: None,
            }],
            unchanged: 0,
            pruned: vec![id("old")],
            status: vec![StatusChange {
                field: "phase".into(),
                before: Some(json!("Progressing")),
                after: json!("Ready"),
            }],
        };
        let refused = Preview {
            children: vec![ChildWrite {
                id: id("bad-config"),
                before: None,
                after: configmap("bad-config", "1"),
                refused: Some(crate::client::ApiError::Status {
                    code: 422,
                    reason: "Invalid".into(),
                    message: "ConfigMap \"bad-config\" is invalid".into(),
                }),
            }],
            ..Preview::default()
        };
        Report::new(vec![
            cache("big", Verdict::Planned(changed)),
            cache("same", Verdict::Planned(Preview::default())),
            cache("bad", Verdict::Planned(refused)),
            cache(
                "broken",
                Verdict::Failed("scripts/cache.rhai:3:5: boom".into()),
            ),
        ])
    }

    #[test]
    fn text_shows_each_changed_object_with_its_field_diff_and_a_summary() {
        assert_eq!(
            report().render(Format::Text),
            "Cache.bench.khai.dev ns/big (controller Cache):
  ~ v1/ConfigMap ns/big-config (change)
    --- live
    +++ khai
    @@ -4,4 +4,4 @@
       name: big-config
       namespace: ns
     data:
    -  size: \"6\"
    +  size: \"7\"
  - v1/ConfigMap ns/old (prune)
  status.phase: \"Progressing\" -> \"Ready\"
Cache.bench.khai.dev ns/bad (controller Cache):
  + v1/ConfigMap ns/bad-config (create)
    refused by the API server's dry run: ConfigMap \"bad-config\" is invalid (Invalid, 422)
Cache.bench.khai.dev ns/broken (controller Cache): fails: scripts/cache.rhai:3:5: boom
2 objects would change, 1 unchanged, 1 failing, 0 skipped; children: 1 to create, 1 to \
change, 1 to prune, 1 refused by the API server; 1 status writes
"
        );
    }

    #[test]
    fn json_lists_the_objects_that_change_or_fail_and_the_summary() {
        let doc: Value = serde_json::from_str(&report().render(Format::Json)).unwrap();
        let names: Vec<&str> = doc["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["big", "bad", "broken"]);
        let big = &doc["objects"][0];
        assert_eq!(big["children"][0]["action"], "change");
        assert_eq!(big["children"][0]["after"]["data"]["size"], "7");
        assert!(
            big["children"][0]["diff"]
                .as_str()
                .unwrap()
                .contains("-  size: \"6\"\n+  size: \"7\"\n")
        );
        assert_eq!(big["pruned"][0]["name"], "old");
        assert_eq!(
            big["status"][0],
            json!({ "field": "phase", "before": "Progressing", "after": "Ready" })
        );
        assert_eq!(
            doc["objects"][1]["children"][0]["refused"],
            "ConfigMap \"bad-config\" is invalid (Invalid, 422)"
        );
        assert_eq!(doc["objects"][2]["error"], "scripts/cache.rhai:3:5: boom");
        assert_eq!(doc["summary"]["changed"], 2);
        assert_eq!(doc["summary"]["refused"], 1);
    }

    #[test]
    fn the_exit_code_follows_kubectl_diff() {
        assert_eq!(report().exit_code(), 2, "a refusal or a failure");
        let same = Report::new(vec![cache("same", Verdict::Planned(Preview::default()))]);
        assert_eq!(same.exit_code(), 0);
        let mut called = cache("c", Verdict::Planned(Preview::default()));
        called.calls.push("k8s::apply v1/ConfigMap ns/x".into());
        assert_eq!(Report::new(vec![called]).exit_code(), 1, "a held write");
    }
}
