//! A test PKI made with the `openssl` command: a CA, a server certificate
//! it signs for the IP address 127.0.0.1 only (no DNS name), a client
//! certificate it signs, and a second, unrelated CA.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `openssl` with `args` in `dir`, which must succeed.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("these tests need the openssl command (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The files of a test PKI.
pub struct Pki {
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// A CA, a server certificate it signs for IP 127.0.0.1 (no DNS name)
/// and a client certificate it signs, and a second CA that signs nothing
/// here.
pub fn make_pki(dir: &Path) -> Pki {
    let days = ["-days", "2"];
    for ca in ["ca", "other-ca"] {
        let (key, cert, subject) = (
            format!("{ca}.key"),
            format!("{ca}.pem"),
            format!("/CN=ringmirror test {ca}"),
        );
        openssl(
            dir,
            &[
                &[
                    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &cert, "-subj", &subject,
                ][..],
                &days,
            ]
            .concat(),
        );
    }
    signed_cert(
        dir,
        "server",
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n",
    );
    signed_cert(
        dir,
        "client",
        "/CN=ringmirror",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    );
    Pki {
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
        ca: dir.join("ca.pem"),
        other_ca: dir.join("other-ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
    }
}

/// `<name>.key` and `<name>.pem`: a key and a certificate for `subject`
/// the CA signs, with the extensions `extensions` (openssl's syntax).
pub fn signed_cert(dir: &Path, name: &str, subject: &str, extensions: &str) {
    let (key, csr, cert, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.ext"),
    );
    std::fs::write(dir.join(&ext), extensions).unwrap();
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-out", &csr, "-subj", subject,
        ],
    );
    openssl(
        dir,
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
