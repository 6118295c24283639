//! What a failed `k8s::…` call gives a script: a map it can catch and inspect
//! (`e.reason == "conflict"`), whose `error` field is the one line khai reports when the script
//! does not catch it.

use serde_json::{Value, json};

/// A failed call, in the API server's words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    /// `not_found`, `conflict`, `forbidden`, `invalid`, `already_exists`, `timeout`, …: the
    /// server's reason in snake case; `unavailable` when no answer came, `unknown_kind` when
    /// the kind is served by no API.
    pub reason: String,
    /// The HTTP status, or 0 when the server did not answer.
    pub code: u16,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(reason: &str, code: u16, message: impl Into<String>) -> Self {
        Failure {
            reason: reason.into(),
            code,
            message: message.into(),
        }
    }

    /// The value thrown to the script for `verb` on `what` (`v1/Pod default/web`).
    pub(crate) fn value(&self, verb: &str, what: &str) -> Value {
        json!({
            "reason": self.reason,
            "code": self.code,
            "message": self.message,
            "verb": verb,
            "error": format!("k8s::{verb} {what}: {} ({}, {})", self.message, self.reason, self.code),
        })
    }
}

/// Whether a report (an Event's message, a log line) is of a `k8s::…` call the API server
/// refused with 403, as [`Failure::value`] words it: `… (forbidden, 403)`, possibly followed by
/// what the caller added (`(gave up: out of retries)`).
pub(crate) fn is_forbidden(report: &str) -> bool {
    report.contains(" (forbidden, 403)")
}

impl From<kube::Error> for Failure {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => Failure {
                reason: reason(&s.reason, s.code),
                code: s.code,
                message: if s.message.is_empty() {
                    format!("the API server answered {}", s.code)
                } else {
                    s.message
                },
            },
            other => Failure::new(
                "unavailable",
                0,
                crate::client::ApiError::from(other).to_string(),
            ),
        }
    }
}

/// The server's `reason` (`NotFound`, `AlreadyExists`) as scripts read it (`not_found`,
/// `already_exists`); from the code when the server gave none.
fn reason(server: &str, code: u16) -> String {
    match server {
        "Timeout" | "ServerTimeout" => return "timeout".into(),
        "" => {
            return match code {
                400 => "bad_request",
                401 => "unauthorized",
                403 => "forbidden",
                404 => "not_found",
                409 => "conflict",
                422 => "invalid",
                429 => "too_many_requests",
                504 => "timeout",
                _ => "error",
            }
            .into();
        }
        _ => {}
    }
    let mut out = String::new();
    for (i, c) in server.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_reasons_read_in_snake_case() {
        assert_eq!(reason("NotFound", 404), "not_found");
        assert_eq!(reason("AlreadyExists", 409), "already_exists");
        assert_eq!(reason("Conflict", 409), "conflict");
        assert_eq!(reason("Invalid", 422), "invalid");
        assert_eq!(reason("ServerTimeout", 500), "timeout");
        assert_eq!(reason("", 403), "forbidden");
    }

    #[test]
    fn the_thrown_value_names_verb_object_and_the_servers_message() {
        let f = Failure::new("conflict", 409, "the object has been modified");
        let v = f.value("patch", "v1/Pod default/web");
        assert_eq!(v["reason"], "conflict");
        assert_eq!(v["code"], 409);
        assert_eq!(
            v["error"],
            "k8s::patch v1/Pod default/web: the object has been modified (conflict, 409)"
        );
    }
}
