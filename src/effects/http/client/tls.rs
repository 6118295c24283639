//! TLS for scripts' `https` requests: the system's roots (`rustls-native-certs`: the CA bundle
//! of khai's image, which the cluster's admin controls, as kube's own client does) plus
//! `[operator.http] ca_file`.

use super::Error;
use crate::effects::http::{HttpError, Reason};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::path::PathBuf;
use std::sync::Arc;

/// The client configuration trusting the system's roots and `ca_file` (its path and PEM).
pub(super) fn config(ca_file: Option<(PathBuf, String)>) -> Result<rustls::ClientConfig, Error> {
    let mut roots = rustls::RootCertStore::empty();
    // Unreadable system certificates are skipped, as kube's client does; `ca_file` may be all
    // there is.
    let native = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(native.certs);
    if let Some((path, pem)) = ca_file {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .filter_map(Result::ok)
            .collect();
        if certs.is_empty() {
            return Err(Error::NoCa { path });
        }
        for c in certs {
            roots.add(c).map_err(|cause| Error::BadCa {
                path: path.clone(),
                cause,
            })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// `host` as the name a server's certificate must be for.
pub(super) fn server_name(host: &str) -> Result<ServerName<'static>, HttpError> {
    ServerName::try_from(host.to_string())
        .map_err(|e| HttpError::new(Reason::Tls, format!("{host:?} as a TLS name: {e}")))
}
