//! `khai status`: the console's views in a terminal. It reads the JSON API a `khai run
//! --console ADDR` serves (through `kubectl port-forward` for a khai in a cluster) and prints the
//! overview, or with `--object KIND/NAME` that object's last reconciles and Events.

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use serde_json::Value;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where `khai run --console` serves.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8081",
        env = "KHAI_CONSOLE"
    )]
    pub console: SocketAddr,
    /// Show one object: its kind (as the config names it) or a controller's name, then `/` and
    /// the object's name.
    #[arg(long, value_name = "KIND/NAME")]
    pub object: Option<String>,
    /// The object's namespace; without it, the one object of that name.
    #[arg(long, short = 'n', value_name = "NS")]
    pub namespace: Option<String>,
    /// Print the console's JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Why `khai status` printed nothing.
#[derive(Debug, thiserror::Error)]
pub(super) enum Error {
    #[error(
        "cannot reach the console at {addr}: {source} (is `khai run --console {addr}` running? for a khai in a cluster, `kubectl port-forward` to it first)"
    )]
    Connect {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the console at {addr} did not answer {path}: {source}")]
    Http {
        addr: SocketAddr,
        path: String,
        #[source]
        source: hyper::Error,
    },
    #[error("the console answered {path} with {status}: {message}")]
    Api {
        path: String,
        status: u16,
        message: String,
    },
    #[error("--object {0}: expected KIND/NAME, such as Cache/demo")]
    ObjectSyntax(String),
    #[error("no controller reconciles {0}; the console knows: {1}")]
    NoController(String, String),
    #[error("{0} has not been reconciled since khai started (or the console forgot it)")]
    NoObject(String),
    #[error("{object} is in several namespaces ({namespaces}); say which with -n")]
    Ambiguous { object: String, namespaces: String },
    #[error("failed to start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

pub(super) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::Runtime)?;
    let out = rt.block_on(show(&args))?;
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

async fn show(args: &Args) -> Result<String, Error> {
    let overview = get(args.console, "/api/overview").await?;
    let Some(object) = &args.object else {
        return Ok(if args.json {
            pretty(&overview)
        } else {
            overview_text(&overview)
        });
    };
    let (kind, name) = object
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
        .ok_or_else(|| Error::ObjectSyntax(object.clone()))?;
    let controllers: Vec<&str> = overview["controllers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["kind"]
                .as_str()
                .is_some_and(|k| k.eq_ignore_ascii_case(kind))
                || c["name"].as_str() == Some(kind)
        })
        .filter_map(|c| c["name"].as_str())
        .collect();
    if controllers.is_empty() {
        let known = list(&overview["controllers"], |c| {
            format!("{} ({})", str_of(&c["name"]), str_of(&c["kind"]))
        });
        return Err(Error::NoController(kind.to_string(), known));
    }
    let mut out = String::new();
    for controller in controllers {
        let c = get(args.console, &format!("/api/controllers/{controller}")).await?;
        let matches: Vec<&Value> = c["objects"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o["name"] == name)
            .filter(|o| {
                args.namespace.is_none() || o["namespace"].as_str() == args.namespace.as_deref()
            })
            .collect();
        let namespace = match matches.as_slice() {
            [] => continue,
            [one] => one["namespace"].as_str().unwrap_or("-").to_string(),
            many => {
                return Err(Error::Ambiguous {
                    object: object.clone(),
                    namespaces: list_of(many, |o| str_of(&o["namespace"])),
                });
            }
        };
        let path = format!("/api/objects/{controller}/{namespace}/{name}");
        let detail = get(args.console, &path).await?;
        out.push_str(&if args.json {
            pretty(&detail)
        } else {
            object_text(&detail)
        });
    }
    if out.is_empty() {
        return Err(Error::NoObject(object.clone()));
    }
    Ok(out)
}

/// GETs `path` from the console and parses its JSON.
async fn get(addr: SocketAddr, path: &str) -> Result<Value, Error> {
    let http = |source| Error::Http {
        addr,
        path: path.to_string(),
        source,
    };
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|source| Error::Connect { addr, source })?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(http)?;
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())
        .map_err(|e| Error::Api {
            path: path.to_string(),
            status: 0,
            message: e.to_string(),
        })?;
    let res = sender.send_request(req).await.map_err(http)?;
    let status = res.status();
    let body = res.into_body().collect().await.map_err(http)?.to_bytes();
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !status.is_success() {
        return Err(Error::Api {
            path: path.to_string(),
            status: status.as_u16(),
            message: value["error"]
                .as_str()
                .unwrap_or("no reason given")
                .to_string(),
        });
    }
    Ok(value)
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn list(v: &Value, f: impl Fn(&Value) -> String) -> String {
    list_of(
        &v.as_array()
            .map(|a| a.iter().collect::<Vec<_>>())
            .unwrap_or_default(),
        f,
    )
}

fn list_of(items: &[&Value], f: impl Fn(&Value) -> String) -> String {
    items.iter().map(|v| f(v)).collect::<Vec<_>>().join(", ")
}

/// `12s ago` for a time in milliseconds since the Unix epoch.
fn ago(at_ms: &Value) -> String {
    let Some(at) = at_ms.as_u64() else {
        return "-".into();
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.saturating_sub(Duration::from_millis(at)).as_secs();
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        _ => format!("{}h ago", secs / 3600),
    }
}

fn millis(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |ms| format!("{ms:.1}ms"))
}

