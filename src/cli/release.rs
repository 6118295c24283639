//! `khai release`: strips every finalizer and annotation of an operator's from every object of
//! the kinds its controllers, handlers, timers and daemons work on, without running any script,
//! so that nothing is left hanging on deletion after khai is gone (an uninstall; the chart's
//! pre-delete hook runs it). Idempotent; prints each object it changed.
//!
//! With `--lease`, it first takes the operator's leader election Lease, so the running khai
//! stops reconciling (and adding finalizers back) before anything is stripped, and waits for
//! the replaced leader's lease duration.

use crate::reload::Source;
use anyhow::Context;
use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The operator config: a file, a directory holding operator.toml or operator.yaml, or
    /// `configmap:NAMESPACE/NAME`, as `khai run` takes it.
    #[arg(
        long,
        short = 'c',
        value_name = "FILE|DIR|configmap:NS/NAME",
        env = "KHAI_CONFIG"
    )]
    pub config: Source,
    /// Release only objects in this namespace (repeatable); overrides `[operator] namespaces`.
    #[arg(long = "namespace", short = 'n', value_name = "NS")]
    pub namespaces: Vec<String>,
    /// Take this leader election Lease first, so a running khai stops reconciling (as the
    /// chart's hook does, with `khai-<operator>`).
    #[arg(long, value_name = "NAME")]
    pub lease: Option<String>,
    /// Namespace of the Lease [default: the pod's namespace, or the kubeconfig context's].
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    pub(crate) lease_namespace: Option<String>,
}

/// How long `--lease` keeps the Lease: longer than any uninstall takes.
const HOLD: std::time::Duration = std::time::Duration::from_secs(3600);

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(crate::script::stack::THREAD_STACK)
        .build()
        .context("failed to start the async runtime")?;
    rt.block_on(release(args))
}

async fn release(args: Args) -> anyhow::Result<ExitCode> {
    let (client, _) = crate::client::connect(crate::client::Limits::default()).await?;
    let op = match &args.config {
        Source::Path(path) => crate::operator::Operator::load(path)?,
        Source::ConfigMap(target) => {
            crate::reload::configmap::load(&client, target)
                .await?
                .operator
        }
    };
    let model = &op.config.model;
    let operator = &model.operator.name;
    if let Some(lease) = &args.lease {
        let namespace = args
            .lease_namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| client.default_namespace().to_string());
        let identity = format!("khai-release-{}", crate::client::identity());
        let finishing = crate::leader::take_over(&client, &namespace, lease, &identity, HOLD)
            .await
            .map_err(crate::client::ApiError::from)
            .with_context(|| format!("failed to take the Lease {namespace}/{lease}"))?;
        if let Some(wait) = finishing {
            println!("took the Lease {namespace}/{lease}; waiting {wait:?} for the leader to stop");
            tokio::time::sleep(wait).await;
        }
    }
    let written = model
        .controllers
        .iter()
        .map(|c| &c.for_kind)
        .chain(model.handlers.iter().map(|h| &h.for_kind))
        .chain(model.timers.iter().map(|t| &t.for_kind))
        .chain(model.daemons.iter().map(|d| &d.for_kind));
    let mut kinds: Vec<crate::watch::Kind> = Vec::new();
    for k in written {
        let kind = crate::watch::resolve(&client, model, k).await?;
        if !kinds.iter().any(|o| o.resource == kind.resource) {
            kinds.push(kind);
        }
    }
    let namespaces: Vec<Option<String>> = match args.namespaces.is_empty() {
        true if model.operator.namespaces.is_empty() => vec![None],
        true => model
            .operator
            .namespaces
            .iter()
            .cloned()
            .map(Some)
            .collect(),
        false => args.namespaces.iter().cloned().map(Some).collect(),
    };
    let mut released = 0;
    for kind in &kinds {
        let places: &[Option<String>] = if kind.namespaced {
            &namespaces
        } else {
            &[None]
        };
        for ns in places {
            let api = crate::watch::api(&client, kind, ns.as_deref());
            for obj in list(&api).await? {
                // Listed across namespaces, written in its own.
                let api = crate::watch::api(&client, kind, obj.namespace().as_deref());
                released += release_one(&api, kind, &obj, operator).await?;
            }
        }
    }
    match released {
        0 => println!(
            "nothing to release: no object carries a finalizer or annotation of {operator}"
        ),
        n => println!("released {n} object(s)"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Every object `api` lists, a page at a time.
async fn list(api: &kube::Api<DynamicObject>) -> anyhow::Result<Vec<DynamicObject>> {
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(crate::client::ApiError::from)?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => return Ok(out),
        }
    }
}

/// Strips the operator's finalizers and annotations from `obj`; 1 if it changed something.
async fn release_one(
    api: &kube::Api<DynamicObject>,
    kind: &crate::watch::Kind,
    obj: &DynamicObject,
    operator: &str,
) -> anyhow::Result<usize> {
    let Some((finalizers, annotations, patch)) = crate::controller::release_patch(obj, operator)
    else {
        return Ok(0);
    };
    let name = obj.name_any();
    let shown = match obj.namespace() {
        Some(ns) => format!("{} {ns}/{name}", kind.resource.kind),
        None => format!("{} {name}", kind.resource.kind),
    };
    match api
        .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
    {
        Ok(_) => {}
        // Gone meanwhile: nothing left to release.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(0),
        Err(e) => {
            return Err(crate::client::ApiError::from(e))
                .with_context(|| format!("failed to release {shown}"));
        }
    }
    println!(
        "released {shown}: finalizers [{}], annotations [{}]",
        finalizers.join(", "),
        annotations.join(", ")
    );
    Ok(1)
}
