//! No I/O: the self-signed CA and the serving certificates it issues, with the facts khai
//! needs to decide whether a stored pair can still be used (names covered, expiry dates).
//!
//! A CA is kept as its certificate and key. A new serving certificate under a stored CA is
//! signed by a CA certificate rebuilt from the same fixed parameters and the stored key: its
//! subject and key are the stored CA's, so what it signs verifies against the stored `ca.crt`
//! (the caBundle the API server already has).

use super::tls::{Error, PemPair};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// How long a new CA is valid.
const CA_DAYS: i64 = 3650;
/// How long a new serving certificate is valid (never past its CA).
const CERT_DAYS: i64 = 1825;

/// A CA and a serving certificate it signed, as PEM, with what the certificate covers and when
/// each expires.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Material {
    pub ca_cert: String,
    pub ca_key: String,
    /// The serving certificate and its key.
    pub pair: PemPair,
    /// The DNS names and IP addresses the serving certificate is valid for.
    pub names: Vec<String>,
    pub ca_not_after: jiff::Timestamp,
    pub cert_not_after: jiff::Timestamp,
}

impl Material {
    /// A fresh CA valid from `now` and a serving certificate for `names` signed by it.
    pub(crate) fn new(names: &[String], now: jiff::Timestamp) -> Result<Self, Error> {
        let ca_key = KeyPair::generate()?;
        let ca_not_after = now + jiff::SignedDuration::from_hours(CA_DAYS * 24);
        let ca = ca_certificate(&ca_key, now, ca_not_after)?;
        let (pair, cert_not_after) = issue(&ca, &ca_key, ca_not_after, names, now)?;
        Ok(Self {
            ca_cert: ca.pem(),
            ca_key: ca_key.serialize_pem(),
            pair,
            names: names.to_vec(),
            ca_not_after,
            cert_not_after,
        })
    }

    /// A new serving certificate for `names` under this CA, valid from `now`.
    pub(crate) fn reissue(&self, names: &[String], now: jiff::Timestamp) -> Result<Self, Error> {
        let ca_key = KeyPair::from_pem(&self.ca_key)?;
        // Rebuilt only to sign with: same subject and key as `ca_cert`, which stays the bundle.
        let ca = ca_certificate(&ca_key, now, self.ca_not_after)?;
        let (pair, cert_not_after) = issue(&ca, &ca_key, self.ca_not_after, names, now)?;
        Ok(Self {
            pair,
            names: names.to_vec(),
            cert_not_after,
            ..self.clone()
        })
    }
}

/// A fresh CA and a serving certificate for `names` (DNS names or IP addresses) signed by it,
/// for one process alone. Returns the serving pair and the CA certificate (the caBundle).
pub fn self_signed(names: &[String]) -> Result<(PemPair, String), Error> {
    let made = Material::new(names, jiff::Timestamp::now())?;
    Ok((made.pair, made.ca_cert))
}

/// The CA certificate for `key`: the same subject for a given key, whenever it is made.
fn ca_certificate(
    key: &KeyPair,
    now: jiff::Timestamp,
    not_after: jiff::Timestamp,
) -> Result<Certificate, Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "khai webhook CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut ca, now, not_after);
    Ok(ca.self_signed(key)?)
}

/// A serving certificate for `names` signed by `ca`, valid from `now` until [`CERT_DAYS`] later
/// or `ca_not_after`, whichever is first; returns it and its expiry.
fn issue(
    ca: &Certificate,
    ca_key: &KeyPair,
    ca_not_after: jiff::Timestamp,
    names: &[String],
    now: jiff::Timestamp,
) -> Result<(PemPair, jiff::Timestamp), Error> {
    let not_after = (now + jiff::SignedDuration::from_hours(CERT_DAYS * 24)).min(ca_not_after);
    let mut leaf = CertificateParams::new(names.to_vec())?;
    let cn = names.first().map_or("khai-webhook", String::as_str);
    leaf.distinguished_name.push(DnType::CommonName, cn);
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    validity(&mut leaf, now, not_after);
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, ca, ca_key)?;
    let pair = PemPair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    };
    Ok((pair, not_after))
}

/// Sets `params` valid from the day before `now` (clocks differ) to the day of `until` (UTC), as
/// rcgen takes validity dates.
fn validity(params: &mut CertificateParams, now: jiff::Timestamp, until: jiff::Timestamp) {
    let day = |t: jiff::Timestamp| {
        let d = t.to_zoned(jiff::tz::TimeZone::UTC).date();
        rcgen::date_time_ymd(
            i32::from(d.year()),
            u8::try_from(d.month()).unwrap_or(1),
            u8::try_from(d.day()).unwrap_or(1),
        )
    };
    params.not_before = day(now - jiff::SignedDuration::from_hours(24));
    params.not_after = day(until);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use std::sync::Arc;

    /// Whether `pair`'s certificate verifies for `name` against `ca` alone, as a client
    /// trusting only that caBundle would check it.
    fn verifies(ca: &str, pair: &PemPair, name: &str) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        let leaf = CertificateDer::from_pem_slice(pair.cert.as_bytes()).unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        verifier
            .verify_server_cert(&leaf, &[], &name, &[], UnixTime::now())
            .is_ok()
    }

    #[test]
    fn a_certificate_reissued_under_a_stored_ca_verifies_against_its_ca_cert() {
        let now = jiff::Timestamp::now();
        let first = Material::new(&["127.0.0.1".into()], now).unwrap();
        assert!(verifies(&first.ca_cert, &first.pair, "127.0.0.1"));
        let next = first
            .reissue(&["127.0.0.1".into(), "svc.ns.svc".into()], now)
            .unwrap();
        assert_eq!(next.ca_cert, first.ca_cert);
        assert!(verifies(&first.ca_cert, &next.pair, "svc.ns.svc"));
        assert!(verifies(&first.ca_cert, &next.pair, "127.0.0.1"));
        let other = Material::new(&["127.0.0.1".into()], now).unwrap();
        assert!(
            !verifies(&other.ca_cert, &next.pair, "127.0.0.1"),
            "another CA does not"
        );
    }

    #[test]
    fn a_certificate_never_outlives_its_ca() {
        let now = jiff::Timestamp::now();
        let mut made = Material::new(&["a".into()], now).unwrap();
        assert!(made.cert_not_after < made.ca_not_after);
        made.ca_not_after = now + jiff::SignedDuration::from_hours(24 * 40);
        let next = made.reissue(&["a".into()], now).unwrap();
        assert_eq!(next.cert_not_after, made.ca_not_after);
    }
}
