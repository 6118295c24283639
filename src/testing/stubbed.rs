//! The side effects of a case's call: `k8s::` and `http::` calls answered by the case's
//! `calls`, and `ctx.secret` reading the Secrets the case lists.

use super::case::Case;
use super::{DEFAULT_NAMESPACE, Error, Problem};
use crate::operator::Operator;
use serde_json::{Value, json};
use std::sync::Arc;

/// The side effects of a case's call: answered by the case's `calls`, on a runtime of their
/// own when `khai test` runs outside one (stubs never do I/O, but effects carry a runtime).
pub(super) struct Stubbed {
    pub(super) stubs: Arc<crate::effects::stub::Stubs>,
    pub(super) effects: Option<Arc<crate::effects::Effects>>,
    _runtime: Option<tokio::runtime::Runtime>,
}

impl Stubbed {
    pub(super) fn new(op: &Operator, case: &Case) -> Result<Self, Error> {
        let stubs = Arc::new(crate::effects::stub::Stubs::new(case.calls.clone()));
        let names = &op.config.model.operator.secrets;
        let namespace = case.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(DEFAULT_NAMESPACE);
        let secrets = case
            .secrets
            .iter()
            .enumerate()
            .map(|(i, s)| {
                case_secret(names, s, namespace).map_err(|p| Error::Invalid {
                    file: case.file.clone(),
                    invalid: p.at(format!("secrets[{i}]")),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let secrets = Arc::new(crate::effects::secrets::Secrets::from_objects(
            names, secrets,
        ));
        let (handle, runtime) = match tokio::runtime::Handle::try_current() {
            Ok(h) => (Some(h), None),
            Err(_) => match tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
            {
                Ok(rt) => (Some(rt.handle().clone()), Some(rt)),
                Err(_) => (None, None),
            },
        };
        let effects = handle.map(|h| {
            Arc::new(crate::effects::Effects {
                stubs: Some(stubs.clone()),
                secrets: secrets.clone(),
                ..crate::effects::Effects::new(h, crate::effects::Budget::default())
            })
        });
        Ok(Stubbed {
            stubs,
            effects,
            _runtime: runtime,
        })
    }
}

/// A Secret a case lists, as the API server stores it: in the object's namespace unless it
/// names one, `stringData` encoded into `data`. One the config does not let scripts read is an
/// error, since `ctx.secret` could never read it.
pub(super) fn case_secret(
    names: &[crate::config::http::SecretName],
    secret: &Value,
    namespace: &str,
) -> Result<kube::api::DynamicObject, Problem> {
    use base64::Engine as _;
    let mut s = secret.clone();
    s["apiVersion"] = json!("v1");
    s["kind"] = json!("Secret");
    let ns = s["metadata"]["namespace"]
        .as_str()
        .unwrap_or(namespace)
        .to_string();
    s["metadata"]["namespace"] = json!(ns);
    let name = s["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !crate::effects::secrets::Secrets::lists(names, &ns, &name) {
        return Err(Problem::SecretNotListed {
            namespace: ns,
            name,
        });
    }
    if let Some(Value::Object(plain)) = s.as_object_mut().and_then(|m| m.remove("stringData")) {
        for (k, v) in plain {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            s["data"][k.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    serde_json::from_value(s).map_err(Problem::Secret)
}
