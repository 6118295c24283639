//! Who may use the console when it listens off loopback: a bearer token, authenticated by the
//! API server's TokenReview and authorized by a SubjectAccessReview, as `kubectl` would be.
//!
//! The review asks for a non-resource URL that exists nowhere on the API server, so a grant of
//! it grants nothing there: `get` on `/khai/<operator>/console` to read (the page's data, the
//! JSON API, the event stream), `post` on `/khai/<operator>/console/playground` to run the
//! playground. docs/console.md shows the ClusterRole that grants them (non-resource URLs are
//! granted only by a ClusterRole and its ClusterRoleBinding).
//!
//! The page itself (its HTML, script and style) holds no data and is served to anyone. A
//! verdict is kept for [`KEEP`], for at most [`VERDICTS`] token/URL pairs (all forgotten when
//! full), so a page refreshing on every change does not review its token each time.

use hyper::StatusCode;
use hyper::header::{self, HeaderMap};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a verdict on a token is kept.
pub(crate) const KEEP: Duration = Duration::from_secs(30);
/// Token/URL pairs whose verdict is kept at once.
pub(crate) const VERDICTS: usize = 256;
/// How long one review may take.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a request off loopback is refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub(crate) enum Denied {
    #[error(
        "the console needs a bearer token when it listens off loopback: send \
         `Authorization: Bearer TOKEN` (for example `kubectl create token NAME`)"
    )]
    NoToken,
    #[error("the API server's TokenReview did not accept the token{}", reason(.cause))]
    Unauthenticated { cause: String },
    #[error(
        "{user} may not {verb} {path}: grant it with a ClusterRole's nonResourceURLs \
         (docs/console.md, \"Access off loopback\")"
    )]
    Forbidden {
        user: String,
        verb: &'static str,
        path: String,
    },
    #[error("the token could not be reviewed: {cause}")]
    Review { cause: String },
}

fn reason(cause: &str) -> String {
    match cause.is_empty() {
        true => String::new(),
        false => format!(": {cause}"),
    }
}

impl Denied {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Denied::NoToken | Denied::Unauthenticated { .. } => StatusCode::UNAUTHORIZED,
            Denied::Forbidden { .. } => StatusCode::FORBIDDEN,
            Denied::Review { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// What a request asks to do, as the SubjectAccessReview names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Access {
    Read,
    Playground,
}

impl Access {
    fn verb(self) -> &'static str {
        match self {
            Access::Read => "get",
            Access::Playground => "post",
        }
    }

    /// The non-resource URL reviewed for `operator`.
    pub(crate) fn path(self, operator: &str) -> String {
        match self {
            Access::Read => format!("/khai/{operator}/console"),
            Access::Playground => format!("/khai/{operator}/console/playground"),
        }
    }
}

/// A verdict on a token (by its hash) for one kind of access, and when it was reached.
type Verdicts = HashMap<(u64, Access), (Instant, Result<(), Denied>)>;

/// The reviews of one console.
pub(super) struct Auth {
    client: kube::Client,
    verdicts: Mutex<Verdicts>,
}

impl Auth {
    pub(super) fn new(client: kube::Client) -> Self {
        Self {
            client,
            verdicts: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the request with `headers` may have `access` to the console of `operator`.
    pub(super) async fn check(
        &self,
        headers: &HeaderMap,
        access: Access,
        operator: &str,
    ) -> Result<(), Denied> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(Denied::NoToken)?;
        let key = (xxhash_rust::xxh3::xxh3_64(token.as_bytes()), access);
        if let Some((at, verdict)) = crate::sync::lock(&self.verdicts).get(&key)
            && at.elapsed() < KEEP
        {
            return verdict.clone();
        }
        let verdict = tokio::time::timeout(REVIEW_TIMEOUT, self.review(token, access, operator))
            .await
            .unwrap_or_else(|_| {
                Err(Denied::Review {
                    cause: format!("the API server did not answer within {REVIEW_TIMEOUT:?}"),
                })
            });
        if !matches!(verdict, Err(Denied::Review { .. })) {
            let mut verdicts = crate::sync::lock(&self.verdicts);
            if verdicts.len() >= VERDICTS {
                verdicts.clear();
            }
            verdicts.insert(key, (Instant::now(), verdict.clone()));
        }
        verdict
    }

    async fn review(&self, token: &str, access: Access, operator: &str) -> Result<(), Denied> {
        let failed = |e: kube::Error| Denied::Review {
            cause: crate::client::ApiError::from(e).to_string(),
        };
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(failed)?;
        let status = reviewed.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => {
                return Err(Denied::Unauthenticated {
                    cause: status.error.unwrap_or_default(),
                });
            }
        };
        let path = access.path(operator);
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.clone()),
                    verb: Some(access.verb().to_string()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &sar)
            .await
            .map_err(failed)?;
        match decided.status.is_some_and(|s| s.allowed) {
            true => Ok(()),
            false => Err(Denied::Forbidden {
                user: user.username.unwrap_or_default(),
                verb: access.verb(),
                path,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_what_to_send_or_grant_with_their_status() {
        assert_eq!(Denied::NoToken.status(), StatusCode::UNAUTHORIZED);
        assert!(
            Denied::NoToken
                .to_string()
                .contains("Authorization: Bearer")
        );
        let e = Denied::Forbidden {
            user: "system:serviceaccount:ns:viewer".into(),
            verb: "post",
            path: Access::Playground.path("cache"),
        };
        assert_eq!(e.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            e.to_string(),
            "system:serviceaccount:ns:viewer may not post /khai/cache/console/playground: grant \
             it with a ClusterRole's nonResourceURLs (docs/console.md, \"Access off loopback\")"
        );
    }
}
