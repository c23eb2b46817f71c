//! Certificates for the scripted model endpoints over TLS ([`super::sse`]): one test CA (made
//! once per test process by the `openssl` command, in a temporary directory that lives as
//! long as the process) and two server certificates it signs, one for `127.0.0.1` and
//! `localhost`, one for another host name only (what a client must refuse as "for another
//! host name"). A client trusts them when `SSL_CERT_FILE` names [`TestCa::ca`]; without it the
//! CA is unknown.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

/// The test CA and what it signed (PEM files).
pub struct TestCa {
    /// The CA's certificate: the file `SSL_CERT_FILE` names to trust the endpoints.
    pub ca: PathBuf,
    /// A server certificate for `IP:127.0.0.1` and `DNS:localhost`, and its key.
    pub local: (PathBuf, PathBuf),
    /// A server certificate for `DNS:models.other.example` only, and its key.
    pub other_host: (PathBuf, PathBuf),
    /// Keeps the files.
    _dir: tempfile::TempDir,
}

/// Runs `openssl args…` in `dir`, panicking with its output when it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl ({e}): install Debian's openssl"));
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The process's test CA, made on first use.
pub fn test_ca() -> &'static TestCa {
    static CA: OnceLock<TestCa> = OnceLock::new();
    CA.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=roundtable provider test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(d, &ca);
        for (name, san) in [
            ("local", "IP:127.0.0.1,DNS:localhost"),
            ("other", "DNS:models.other.example"),
        ] {
            let (key, csr, cert, ext) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.pem"),
                format!("{name}.ext"),
            );
            let mut req = vec!["req"];
            req.extend(ec);
            let subject = format!("/CN=roundtable test model endpoint {name}");
            req.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
            openssl(d, &req);
            std::fs::write(
                d.join(&ext),
                format!(
                    "subjectAltName={san}\nbasicConstraints=CA:FALSE\n\
                     keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                ),
            )
            .unwrap();
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &csr,
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-out",
                    &cert,
                    "-days",
                    "2",
                    "-extfile",
                    &ext,
                ],
            );
        }
        TestCa {
            ca: d.join("ca.pem"),
            local: (d.join("local.pem"), d.join("local.key")),
            other_host: (d.join("other.pem"), d.join("other.key")),
            _dir: dir,
        }
    })
}

/// A rustls server configuration presenting `cert` (with `key`).
pub fn server_config(cert: &Path, key: &Path) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("certificate file")
        .collect::<Result<_, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_file(key).expect("private key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("certificate and key match");
    Arc::new(config)
}
