//! Tests only: the log lines code writes, captured.

use std::sync::{Arc, Mutex};

/// Log lines (debug and up, without colours) written while `f` runs on this thread or, called
/// from it, on the blocking pool.
pub(crate) async fn capture<F: std::future::Future>(f: F) -> (F::Output, String) {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            crate::sync::lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let out = f.await;
    let text = String::from_utf8_lossy(&crate::sync::lock(&sink.0)).into_owned();
    (out, text)
}
