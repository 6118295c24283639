//! The operator model: what `operator.toml` (or `operator.yaml`) declares.
//!
//! These types mirror the file one to one and are deserialized with `deny_unknown_fields`, so a
//! misspelled key is an error rather than a silently ignored setting. Checks that need more than
//! one field (a controller naming a kind no CRD declares, two storage versions) live in
//! [`super::validate`], which runs once after parsing; nothing downstream validates again.

mod controller;
mod crd;
mod operator;

pub use crate::config::budget::Budget;
pub use controller::{Controller, Watch};
pub(crate) use controller::{DeleteChildren, Parents};
pub use crd::{Crd, CrdVersionSpec, Scope};
pub(crate) use crd::{CrdVersion, Field, FieldType, PrinterColumn, Rule, Scale};
pub(crate) use operator::{DEFAULT_BURST, DEFAULT_QPS, OperatorSettings, RbacRule, USES_VERBS};

use super::kind::KindRef;
use serde::{Deserialize, Serialize};

/// The whole operator, as written by its author.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Settings of the daemon as a whole.
    #[serde(default)]
    pub operator: OperatorSettings,
    /// Custom resource definitions khai generates and installs.
    #[serde(default, rename = "crd")]
    pub crds: Vec<Crd>,
    /// Reconcile loops.
    #[serde(default, rename = "controller")]
    pub controllers: Vec<Controller>,
    /// Free-form settings handed to every script as `ctx.params`.
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
    /// Admission and conversion webhooks, served over TLS by `khai run`.
    #[serde(default, rename = "webhook")]
    pub webhooks: Vec<super::webhook::Webhook>,
    /// The webhook server: TLS mode, certificate files, the Service it is reached through.
    #[serde(default)]
    pub webhook_server: super::webhook::WebhookServer,
    /// Functions run on changes to objects: create, update, delete, resume, field, event.
    #[serde(default, rename = "handler")]
    pub handlers: Vec<super::handlers::Handler>,
    /// Functions run every interval for each object.
    #[serde(default, rename = "timer")]
    pub timers: Vec<super::handlers::Timer>,
    /// Per-object loops with state.
    #[serde(default, rename = "daemon")]
    pub daemons: Vec<super::handlers::Daemon>,
    /// Lookup tables over a kind, read by every script as `ctx.index(name, key)`.
    #[serde(default, rename = "index")]
    pub indexes: Vec<super::handlers::Index>,
    /// Functions run on a clock, about no object, on the leader only.
    #[serde(default, rename = "schedule")]
    pub schedules: Vec<super::handlers::Schedule>,
    /// ValidatingAdmissionPolicies of CEL rules, installed with their bindings.
    #[serde(default, rename = "policy")]
    pub policies: Vec<super::policy::Policy>,
}

fn yes() -> bool {
    true
}

/// Kinds the config names, resolved without a cluster.
/// `kind` as the CRD `c` defines it: its group and kind, and the version written or else the
/// storage version.
fn crd_kind(c: &Crd, kind: &KindRef) -> KindRef {
    KindRef {
        group: Some(c.group.clone()),
        version: Some(
            kind.version
                .clone()
                .unwrap_or_else(|| c.storage_version().to_string()),
        ),
        kind: c.kind.clone(),
    }
}

impl Model {
    /// The files a load of this config reads besides the config itself: [`Self::files`] and an
    /// absolute `[operator.http] ca_file`, as written (relative to the config file), sorted.
    /// The webhook server's certificate and key are not among them: it reads them itself and
    /// follows their changes without a reload.
    pub(crate) fn named_files(&self) -> Vec<std::path::PathBuf> {
        let absolute_ca = self
            .operator
            .http
            .ca_file
            .as_deref()
            .filter(|f| f.is_absolute());
        let mut files: Vec<std::path::PathBuf> = self
            .files()
            .into_iter()
            .chain(absolute_ca)
            .map(std::path::Path::to_path_buf)
            .collect();
        files.sort();
        files.dedup();
        files
    }

