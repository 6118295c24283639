//! webhook-load: an open-loop HTTPS load generator for scripts/bench-webhook. It POSTs one body
//! at a fixed offered rate over a fixed number of keep-alive HTTP/1.1 connections and prints one
//! JSON line with the counts and the latency percentiles.
//!
//! Open loop, as wrk2 does it: request i is *due* at `start + i / rate`, whether or not earlier
//! requests have been answered, and its latency runs from when it was due, not from when a free
//! connection got round to sending it. A server that stalls therefore shows the stall in every
//! request that waited behind it (no coordinated omission). Due times are released by a pacing
//! thread that sleeps with the OS timer (tens of µs on Linux) rather than tokio's, which rounds
//! up to whole milliseconds; `send_lag` in the output is how late requests actually left, so a
//! generator that cannot keep up is visible rather than hidden.
//!
//! `--rate 0` is closed loop instead: every connection sends its next request as soon as the
//! last one is answered (what wrk does), latency from the send.
//!
//! The server's certificate is not verified: khai's webhook serves a self-signed one and the
//! generator only ever talks to 127.0.0.1.

mod tls;

use anyhow::{Context, Result, anyhow};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, mpsc};

#[derive(Debug, Parser)]
#[command(
    name = "webhook-load",
    about = "Open-loop HTTPS POST load at a fixed rate"
)]
struct Args {
    /// `https://127.0.0.1:PORT/path`.
    #[arg(long)]
    url: String,
    /// The request body (an AdmissionReview).
    #[arg(long)]
    body: std::path::PathBuf,
    /// Requests per second offered; 0: closed loop, as fast as answers come back.
    #[arg(long, default_value_t = 8000)]
    rate: u64,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of the same load before the measured span, not recorded.
    #[arg(long, default_value_t = 0.0)]
    warmup: f64,
    /// Keep-alive connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("webhook-load: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// One answered (or failed) request.
struct Sample {
    /// Due (open loop) or sent (closed loop) → answer read, µs.
    latency_us: u64,
    /// Due → sent, µs; 0 in closed loop.
    lag_us: u64,
    ok: bool,
}

async fn run(args: Args) -> Result<()> {
    let target = Target::new(&args)?;
    let body = Bytes::from(
        std::fs::read(&args.body).with_context(|| format!("reading {}", args.body.display()))?,
    );
    let mut senders = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        senders.push(target.connect().await?);
    }
    if args.warmup > 0.0 {
        drive(&args, &target, &body, &mut senders, args.warmup).await?;
    }
    let started = Instant::now();
    let samples = drive(&args, &target, &body, &mut senders, args.duration).await?;
    let elapsed = started.elapsed();
    println!("{}", summary(&args, &samples, elapsed));
    Ok(())
}

/// Runs the load for `seconds` and returns every request's sample.
async fn drive(
    args: &Args,
    target: &Target,
    body: &Bytes,
    senders: &mut Vec<Sender>,
    seconds: f64,
) -> Result<Vec<Sample>> {
    let start = Instant::now();
    let span = Duration::from_secs_f64(seconds);
    // Open loop: the pacing thread sends each request's due time; connections take them in
    // turn. The channel holds at most one second of load: beyond that the pacer waits, and the
    // requests it then releases late still count from when they were due.
    let due = if args.rate > 0 {
        let (tx, rx) = mpsc::channel::<Instant>(args.rate.max(1) as usize);
        let rate = args.rate;
        std::thread::spawn(move || pace(&tx, start, span, rate));
        Some(Arc::new(Mutex::new(rx)))
    } else {
        None
    };
    let mut tasks = Vec::new();
    for sender in senders.drain(..) {
        let (target, body, due) = (target.clone(), body.clone(), due.clone());
        tasks.push(tokio::spawn(async move {
            connection(sender, &target, body, due, start + span).await
        }));
    }
    let mut samples = Vec::new();
    for task in tasks {
        let (sender, mut mine) = task
            .await
            .map_err(|e| anyhow!("a connection task: {e}"))??;
        senders.push(sender);
        samples.append(&mut mine);
    }
    Ok(samples)
}

