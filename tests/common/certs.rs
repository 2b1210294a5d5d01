//! Certificates for tests of HTTPS, made by openssl.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// A self-signed certificate for 127.0.0.1 and localhost, by openssl.
pub fn make_certificate(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=halite-test"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        // An end entity, not a CA (webpki refuses a CA as a server's).
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl (the openssl package)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

/// A self-signed certificate as the quick recipe makes it (`openssl req
/// -x509 -newkey rsa:2048 -nodes -subj /CN=localhost`): a CA certificate
/// (basicConstraints CA:TRUE, openssl's default) with no subject
/// alternative name, which webpki alone refuses as a server's.
pub fn make_quick_certificate(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes"])
        .args(["-days", "2", "-subj", "/CN=localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl (the openssl package)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}