    /// Every file the config names that khai reads from beside the config file (from its
    /// directory, or from the same ConfigMap): each script (`[[controller]]`, `[[webhook]]`,
    /// `[[handler]]`, `[[timer]]`, `[[daemon]]`, `[[index]]`, the startup and cleanup hooks),
    /// each CRD's `schema_file`, and a relative `[operator.http] ca_file`. Each once, in config
    /// order. The one list `khai generate values` and `khai generate manifests` ship with the
    /// config, so an installed daemon finds every file it reads. Not listed: an absolute
    /// `ca_file` and the webhook server's `cert_file`/`key_file`, which are files on the
    /// machine or pod (a mounted Secret), never part of the config.
    pub fn files(&self) -> Vec<&std::path::Path> {
        let hooks = [&self.operator.startup, &self.operator.cleanup];
        let named = self
            .controllers
            .iter()
            .map(|c| c.script.as_path())
            .chain(self.webhooks.iter().map(|w| w.script.as_path()))
            .chain(self.handlers.iter().map(|h| h.script.as_path()))
            .chain(self.timers.iter().map(|t| t.script.as_path()))
            .chain(self.daemons.iter().map(|d| d.script.as_path()))
            .chain(self.indexes.iter().map(|i| i.script.as_path()))
            .chain(self.schedules.iter().map(|s| s.script.as_path()))
            .chain(hooks.into_iter().flatten().map(|h| h.script.as_path()))
            .chain(self.crds.iter().filter_map(|c| c.schema_file.as_deref()))
            .chain(
                self.operator
                    .http
                    .ca_file
                    .as_deref()
                    .filter(|f| f.is_relative()),
            );
        let mut out: Vec<&std::path::Path> = Vec::new();
        for p in named {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// The CRD of this config that `kind` names, if any.
    pub(crate) fn crd_for(&self, kind: &KindRef) -> Option<&Crd> {
        self.crds.iter().find(|c| {
            c.kind == kind.kind
                && kind.group.as_ref().is_none_or(|g| *g == c.group)
                && kind
                    .version
                    .as_ref()
                    .is_none_or(|v| c.versions.iter().any(|cv| cv.name() == v))
        })
    }

    /// The kind as objects of it may be matched: group and version from a CRD of `model`, the
    /// group alone from khai's table of built-in kinds (objects may be at any version of it),
    /// else as written.
    pub(crate) fn complete_kind(&self, kind: &KindRef) -> KindRef {
        if let Some(c) = self.crd_for(kind) {
            return crd_kind(c, kind);
        }
        match kind.builtin() {
            Some(b) => KindRef {
                group: Some(b.group.to_string()),
                ..kind.clone()
            },
            None => kind.clone(),
        }
    }

    /// The kind with what the config's CRDs, then khai's table of built-in kinds, say about
    /// the parts left unwritten. A kind neither knows stays as written.
    pub(crate) fn resolve_kind(&self, kind: &KindRef) -> super::kind::Offline {
        if let Some(c) = self.crd_for(kind) {
            return super::kind::Offline {
                kind: crd_kind(c, kind),
                plural: c.plural(),
                namespaced: c.scope == Scope::Namespaced,
                known: true,
            };
        }
        if let Some(b) = kind.builtin() {
            return super::kind::Offline {
                kind: KindRef {
                    group: Some(b.group.to_string()),
                    version: Some(
                        kind.version
                            .clone()
                            .unwrap_or_else(|| b.version.to_string()),
                    ),
                    kind: b.kind.to_string(),
                },
                plural: super::kind::plural_of(b.kind),
                namespaced: b.namespaced,
                known: true,
            };
        }
        super::kind::Offline {
            kind: kind.clone(),
            plural: super::kind::plural_of(&kind.kind),
            namespaced: true,
            known: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every file the config names ships, handler scripts included: a daemon installed from a
    /// handler-only config must be able to read its script.
    #[test]
    fn files_are_every_script_schema_and_relative_ca_file_once_in_config_order() {
        let src = r#"
[operator]
name = "all"
startup = { script = "scripts/hooks.rhai", function = "up" }
cleanup = { script = "scripts/hooks.rhai", function = "down" }

[operator.http]
allow = ["api.example.com"]
ca_file = "certs/ca.pem"

[[crd]]
group = "a.khai.dev"
kind = "Thing"
versions = ["v1"]
schema_file = "schemas/thing.yaml"

[[controller]]
for = "Thing"
script = "scripts/reconcile.rhai"

[[webhook]]
for = "Thing"
script = "scripts/webhooks.rhai"
validate = "validate"

[[handler]]
for = "Thing"
on = "create"
script = "scripts/handlers.rhai"
function = "created"

[[timer]]
for = "Thing"
script = "scripts/timers.rhai"
function = "tick"
interval = "1m"

[[daemon]]
for = "Thing"
script = "scripts/daemons.rhai"
tick = "beat"
interval = "1m"

[[index]]
name = "by_x"
for = "v1/Pod"
script = "scripts/handlers.rhai"
function = "x"
"#;
        let model = crate::config::parse(Path::new("operator.toml"), src).unwrap();
        let files: Vec<String> = model
            .files()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            files,
            [
                "scripts/reconcile.rhai",
                "scripts/webhooks.rhai",
                "scripts/handlers.rhai",
                "scripts/timers.rhai",
                "scripts/daemons.rhai",
                "scripts/hooks.rhai",
                "schemas/thing.yaml",
                "certs/ca.pem",
            ]
        );
        let absolute = src.replace("certs/ca.pem", "/etc/ssl/ca.pem");
        let model = crate::config::parse(Path::new("operator.toml"), &absolute).unwrap();
        assert!(
            !model.files().contains(&Path::new("/etc/ssl/ca.pem")),
            "an absolute ca_file is a file on the machine, not part of the config"
        );
    }
}
