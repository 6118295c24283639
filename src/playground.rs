//! The console's playground over the controllers `khai run` is running: an edited script is
//! compiled by the running script's engine, with its limits, and run against a live object from
//! the controller's own caches the way `khai diff` runs it ([`crate::diff::object_with`]): the
//! plan, the diff from the cluster, and the API server's dry-run verdict on each child that would
//! be written. Nothing is written; the script's writes and HTTP calls are held back and listed.

use crate::config::Config;
use crate::console::{Play, PlayError, Source};
use crate::controller::Ctx;
use crate::diff::{Format, Report};
use futures::future::BoxFuture;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

/// One version of the config, as it runs.
pub(crate) struct Running {
    config: Config,
    controllers: Vec<Arc<Ctx>>,
}

impl Running {
    pub(crate) fn new(config: &Config, controllers: Vec<Arc<Ctx>>) -> Self {
        Self {
            config: config.clone(),
            controllers,
        }
    }
}

impl crate::console::Playground for Running {
    fn source(&self, controller: &str) -> Result<Source, PlayError> {
        let c = self
            .config
            .model
            .controllers
            .iter()
            .find(|c| c.display_name() == controller)
            .ok_or_else(|| PlayError::NoController(controller.to_string()))?;
        let dir = self.config.file.parent().unwrap_or(Path::new("."));
        let text = self
            .config
            .files
            .read(dir, &c.script)
            .map_err(|e| PlayError::Source {
                cause: format!("{}: {e}", c.script.display()),
            })?;
        let file = c
            .script
            .strip_prefix(dir)
            .unwrap_or(&c.script)
            .to_string_lossy()
            .replace('\\', "/");
        Ok(Source {
            key: crate::config::files::key_of(&file),
            file,
            text,
        })
    }

    fn run(&self, play: Play) -> BoxFuture<'static, Result<Value, PlayError>> {
        let found = find(&self.controllers, &play);
        Box::pin(async move {
            let (ctx, obj) = found?;
            let script =
                ctx.spec
                    .script
                    .recompile(&play.script)
                    .map_err(|e| PlayError::Compile {
                        cause: e.to_string(),
                    })?;
            let diff = crate::diff::object_with(&ctx, &script, obj).await;
            let report = Report::new(vec![diff]);
            let json: Value =
                serde_json::from_str(&report.render(Format::Json)).unwrap_or(Value::Null);
            Ok(json!({
                "object": json["objects"].get(0).cloned().unwrap_or(Value::Null),
                "summary": json["summary"],
                "text": report.render(Format::Text),
            }))
        })
    }
}

/// The running controller named in `play` whose cache holds its object, and the object.
fn find(
    controllers: &[Arc<Ctx>],
    play: &Play,
) -> Result<(Arc<Ctx>, Arc<DynamicObject>), PlayError> {
    let mut named = controllers
        .iter()
        .filter(|c| c.spec.controller == play.controller)
        .peekable();
    let Some(first) = named.peek() else {
        return Err(PlayError::NoController(play.controller.clone()));
    };
    let kind = first.spec.kind.resource.kind.clone();
    for ctx in named {
        let at = ObjectRef::new_with(&play.name, ctx.spec.kind.resource.clone());
        let at = match &play.namespace {
            Some(ns) => at.within(ns),
            None => at,
        };
        if let Some(obj) = ctx.caches.primary.store().get(&at) {
            return Ok((Arc::clone(ctx), obj));
        }
    }
    Err(PlayError::NoObject(match &play.namespace {
        Some(ns) => format!("{kind} {ns}/{}", play.name),
        None => format!("{kind} {}", play.name),
    }))
}