/// Rows under a header, each column as wide as its widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(text.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for row in rows {
        line(row.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

fn overview_text(o: &Value) -> String {
    let mut out = String::new();
    let rev = &o["revision"];
    let _ = writeln!(
        out,
        "operator  {} (khai {})",
        str_of(&o["operator"]),
        str_of(&o["khai_version"])
    );
    let _ = writeln!(
        out,
        "config    {} from {}, loaded {}",
        str_of(&rev["hash"]),
        str_of(&rev["source"]),
        ago(&rev["loaded_at_ms"])
    );
    let leases = list(&o["leader_election"], |l| {
        let state = if l["leading"] == true {
            "leading"
        } else {
            "standing by"
        };
        format!("{}: {state}", str_of(&l["lease"]))
    });
    let leader = if leases.is_empty() {
        "no leader election (runs the controllers)".into()
    } else {
        leases
    };
    let _ = writeln!(out, "leader    {leader}");
    for r in o["reloads"].as_array().into_iter().flatten().rev().take(5) {
        let what = match &r["error"] {
            Value::String(e) => format!("failed: {e}"),
            _ => format!("{} {}", str_of(&r["result"]), str_of(&r["hash"])),
        };
        let _ = writeln!(out, "reload    {} {what}", ago(&r["at_ms"]));
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = o["controllers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let r = &c["rates"];
            vec![
                str_of(&c["name"]),
                str_of(&c["kind"]),
                str_of(&c["objects"]),
                str_of(&c["backoff"]),
                str_of(&c["damped"]),
                str_of(&c["queue_depth"]),
                str_of(&c["busy"]),
                str_of(&r["reconciles_last_minute"]),
                str_of(&r["errors_last_minute"]),
                millis(&r["p50_ms"]),
                millis(&r["p99_ms"]),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "CONTROLLER",
            "KIND",
            "OBJECTS",
            "BACKOFF",
            "DAMPED",
            "QUEUE",
            "BUSY",
            "PER MIN",
            "ERRORS/MIN",
            "P50",
            "P99",
        ],
        &rows,
    ));
    for (title, key) in [
        ("HANDLER", "handlers"),
        ("TIMER", "timers"),
        ("DAEMON", "daemons"),
        ("SCHEDULE", "schedules"),
        ("WEBHOOK", "webhooks"),
    ] {
        let rows: Vec<Vec<String>> = o[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                vec![
                    str_of(&e["target"]),
                    str_of(&e["script"]),
                    str_of(&e["function"]),
                    str_of(&e["when"]),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push('\n');
            out.push_str(&table(&[title, "SCRIPT", "FUNCTION", "WHEN"], &rows));
        }
    }
    out
}

fn object_text(o: &Value) -> String {
    let mut out = String::new();
    let shown = match &o["namespace"] {
        Value::String(ns) => format!("{ns}/{}", str_of(&o["name"])),
        _ => str_of(&o["name"]),
    };
    let _ = writeln!(
        out,
        "{} {shown} (controller {}): {}, phase {}",
        str_of(&o["kind"]),
        str_of(&o["controller"]),
        str_of(&o["state"]),
        str_of(&o["phase"])
    );
    let rows: Vec<Vec<String>> = o["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let writes = format!(
                "{} applied, {} unchanged, {} pruned{}",
                str_of(&t["applied"]),
                str_of(&t["unchanged"]),
                str_of(&t["pruned"]),
                if t["status_written"] == true {
                    ", status"
                } else {
                    ""
                }
            );
            vec![
                ago(&t["at_ms"]),
                millis(&t["took_ms"]),
                str_of(&t["result"]),
                writes,
            ]
        })
        .collect();
    out.push('\n');
    out.push_str(&table(&["WHEN", "TOOK", "RESULT", "WRITES"], &rows));
    if let Some(Value::String(error)) = o["history"].get(0).map(|t| &t["error"]) {
        let _ = writeln!(out, "\nlast error:\n{error}");
    }
    out.push('\n');
    match &o["events_error"] {
        Value::String(e) => {
            let _ = writeln!(out, "events: {e}");
        }
        _ => {
            let rows: Vec<Vec<String>> = o["events"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| {
                    vec![
                        str_of(&e["at"]),
                        str_of(&e["type"]),
                        str_of(&e["reason"]),
                        str_of(&e["message"]),
                    ]
                })
                .collect();
            out.push_str(&table(&["AT", "TYPE", "REASON", "MESSAGE"], &rows));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_object_prints_its_turns_and_its_last_error_in_full() {
        let o = json!({
            "kind": "Cache", "controller": "cache", "namespace": "default", "name": "bad",
            "state": "backoff", "phase": null,
            "history": [{"at_ms": 0, "took_ms": 1.5, "result": "error", "applied": 0,
                "unchanged": 0, "pruned": 0, "status_written": true,
                "error": "scripts/cache.rhai:12:5: size must be positive"}],
            "events": [{"at": "2026-01-01T00:00:00Z", "type": "Warning", "reason": "ScriptError", "message": "m"}],
            "events_error": null,
        });
        let text = object_text(&o);
        assert!(
            text.starts_with("Cache default/bad (controller cache): backoff, phase -"),
            "{text}"
        );
        assert!(
            text.contains("error   0 applied, 0 unchanged, 0 pruned, status"),
            "{text}"
        );
        assert!(
            text.contains("last error:\nscripts/cache.rhai:12:5: size must be positive"),
            "{text}"
        );
        assert!(text.contains("Warning  ScriptError  m"), "{text}");
    }
}
