//! The webhook server's certificate: made at start (`tls = "self-signed"`) or read from files
//! (`tls = "files"`) and re-read when they change, with no restart.
//!
//! The serving certificate lives in a [`Resolver`] that every TLS handshake asks, so swapping
//! it takes effect on the next connection. Files are polled (contents compared), which also
//! catches the symlink swap Kubernetes does when a mounted Secret changes; a file that does not
//! parse is logged and the certificate that worked stays in use.

use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Problems making or reading a certificate; each names the file or the step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {cause}", file.display())]
    Read {
        file: PathBuf,
        cause: crate::config::files::ReadError,
    },
    #[error("cannot read {}: reading task failed: {cause}", file.display())]
    ReadTask {
        file: PathBuf,
        cause: tokio::task::JoinError,
    },
    #[error("{}: {message}", file.display())]
    Parse { file: PathBuf, message: String },
    #[error("cannot create a self-signed certificate: {0}")]
    Generate(rcgen::Error),
    #[error("TLS setup failed: {0}")]
    Rustls(rustls::Error),
}

// The messages above quote these errors, so they are converted by hand rather than with
// `#[from]`, which would also make them the source and a chain printer would repeat them.
impl From<rcgen::Error> for Error {
    fn from(e: rcgen::Error) -> Self {
        Self::Generate(e)
    }
}

impl From<rustls::Error> for Error {
    fn from(e: rustls::Error) -> Self {
        Self::Rustls(e)
    }
}

/// A certificate chain and its key, as PEM text.
#[derive(Debug, Clone, PartialEq)]
pub struct PemPair {
    pub cert: String,
    pub key: String,
}

/// Parses a PEM chain and key into what rustls serves; `files` name them in errors.
pub(crate) fn certified_key(pair: &PemPair, files: (&Path, &Path)) -> Result<CertifiedKey, Error> {
    let parse = |file: &Path, message: String| Error::Parse {
        file: file.to_path_buf(),
        message,
    };
    let certs = CertificateDer::pem_slice_iter(pair.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| parse(files.0, format!("not a PEM certificate chain: {e}")))?;
    if certs.is_empty() {
        return Err(parse(files.0, "no certificate found".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(pair.key.as_bytes())
        .map_err(|e| parse(files.1, format!("not a PEM private key: {e}")))?;
    let signer = any_supported_type(&key)
        .map_err(|e| parse(files.1, format!("unsupported private key: {e}")))?;
    Ok(CertifiedKey::new(certs, signer))
}

/// Reads a certificate and key file pair on the blocking pool, so a slow disk, a network mount
/// or a file that blocks (a FIFO) never stalls the async workers.
pub(crate) async fn load_pair(cert: &Path, key: &Path) -> Result<PemPair, Error> {
    let (cert, key) = (cert.to_path_buf(), key.to_path_buf());
    let file = cert.clone();
    tokio::task::spawn_blocking(move || read_pair(&cert, &key))
        .await
        .unwrap_or_else(|e| Err(Error::ReadTask { file, cause: e }))
}

/// Reads a certificate and key file pair (regular files of at most 1 MiB); blocks the thread.
fn read_pair(cert: &Path, key: &Path) -> Result<PemPair, Error> {
    let read = |file: &Path| {
        crate::config::files::read_regular(file).map_err(|cause| Error::Read {
            file: file.to_path_buf(),
            cause,
        })
    };
    Ok(PemPair {
        cert: read(cert)?,
        key: read(key)?,
    })
}

/// The certificate every handshake gets; swapped in place on reload.
#[derive(Debug)]
pub(crate) struct Resolver(RwLock<Arc<CertifiedKey>>);

impl Resolver {
    pub(crate) fn new(key: CertifiedKey) -> Arc<Self> {
        Arc::new(Self(RwLock::new(Arc::new(key))))
    }

    fn set(&self, key: CertifiedKey) {
        let mut slot = self.0.write().unwrap_or_else(|e| e.into_inner());
        *slot = Arc::new(key);
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

/// A rustls server config serving whatever `resolver` holds, HTTP/1.1 only.
pub(crate) fn server_config(resolver: Arc<Resolver>) -> Result<rustls::ServerConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Re-reads `cert` and `key` every `interval` and swaps them into `resolver` when their
/// contents change and parse; runs until `shutdown`.
pub(crate) async fn watch_files(
    resolver: Arc<Resolver>,
    files: (PathBuf, PathBuf),
    mut current: PemPair,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let (cert, key) = (&files.0, &files.1);
        let pair = match load_pair(cert, key).await {
            Ok(p) if p.cert == current.cert && p.key == current.key => continue,
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "keeping the current webhook certificate");
                continue;
            }
        };
        match certified_key(&pair, (cert, key)) {
            Ok(k) => {
                resolver.set(k);
                current = pair;
                tracing::info!(cert = %cert.display(), "reloaded webhook certificate");
            }
            // Mid-rotation one file may be new and the other old; the next tick tries again.
            Err(e) => tracing::warn!(error = %e, "keeping the current webhook certificate"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message quotes the cause, so the cause is not also the error's source: an error
    /// chain printer (`khai`'s `{:#}`) would print it twice.
    #[test]
    fn a_cause_is_printed_once_in_the_error_chain() {
        let e = Error::from(rustls::Error::General("no key".into()));
        let chain = format!("{:#}", anyhow::Error::new(e));
        assert_eq!(chain.matches("no key").count(), 1, "{chain}");
        assert!(chain.starts_with("TLS setup failed: "), "{chain}");
    }

    #[test]
    fn self_signed_pair_loads_into_rustls() {
        let (pair, ca) =
            crate::webhook::ca::self_signed(&["svc.ns.svc".into(), "127.0.0.1".into()]).unwrap();
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        certified_key(&pair, (Path::new("c.pem"), Path::new("k.pem"))).unwrap();
    }

    /// Reading the files must not block the async workers. A FIFO with no writer
    /// blocks whoever opens it; on a one-thread runtime, a read on the worker would stall every
    /// other task for good.
    #[test]
    fn reloading_from_a_file_that_blocks_does_not_stall_the_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let made = std::process::Command::new("mkfifo")
            .arg(&cert)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo failed");
        std::fs::write(&key, "unused").unwrap();
        let (pair, _) = crate::webhook::ca::self_signed(&["a".into()]).unwrap();
        let resolver =
            Resolver::new(certified_key(&pair, (Path::new("c"), Path::new("k"))).unwrap());
        let (done, finished) = std::sync::mpsc::channel();
        let files = (cert.clone(), key);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let reload = watch_files(
                    resolver,
                    files,
                    pair,
                    Duration::from_millis(1),
                    CancellationToken::new(),
                );
                tokio::spawn(reload);
                // Ticks of another task on the same (only) worker thread.
                for _ in 0..20 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            });
            let _ = done.send(());
        });
        let ran = finished.recv_timeout(Duration::from_secs(10));
        // Unblock a reader stuck on the FIFO, whatever the outcome (O_NONBLOCK: never wait for
        // one).
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(0o4000)
            .open(&cert);
        assert!(
            ran.is_ok(),
            "the runtime stalled: the certificate reload blocked its only worker thread"
        );
    }

    #[test]
    fn garbage_key_names_the_key_file() {
        let (mut pair, _) = crate::webhook::ca::self_signed(&["a".into()]).unwrap();
        pair.key = "nope".into();
        let err = certified_key(&pair, (Path::new("c.pem"), Path::new("k.pem")))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("k.pem: not a PEM private key"), "{err}");
    }
}
