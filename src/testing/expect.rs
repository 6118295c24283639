//! Comparing a script's answer (a plan, or an error) with what the case expects.

use super::case::Expect;
use super::compare;
use super::compare::Mismatch;
use super::problem::{Invalid, Problem};
use crate::reconcile::{self, Plan};
use serde_json::{Value, json};

/// Every way in which `answer` misses `expect`; `Err` for an expectation that is itself invalid.
pub(super) fn expectations(
    expect: &Expect,
    answer: Result<Plan, reconcile::Error>,
) -> Result<Vec<Mismatch>, Invalid> {
    let plan = match (answer, &expect.error) {
        (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => return Ok(Vec::new()),
        (Err(e), Some(want)) => {
            return Ok(vec![Mismatch::new(
                "error",
                format!("an error containing {}", json!(want)),
                json!(e.to_string()).to_string(),
            )]);
        }
        (Ok(_), Some(want)) => {
            return Ok(vec![Mismatch::new(
                "error",
                format!("an error containing {}", json!(want)),
                "success",
            )]);
        }
        (Err(e), None) => {
            return Ok(vec![Mismatch::new(
                "reconcile",
                "success",
                format!("error: {e}"),
            )]);
        }
        (Ok(plan), None) => plan,
    };
    compare_plan(expect, &plan)
}

/// [`expectations`] for a reconcile, whose failure shows too: an expected `error` that matches
/// compares the case's `status` and `events` with what khai writes and records when the
/// reconcile fails that way (`failed`).
pub(super) fn reconcile_expectations(
    expect: &Expect,
    answer: Result<Plan, reconcile::Error>,
    failed: impl FnOnce(&reconcile::Error) -> Plan,
) -> Result<Vec<Mismatch>, Invalid> {
    if let (Err(e), Some(want)) = (&answer, &expect.error)
        && e.to_string().contains(want.as_str())
    {
        return compare_plan(expect, &failed(e));
    }
    expectations(expect, answer)
}

pub(super) fn compare_plan(expect: &Expect, plan: &Plan) -> Result<Vec<Mismatch>, Invalid> {
    let mut out = Vec::new();
    if let Some(children) = &expect.children {
        let got = Value::Array(plan.children.clone());
        compare::compare(
            "children",
            &Value::Array(children.clone()),
            Some(&got),
            &mut out,
        );
    }
    if let Some(status) = &expect.status {
        let got = plan.status.clone().map(Value::Object);
        compare::compare("status", status, got.as_ref(), &mut out);
    }
    if let Some(requeue) = &expect.requeue_after {
        let want = match requeue {
            Value::Null => None,
            v => {
                let d = reconcile::parse_duration(v)
                    .map_err(|m| Problem::RequeueAfter(m).at("expect.requeue_after"))?;
                // What khai waits for: a shorter wait is raised to the floor.
                Some(d.max(reconcile::MIN_REQUEUE_AFTER))
            }
        };
        if want != plan.requeue_after {
            let show =
                |d: Option<std::time::Duration>| d.map_or("none".into(), |d| format!("{d:?}"));
            out.push(Mismatch::new(
                "requeue_after",
                show(want),
                show(plan.requeue_after),
            ));
        }
    }
    if let Some(events) = &expect.events {
        let got: Vec<Value> = plan
            .events
            .iter()
            .map(|e| {
                let ty = if e.warning { "Warning" } else { "Normal" };
                json!({ "type": ty, "reason": e.reason, "message": e.message })
            })
            .collect();
        compare::compare(
            "events",
            &Value::Array(events.clone()),
            Some(&Value::Array(got)),
            &mut out,
        );
    }
    Ok(out)
}
