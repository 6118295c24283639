//! Events through `events.k8s.io/v1` about any object, namespaced or cluster-scoped.
//!
//! kube-runtime's `Recorder` speaks the same API, but folds every Event of one object, type,
//! reason and action into one series that keeps the first message (two failures with one
//! reason read as the first failure twice), always puts the Events of cluster-scoped objects
//! in `default` (which servers before v1.22 refuse: there they must go in `kube-system`), names
//! an Event after its object even when that makes the name too long, and keeps every series it
//! saw for six minutes however many there are. This recorder keys a series by its message too,
//! moves to `kube-system` the first time the server refuses `default`, shortens long names and
//! keeps at most [`MAX_SERIES`] series, as client-go's recorder does.

use crate::sync::lock;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
pub(crate) use kube::runtime::events::{Event, EventType, Reporter};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How long a repeat of an Event counts in the series of the first (client-go's and
/// kube-runtime's six minutes); after that it starts a new Event.
const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);

/// Series remembered at most; past that the one observed longest ago is forgotten, and its
/// next repeat starts a new Event.
pub(crate) const MAX_SERIES: usize = 1024;

/// Where Events about cluster-scoped objects go, as kube-controller-manager records them.
const CLUSTER_NAMESPACE: &str = "default";
/// Where servers before v1.22 require them (`involvedObject.namespace … does not match
/// event.namespace` in `default`).
const CLUSTER_NAMESPACE_OLD: &str = "kube-system";

/// The longest name the API server takes for an Event (a DNS subdomain).
const MAX_NAME: usize = 253;

/// Records Events; clones share their series.
#[derive(Clone)]
pub(crate) struct Recorder {
    client: kube::Client,
    reporter: Reporter,
    state: Arc<Mutex<State>>,
}

struct State {
    series: HashMap<Key, Recorded>,
    /// [`CLUSTER_NAMESPACE`], or [`CLUSTER_NAMESPACE_OLD`] once the server refused it.
    cluster_namespace: &'static str,
}

/// What makes two Events one series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    warning: bool,
    reason: String,
    action: String,
    note: Option<String>,
    regarding: Reference,
    related: Option<Reference>,
}

/// The identifying fields of an object reference.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Reference([Option<String>; 5]);

impl From<&ObjectReference> for Reference {
    fn from(r: &ObjectReference) -> Self {
        Reference([
            r.api_version.clone(),
            r.kind.clone(),
            r.namespace.clone(),
            r.name.clone(),
            r.uid.clone(),
        ])
    }
}

/// An Event recorded, for its repeats.
#[derive(Clone, Debug)]
struct Recorded {
    namespace: String,
    name: String,
    count: i32,
    last: Timestamp,
}

impl Recorder {
    pub(crate) fn new(client: kube::Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            state: Arc::new(Mutex::new(State {
                series: HashMap::new(),
                cluster_namespace: CLUSTER_NAMESPACE,
            })),
        }
    }

    /// Records `ev` about `regarding`: a new Event, or one more in the series of the same Event
    /// recorded in the last six minutes.
    pub(crate) async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = Key {
            warning: ev.type_ == EventType::Warning,
            reason: ev.reason.clone(),
            action: ev.action.clone(),
            note: ev.note.clone(),
            regarding: regarding.into(),
            related: ev.secondary.as_ref().map(Reference::from),
        };
        let (repeat, cluster_namespace) = {
            let mut state = lock(&self.state);
            state.series.retain(|_, r| r.last + SERIES_TTL > now);
            (state.series.get(&key).cloned(), state.cluster_namespace)
        };
        if let Some(mut r) = repeat {
            r.count += 1;
            r.last = now;
            let patch =
                json!({ "series": { "count": r.count, "lastObservedTime": MicroTime(now) } });
            let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), &r.namespace);
            match events
                .patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.remember(key, r);
                    return Ok(());
                }
                // Deleted meanwhile (Events expire on the server): a new one.
                Err(e) if status(&e) == Some(404) => {}
                Err(e) => return Err(e),
            }
        }
        let namespace = match &regarding.namespace {
            Some(ns) if !ns.is_empty() => ns.as_str(),
            _ => cluster_namespace,
        };
        let created = match self.create(ev, regarding, namespace, now).await {
            Err(e) if namespace == CLUSTER_NAMESPACE && refuses_default(&e) => {
                lock(&self.state).cluster_namespace = CLUSTER_NAMESPACE_OLD;
                self.create(ev, regarding, CLUSTER_NAMESPACE_OLD, now)
                    .await?
            }
            other => other?,
        };
        let recorded = Recorded {
            namespace: created.metadata.namespace.unwrap_or_default(),
            name: created.metadata.name.unwrap_or_default(),
            count: 1,
            last: now,
        };
        self.remember(key, recorded);
        Ok(())
    }

    async fn create(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
        namespace: &str,
        now: Timestamp,
    ) -> Result<K8sEvent, kube::Error> {
        let controller = &self.reporter.controller;
        let event = K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            note: ev.note.clone(),
            type_: Some(
                if ev.type_ == EventType::Warning {
                    "Warning"
                } else {
                    "Normal"
                }
                .into(),
            ),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(self.reporter.instance.clone().unwrap_or(controller.clone())),
            metadata: ObjectMeta {
                namespace: Some(namespace.to_string()),
                name: Some(event_name(
                    regarding.name.as_deref().unwrap_or(controller),
                    now,
                )),
                ..ObjectMeta::default()
            },
            ..K8sEvent::default()
        };
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        events.create(&PostParams::default(), &event).await
    }

    /// Keeps `r` as the series of `key`, forgetting the oldest series when there are too many.
    fn remember(&self, key: Key, r: Recorded) {
        let mut state = lock(&self.state);
        if state.series.len() >= MAX_SERIES && !state.series.contains_key(&key) {
            let oldest = state
                .series
                .iter()
                .min_by_key(|(_, r)| r.last)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                state.series.remove(&oldest);
            }
        }
        state.series.insert(key, r);
    }
}

