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
        (Err(e), Some(want)) if e.to_string().contains(want.as_str()) => {
            return Ok(failing_status(expect, &e));
        }
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

/// How the status a failing answer gives (`fail(msg, #{ status })`) misses `expect.status`.
fn failing_status(expect: &Expect, e: &reconcile::Error) -> Vec<Mismatch> {
    let mut out = Vec::new();
    if let Some(status) = &expect.status {
        let got = match e {
            reconcile::Error::Script(s) => s.failing_status().cloned().map(Value::Object),
            _ => None,
        };
        compare::compare("status", status, got.as_ref(), &mut out);
    }
    out
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

#[cfg(test)]
mod tests {
    use super::super::tests::run;

    const FAILING: &str = r#"
fn reconcile(obj, ctx) {
    if obj.spec.replicas % 2 == 0 {
        fail("replicas must be odd", #{ status: #{ phase: "Invalid",
            conditions: [#{ type: "Valid", status: "False", reason: "Odd" }] } });
    }
    #{}
}
"#;

    #[test]
    fn a_case_asserts_the_status_of_a_failing_reconcile() {
        let found = run(
            FAILING,
            "expect:\n  error: replicas must be odd\n  status: { phase: Invalid, conditions: [{ type: Valid, status: \"False\" }] }\n",
        );
        assert!(found.is_empty(), "{found:?}");
        assert_eq!(
            run(
                FAILING,
                "expect:\n  error: replicas must be odd\n  status: { phase: Ready }\n"
            ),
            [r#"status.phase: expected "Ready", got "Invalid""#]
        );
    }
}
