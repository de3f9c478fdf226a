//! TLS settings weir's client and server share: one crypto provider (ring, chosen explicitly so
//! no process-wide provider has to be installed), the roots a client trusts, and PEM files read
//! with errors that name the file and what was missing.

use std::path::Path;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The crypto provider of every TLS configuration weir builds (client and server), so the whole
/// binary uses one implementation.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Which certificate authorities a client trusts.
#[derive(Debug, Clone)]
pub enum Roots {
    /// The Mozilla root certificates compiled into weir (webpki-roots): what the adapters use,
    /// the same on every host.
    Mozilla,
    /// The host's trust store (on Linux `/etc/ssl/certs`, or `SSL_CERT_FILE` / `SSL_CERT_DIR`),
    /// so a CA the administrator installed is trusted; the Mozilla roots when the host has none.
    System,
    /// Only these certificates (a private CA given with `--ca`).
    Only(Vec<CertificateDer<'static>>),
}

impl Roots {
    /// The root store.
    pub(crate) fn store(&self) -> RootCertStore {
        let mozilla = || RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        match self {
            Roots::Mozilla => mozilla(),
            Roots::System => {
                let mut store = RootCertStore::empty();
                // Unreadable entries of the host's store are skipped: the others still count.
                let (added, _ignored) =
                    store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
                if added == 0 { mozilla() } else { store }
            }
            Roots::Only(certificates) => {
                let mut store = RootCertStore::empty();
                store.add_parsable_certificates(certificates.iter().cloned());
                store
            }
        }
    }
}

/// Why a PEM file could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemError(String);

impl std::fmt::Display for PemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PemError {}

/// Every certificate (`-----BEGIN CERTIFICATE-----`) in the PEM file at `path`, in order; an
/// error when the file cannot be read, holds none or holds a damaged one.
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let bytes = read(path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| {
            PemError(format!(
                "{}: not a readable PEM file: {error}",
                path.display()
            ))
        })?;
    if certificates.is_empty() {
        return Err(PemError(format!(
            "{}: no certificate in it (expected PEM text with -----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    // Checked here, so a damaged certificate is reported with its file, not at the first
    // connection.
    for (index, certificate) in certificates.iter().enumerate() {
        if let Err(error) = webpki_check(certificate) {
            return Err(PemError(format!(
                "{}: certificate {} of {} cannot be read: {error}",
                path.display(),
                index + 1,
                certificates.len()
            )));
        }
    }
    Ok(certificates)
}

/// A certificate parses as X.509 (rustls's own check, as a trust anchor).
fn webpki_check(certificate: &CertificateDer<'_>) -> Result<(), rustls::Error> {
    let mut store = RootCertStore::empty();
    store.add(certificate.clone().into_owned())
}

/// The private key (PKCS#8, PKCS#1 or SEC1) in the PEM file at `path`.
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| match error {
        rustls::pki_types::pem::Error::NoItemsFound => PemError(format!(
            "{}: no private key in it (expected PEM text with -----BEGIN PRIVATE KEY----- \
             (PKCS#8), -----BEGIN RSA PRIVATE KEY----- or -----BEGIN EC PRIVATE KEY-----)",
            path.display()
        )),
        other => PemError(format!(
            "{}: not a readable PEM file: {other}",
            path.display()
        )),
    })
}

fn read(path: &Path) -> Result<Vec<u8>, PemError> {
    std::fs::read(path)
        .map_err(|error| PemError(format!("{}: cannot read it: {error}", path.display())))
}

/// A TLS server configuration for the certificate chain in `cert` and the key in `key` (PEM
/// files), offering HTTP/1.1 by ALPN; an error naming the file at fault, or saying that the key
/// is not the certificate's.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, PemError> {
    let chain = read_certificates(cert)?;
    let private_key = read_private_key(key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| PemError(format!("TLS cannot be set up: {error}")))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|error| match error {
            rustls::Error::InconsistentKeys(_) => PemError(format!(
                "{}: this key does not belong to the certificate in {} (its public key differs); \
                 give the key the certificate was issued for",
                key.display(),
                cert.display()
            )),
            other => PemError(format!(
                "{} with {}: cannot be used: {other}",
                cert.display(),
                key.display()
            )),
        })?;
    // weir's API speaks HTTP/1.1 only (axum without its http2 feature).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Whether `error` (or its chain of causes) is a TLS certificate that was not accepted, and
/// rustls's reason.
pub(crate) fn certificate_problem(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(cause) = next {
        // tokio-rustls wraps rustls's error in an io::Error and hyper-rustls wraps that in
        // another; an io::Error's `source` skips what it wraps, so unwrap them here.
        let mut wrapped = Some(cause);
        while let Some(candidate) = wrapped {
            if let Some(tls) = candidate.downcast_ref::<rustls::Error>() {
                return match tls {
                    rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented
                    | rustls::Error::UnsupportedNameType => Some(tls.to_string()),
                    _ => None,
                };
            }
            wrapped = candidate
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static));
        }
        next = cause.source();
    }
    None
}