/// `<object name>.<nanoseconds in hex>`, as client-go names Events, with the object's name
/// shortened so the whole stays within what the API server takes.
fn event_name(object: &str, now: Timestamp) -> String {
    let suffix = format!(".{:x}", now.as_nanosecond());
    let keep = MAX_NAME - suffix.len();
    let prefix: String = object.chars().take(keep).collect();
    // A DNS subdomain ends in an alphanumeric character.
    let prefix = prefix.trim_end_matches(['.', '-']);
    format!("{prefix}{suffix}")
}

fn status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// The refusal of an Event about a cluster-scoped object in `default` (servers before v1.22).
fn refuses_default(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 422 && s.message.contains("does not match event.namespace"))
}

/// khai's own Pod, when `POD_NAME` and `POD_NAMESPACE` say which Pod that is: what Events about
/// khai itself regard when there is no config ConfigMap to regard.
pub(crate) fn own_pod() -> Option<ObjectReference> {
    let var = |v: &str| std::env::var(v).ok().filter(|s| !s.is_empty());
    let (name, namespace) = var("POD_NAME").zip(var("POD_NAMESPACE"))?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name),
        namespace: Some(namespace),
        ..ObjectReference::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::FakeApi;

    fn recorder(api: &FakeApi) -> Recorder {
        Recorder::new(
            api.client(),
            Reporter {
                controller: "khai-test".into(),
                instance: None,
            },
        )
    }

    fn event(reason: &str, note: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note.into()),
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    fn object(namespace: Option<&str>, name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: namespace.map(str::to_string),
            name: Some(name.into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        }
    }

    /// The Events the fake holds in `namespace`: (note, series count).
    fn recorded(api: &FakeApi, namespace: &str) -> Vec<(String, i64)> {
        let prefix = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events/");
        let mut out: Vec<(String, i64)> = api
            .under(&prefix)
            .into_iter()
            .map(|e| {
                let count = e["series"]["count"].as_i64().unwrap_or(1);
                (e["note"].as_str().unwrap_or_default().to_string(), count)
            })
            .collect();
        out.sort();
        out
    }

    #[tokio::test]
    async fn one_reason_with_two_messages_is_two_events_and_a_repeat_is_a_series() {
        let api = FakeApi::default();
        let r = recorder(&api);
        let obj = object(Some("ns"), "a");
        r.publish(&event("Failed", "first"), &obj).await.unwrap();
        r.publish(&event("Failed", "second"), &obj).await.unwrap();
        r.publish(&event("Failed", "first"), &obj).await.unwrap();
        assert_eq!(
            recorded(&api, "ns"),
            [("first".to_string(), 2), ("second".to_string(), 1)]
        );
    }

    #[tokio::test]
    async fn cluster_scoped_objects_have_their_events_in_default() {
        let api = FakeApi::default();
        let r = recorder(&api);
        r.publish(&event("Done", "m"), &object(None, "a"))
            .await
            .unwrap();
        assert_eq!(recorded(&api, "default"), [("m".to_string(), 1)]);
    }

    /// Servers before v1.22 take an Event about a cluster-scoped object in `kube-system` only.
    #[tokio::test]
    async fn a_server_that_refuses_default_gets_them_in_kube_system_from_then_on() {
        let api = FakeApi::default();
        let r = recorder(&api);
        api.refuse(
            "/apis/events.k8s.io/v1/namespaces/default/events",
            422,
            "Event.events.k8s.io \"a.1\" is invalid: involvedObject.namespace: Invalid value: \"\": does not match event.namespace",
            1,
        );
        r.publish(&event("Done", "one"), &object(None, "a"))
            .await
            .unwrap();
        r.publish(&event("Done", "two"), &object(None, "a"))
            .await
            .unwrap();
        assert_eq!(
            recorded(&api, "kube-system"),
            [("one".to_string(), 1), ("two".to_string(), 1)]
        );
        assert!(recorded(&api, "default").is_empty());
    }

    #[test]
    fn a_long_object_name_gives_a_valid_event_name() {
        let now = Timestamp::now();
        let name = event_name(&format!("{}-b", "a".repeat(235)), now);
        assert!(name.len() <= MAX_NAME, "{}", name.len());
        assert!(name.starts_with(&"a".repeat(235)));
        assert!(!name.contains("-."), "{name}");
        assert_eq!(event_name("x", now), format!("x.{:x}", now.as_nanosecond()));
    }

    #[tokio::test]
    async fn series_are_bounded() {
        let api = FakeApi::default();
        let r = recorder(&api);
        let obj = object(Some("ns"), "a");
        for i in 0..MAX_SERIES + 5 {
            r.publish(&event("Many", &i.to_string()), &obj)
                .await
                .unwrap();
        }
        assert_eq!(lock(&r.state).series.len(), MAX_SERIES);
    }
}
