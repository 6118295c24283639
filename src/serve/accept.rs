//! Accepting connections without spinning: when `accept` fails for a reason that outlives one
//! connection (no file descriptors left, no memory), the loop waits before trying again, doubling
//! the wait up to [`MAX_DELAY`], and logs why at `warn`, at most once per [`LOG_EVERY`] with the
//! number of failures it did not log. Errors that concern only the connection being accepted
//! (reset or aborted by the client) are skipped at once.

use std::io;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// The first wait after a failed accept.
pub(super) const FIRST_DELAY: Duration = Duration::from_millis(5);
/// The longest wait between two accept attempts while they keep failing.
pub(super) const MAX_DELAY: Duration = Duration::from_secs(1);
/// At most one log line per this long while accepting keeps failing.
pub(super) const LOG_EVERY: Duration = Duration::from_secs(10);

/// A listener's accept loop for `server` (named in logs: `metrics`, `webhook`).
#[derive(Debug)]
pub(crate) struct Accept {
    listener: TcpListener,
    server: &'static str,
    delay: Option<Duration>,
    throttle: Throttle,
}

impl Accept {
    pub(crate) fn new(listener: TcpListener, server: &'static str) -> Self {
        Self {
            listener,
            server,
            delay: None,
            throttle: Throttle::new(LOG_EVERY),
        }
    }

    /// The next connection, waiting out accept failures. Cancel-safe: dropping the future loses
    /// no connection.
    pub(crate) async fn next(&mut self) -> TcpStream {
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    if self.delay.take().is_some() {
                        tracing::info!(server = self.server, "accepting connections again");
                        self.throttle.reset();
                    }
                    return stream;
                }
                Err(e) if concerns_one_connection(&e) => {
                    tracing::debug!(server = self.server, error = %e, "connection failed while being accepted");
                }
                Err(e) => {
                    let delay = next_delay(self.delay);
                    self.delay = Some(delay);
                    if let Some(suppressed) = self.throttle.ready(Instant::now()) {
                        tracing::warn!(
                            server = self.server,
                            error = %e,
                            retry_in = ?delay,
                            suppressed,
                            "cannot accept connections; backing off"
                        );
                    }
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// Errors of one connection, not of the listener: the next accept may well succeed.
fn concerns_one_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// The wait after another failure: [`FIRST_DELAY`], then doubling up to [`MAX_DELAY`].
fn next_delay(current: Option<Duration>) -> Duration {
    current.map_or(FIRST_DELAY, |d| (d * 2).min(MAX_DELAY))
}

/// Lets one event through per period and counts the rest.
#[derive(Debug)]
pub(crate) struct Throttle {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` when an event at `now` may be logged, `n` being how many were not since the
    /// last one; `None` when it must not.
    pub(crate) fn ready(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < self.every => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }

    fn reset(&mut self) {
        self.last = None;
        self.suppressed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_from_the_first_up_to_the_cap() {
        let mut d = None;
        let mut seen = Vec::new();
        for _ in 0..12 {
            let next = next_delay(d);
            seen.push(next);
            d = Some(next);
        }
        assert_eq!(seen[0], FIRST_DELAY);
        assert_eq!(seen[1], FIRST_DELAY * 2);
        assert!(seen.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*seen.last().unwrap(), MAX_DELAY);
    }

    #[tokio::test(start_paused = true)]
    async fn throttle_logs_once_per_period_and_counts_the_rest() {
        let mut t = Throttle::new(Duration::from_secs(10));
        let start = Instant::now();
        assert_eq!(t.ready(start), Some(0));
        for ms in [1, 500, 9_999] {
            assert_eq!(t.ready(start + Duration::from_millis(ms)), None);
        }
        assert_eq!(t.ready(start + Duration::from_secs(10)), Some(3));
        assert_eq!(t.ready(start + Duration::from_secs(11)), None);
    }

    #[test]
    fn resets_and_aborts_concern_one_connection_but_running_out_of_files_does_not() {
        let e = |k| io::Error::from(k);
        assert!(concerns_one_connection(&e(
            io::ErrorKind::ConnectionAborted
        )));
        assert!(concerns_one_connection(&e(io::ErrorKind::ConnectionReset)));
        // EMFILE, what `accept` returns when the process has no file descriptor left.
        assert!(!concerns_one_connection(&io::Error::from_raw_os_error(24)));
    }
}
