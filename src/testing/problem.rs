//! What is wrong with a case that shows only when it is run against the operator (no such
//! controller or webhook, a cache object no lookup could see, an object the schema cannot
//! default), and where in the case: [`super::Error::Invalid`] adds the case's file.

/// A problem at one field of a case.
#[derive(Debug, thiserror::Error)]
#[error("{field}: {problem}")]
pub(crate) struct Invalid {
    /// The field path in the case: `object`, `cache[1]`, `expect.object`.
    pub field: String,
    pub problem: Box<Problem>,
}

/// What is wrong, in the case author's words.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Problem {
    #[error(transparent)]
    Default(crate::schema::Error),
    #[error("metadata: expected a map")]
    NoMetadata,
    #[error("no controller named {name:?} (controllers: {names})")]
    NoSuchController { name: String, names: String },
    #[error("no controller reconciles kind {kind:?} (controllers: {names})")]
    NoController { kind: String, names: String },
    #[error("several controllers reconcile kind {kind:?}; name one of: {names}")]
    SeveralControllers { kind: String, names: String },
    #[error(
        "kind {written:?} is not watched by controller {controller} (for, owns, watches), so \
         ctx lookups could never see it"
    )]
    NotWatched { written: String, controller: String },
    #[error("no handler, timer or daemon function named {name:?} in the config")]
    NoHandlerFunction { name: String },
    #[error(
        "kind {written:?} is neither watched with {kind} nor indexed, so neither ctx lookups \
         nor ctx.index could ever see it"
    )]
    NotWatchedNorIndexed { written: String, kind: String },
    #[error(transparent)]
    Index(crate::handler::index::BuildError),
    #[error("no webhook named {name:?} (webhooks: {names})")]
    NoSuchWebhook { name: String, names: String },
    #[error("webhook {name:?} has no `{function}` function")]
    NoFunction { name: String, function: String },
    #[error("no webhook with a `{function}` function is for kind {kind:?} (webhooks: {names})")]
    NoWebhook {
        function: String,
        kind: String,
        names: String,
    },
    #[error(
        "several webhooks with a `{function}` function are for kind {kind:?}; name one of: {names}"
    )]
    SeveralWebhooks {
        function: String,
        kind: String,
        names: String,
    },
    #[error(
        "admission scripts see {kind} at its storage version; write apiVersion {group}/{storage}"
    )]
    NotStorageVersion {
        kind: String,
        group: String,
        storage: String,
    },
    #[error(transparent)]
    Patch(serde_json::Error),
    #[error("the patch khai sends does not apply to the object: {0}")]
    PatchDoesNotApply(json_patch::PatchError),
    #[error(transparent)]
    RequeueAfter(crate::reconcile::DurationError),
    #[error(
        "Secret {namespace}/{name} is not in [operator] secrets, so ctx.secret could never read it"
    )]
    SecretNotListed { namespace: String, name: String },
    #[error(transparent)]
    Secret(serde_json::Error),
}

impl Problem {
    /// This problem, at `field` of the case.
    pub(crate) fn at(self, field: impl Into<String>) -> Invalid {
        Invalid {
            field: field.into(),
            problem: Box::new(self),
        }
    }
}