/// Releases due times at `rate` per second from `start` for `span`.
fn pace(tx: &mpsc::Sender<Instant>, start: Instant, span: Duration, rate: u64) {
    let total = (span.as_secs_f64() * rate as f64) as u64;
    for i in 0..total {
        let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        if tx.blocking_send(due).is_err() {
            return;
        }
    }
}

/// One connection's requests until the load ends.
async fn connection(
    mut sender: Sender,
    target: &Target,
    body: Bytes,
    due: Option<Arc<Mutex<mpsc::Receiver<Instant>>>>,
    end: Instant,
) -> Result<(Sender, Vec<Sample>)> {
    let mut samples = Vec::new();
    loop {
        let due_at = match &due {
            Some(rx) => match rx.lock().await.recv().await {
                Some(at) => Some(at),
                None => break,
            },
            None if Instant::now() >= end => break,
            None => None,
        };
        let sent = Instant::now();
        let ok = match sender.send(target, body.clone()).await {
            Ok(ok) => ok,
            Err(_) => {
                // A broken connection: count the failure and open a new one.
                sender = target.connect().await?;
                false
            }
        };
        let from = due_at.unwrap_or(sent);
        samples.push(Sample {
            latency_us: from.elapsed().as_micros() as u64,
            lag_us: sent.saturating_duration_since(from).as_micros() as u64,
            ok,
        });
    }
    Ok((sender, samples))
}

/// The JSON line: the same keys scripts/bench-webhook reads from wrk, plus p99.9 and the lag.
fn summary(args: &Args, samples: &[Sample], elapsed: Duration) -> serde_json::Value {
    let mut latency: Vec<u64> = samples.iter().map(|s| s.latency_us).collect();
    let mut lag: Vec<u64> = samples.iter().map(|s| s.lag_us).collect();
    latency.sort_unstable();
    lag.sort_unstable();
    let errors = samples.iter().filter(|s| !s.ok).count();
    serde_json::json!({
        "offered_rate": args.rate,
        "connections": args.connections,
        "requests": samples.len(),
        "duration_us": elapsed.as_micros() as u64,
        "errors": errors,
        "non_2xx": 0,
        "p50_us": percentile(&latency, 0.50),
        "p99_us": percentile(&latency, 0.99),
        "p999_us": percentile(&latency, 0.999),
        "max_us": latency.last().copied().unwrap_or(0),
        "send_lag_p50_us": percentile(&lag, 0.50),
        "send_lag_p99_us": percentile(&lag, 0.99),
    })
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u64], p: f64) -> u64 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).max(1);
    sorted.get(rank - 1).copied().unwrap_or(0)
}

/// Where requests go and how to open a connection there.
#[derive(Clone)]
struct Target {
    host: String,
    port: u16,
    path: String,
    tls: tokio_rustls::TlsConnector,
}

impl Target {
    fn new(args: &Args) -> Result<Target> {
        let uri: http::Uri = args.url.parse().context("--url")?;
        if uri.scheme_str() != Some("https") {
            return Err(anyhow!("--url must be https://HOST:PORT/PATH"));
        }
        Ok(Target {
            host: uri.host().unwrap_or("127.0.0.1").to_string(),
            port: uri.port_u16().unwrap_or(443),
            path: uri.path().to_string(),
            tls: tls::connector().context("setting up TLS")?,
        })
    }

    async fn connect(&self) -> Result<Sender> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port))
            .await
            .with_context(|| format!("connecting to {}:{}", self.host, self.port))?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from(self.host.clone())
            .context("the --url host as a TLS server name")?;
        let stream = self.tls.connect(name, tcp).await.context("TLS handshake")?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP/1.1 handshake")?;
        tokio::spawn(conn);
        Ok(Sender(send))
    }
}

/// One keep-alive connection.
struct Sender(hyper::client::conn::http1::SendRequest<Full<Bytes>>);

impl Sender {
    /// POSTs `body`; Ok(true) for a 2xx answer read in full.
    async fn send(&mut self, target: &Target, body: Bytes) -> Result<bool> {
        let req = http::Request::post(&target.path)
            .header(http::header::HOST, &target.host)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))?;
        let res = self.0.send_request(req).await?;
        let ok = res.status().is_success();
        res.into_body().collect().await?;
        Ok(ok)
    }
}
