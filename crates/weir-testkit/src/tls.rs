//! TLS for tests: a private CA and certificates made by the real `openssl` command, with the
//! commands docs/SECURITY.md ("TLS") gives to users, so those commands are tested too; and a
//! TLS client over loopback that trusts a given CA, for reading a stream (Server-Sent Events)
//! over HTTPS.
//!
//! Why `openssl` rather than committed PEM files or a certificate crate: the documentation tells
//! people to run these commands, running them here checks that they work with weir; certificates
//! made per test never expire in the repository; and no dependency is added for tests alone.
//! `.ci/run` installs `openssl` when it is missing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// PEM files of a test's TLS set-up, in a temporary directory removed on drop.
#[derive(Debug)]
pub struct TlsFiles {
    /// The directory holding them.
    pub dir: tempfile::TempDir,
    /// The CA's certificate (what clients are given with `--ca`).
    pub ca: PathBuf,
    /// The server's certificate, signed by `ca`, for `localhost` and `127.0.0.1`.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// A certificate signed by `ca` for the name `other.test` only (a name mismatch on
    /// loopback).
    pub other_name_cert: PathBuf,
    /// The key of `other_name_cert`: not `cert`'s.
    pub other_key: PathBuf,
    /// Another CA that signed none of these.
    pub other_ca: PathBuf,
    /// A self-signed certificate for `localhost` and `127.0.0.1` (its own CA for clients).
    pub self_signed: PathBuf,
    /// Its key.
    pub self_signed_key: PathBuf,
}

/// Runs `openssl` with `args` in `dir`; panics with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run openssl (is it installed? .ci/run installs it): {error}")
        });
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA `name` (`name.pem`, `name.key`), as docs/SECURITY.md makes it.
fn make_ca(dir: &Path, name: &str, subject: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "3650",
            "-subj",
            subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

/// A server certificate `name.pem` with key `name.key` for `san`, signed by the CA `ca`, as
/// docs/SECURITY.md makes it.
fn make_server_cert(dir: &Path, name: &str, ca: &str, san: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=weir",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    let extensions = format!(
        "subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    );
    std::fs::write(dir.join(format!("{name}.ext")), extensions).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "825",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
}

impl TlsFiles {
    /// Makes a CA, a server certificate for `localhost` and `127.0.0.1`, one for `other.test`,
    /// an unrelated CA and a self-signed certificate.
    pub fn generate() -> TlsFiles {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        make_ca(path, "ca", "/CN=weir test CA");
        make_server_cert(path, "server", "ca", "DNS:localhost,IP:127.0.0.1");
        make_server_cert(path, "other", "ca", "DNS:other.test");
        make_ca(path, "stranger", "/CN=another CA");
        openssl(
            path,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "365",
                "-subj",
                "/CN=weir",
                "-addext",
                "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-addext",
                "basicConstraints=critical,CA:FALSE",
                "-keyout",
                "self-signed.key",
                "-out",
                "self-signed.pem",
            ],
        );
        TlsFiles {
            ca: path.join("ca.pem"),
            cert: path.join("server.pem"),
            key: path.join("server.key"),
            other_name_cert: path.join("other.pem"),
            other_key: path.join("other.key"),
            other_ca: path.join("stranger.pem"),
            self_signed: path.join("self-signed.pem"),
            self_signed_key: path.join("self-signed.key"),
            dir,
        }
    }
}

/// A TLS connection to `address` that trusts only the CA in `ca` and verifies the certificate
/// against `name` (a host name or an IP address).
pub async fn connect(address: SocketAddr, ca: &Path, name: &str) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(certificate.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(address).await.unwrap();
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
        .unwrap_or_else(|error| panic!("TLS handshake with {address} as {name}: {error}"))
}
