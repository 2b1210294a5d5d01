//! The API's connections: HTTPS with a certificate the test makes (and
//! replaces, for SIGHUP to load), a client stalled inside its request
//! headers disconnected after `server.header_timeout`, and a kept-alive
//! connection kept between requests until `server.idle_timeout`. And the
//! Kafka consumer over TLS.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::certs::make_certificate;
use common::scenario::Scenario;
use common::server::stop;

fn der_of(cert: &Path) -> Vec<u8> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_file(cert)
        .expect("certificate")
        .to_vec()
}

/// `GET path` over TLS trusting only `trusted`: the status line, the body,
/// and the certificate the server showed.
fn https_get(
    addr: &str,
    trusted: &Path,
    path: &str,
    token: Option<&str>,
) -> Result<(String, String, Vec<u8>), String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(trusted).expect("trusted certificate"))
        .expect("add root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")
        .expect("name")
        .to_owned();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    match tls.read_to_end(&mut answer) {
        Ok(_) => {}
        // A server that closes without close_notify still answered.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    let shown = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
        shown,
    ))
}

#[test]
fn the_api_speaks_https_and_sighup_loads_a_renewed_certificate() {
    let sc = Scenario::new().build();
    let (cert, key) = make_certificate(sc.dir(), "first");
    let boot = "tls-bootstrap-token-0123456789";
    let metrics = format!("127.0.0.1:{}", common::http::free_port());
    let srv = common::server::spawn(
        sc.command(&[
            &format!("server.tls_cert=\"{}\"", cert.display()),
            &format!("server.tls_key=\"{}\"", key.display()),
            &format!("server.metrics_listen=\"{metrics}\""),
            "auth.enabled=true",
            &format!("auth.bootstrap_token=\"{boot}\""),
        ]),
        sc.port,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let (status, body, shown) = loop {
        match https_get(&srv.addr, &cert, "/readyz", None) {
            Ok(answer) if answer.0.contains("200") => break answer,
            other => {
                assert!(Instant::now() < deadline, "no HTTPS answer: {other:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert!(status.starts_with("HTTP/1.1 200"), "{status} {body}");
    assert_eq!(shown, der_of(&cert));
    // Tokens over TLS.
    let (status, _, _) = https_get(&srv.addr, &cert, "/api/v1/tables", None).expect("https");
    assert!(status.contains("401"), "{status}");
    let (status, body, _) =
        https_get(&srv.addr, &cert, "/api/v1/tables", Some(boot)).expect("https");
    assert!(status.contains("200"), "{status} {body}");
    // Plain HTTP to a TLS port is told so (it got a raw TLS alert).
    let plain = common::http::request(&srv.addr, "GET", "/healthz", None, b"").expect("plain");
    assert_eq!(plain.status, 400, "{}", plain.text());
    assert!(plain.text().contains("HTTPS only"), "{}", plain.text());
    // The metrics port speaks HTTPS with the same certificate.
    let (status, body, shown) =
        https_get(&metrics, &cert, "/metrics", None).expect("metrics over https");
    assert!(
        status.contains("200") && body.contains("halite_"),
        "{status}"
    );
    assert_eq!(shown, der_of(&cert));
    let plain = common::http::request(&metrics, "GET", "/metrics", None, b"").expect("plain");
    assert_eq!(plain.status, 400, "{}", plain.text());

    // The CLI over HTTPS: trusting the certificate by --cacert or
    // HALITE_CACERT, refusing a server it cannot verify.
    let https = format!("https://{}", srv.addr);
    let cli = |extra: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_halite"));
        cmd.args(["namespace", "list", "--server", &https])
            .args(extra)
            .env_remove("HALITE_CACERT")
            .env_remove("HALITE_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run halite")
    };
    let cert_arg = cert.display().to_string();
    let out = cli(&["--cacert", &cert_arg, "--token", boot], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("default"));
    let out = cli(&[], &[("HALITE_CACERT", &cert_arg), ("HALITE_TOKEN", boot)]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["--token", boot], &[]);
    assert!(!out.status.success(), "an unverified server was trusted");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("certificate") || err.contains("Certificate"),
        "{err}"
    );

    // A renewed certificate in the same files, then SIGHUP.
    let (next_cert, next_key) = make_certificate(sc.dir(), "second");
    std::fs::copy(&next_cert, &cert).expect("replace cert");
    std::fs::copy(&next_key, &key).expect("replace key");
    // SAFETY: a signal to our own child process by its pid.
    assert_eq!(
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok((status, _, shown)) = https_get(&srv.addr, &next_cert, "/healthz", None)
            && status.contains("200")
        {
            assert_eq!(shown, der_of(&next_cert));
            let (_, _, shown) =
                https_get(&metrics, &next_cert, "/healthz", None).expect("metrics port");
            assert_eq!(shown, der_of(&next_cert), "the metrics port reloaded too");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was not loaded"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A broken pair on the next SIGHUP leaves the renewed one serving.
    std::fs::write(&key, "not a key").expect("break key");
    assert_eq!(
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGHUP) },
        0
    );
    std::thread::sleep(Duration::from_millis(300));
    let (status, _, _) = https_get(&srv.addr, &next_cert, "/healthz", None).expect("still serving");
    assert!(status.contains("200"), "{status}");
    stop(srv);
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
/// A request whose headers stop partway through a header line.
const STALLED_HEAD: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";

/// Reads one answer off a kept-alive connection: its status line, or None
/// when the server closed the connection instead.
fn read_answer(conn: &mut BufReader<TcpStream>) -> Option<String> {
    let mut status = String::new();
    if conn.read_line(&mut status).unwrap_or(0) == 0 {
        return None;
    }
    let mut length = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).expect("header line");
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().expect("content-length");
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).expect("body");
    Some(status.trim_end().to_string())
}

/// How long the server takes to close `conn`, reading until it does.
fn time_to_close(conn: &mut BufReader<TcpStream>) -> Duration {
    let started = Instant::now();
    let mut rest = Vec::new();
    // A 408 may come before the close.
    let _ = conn.read_to_end(&mut rest);
    let text = String::from_utf8_lossy(&rest);
    assert!(
        rest.is_empty() || text.starts_with("HTTP/1.1 408"),
        "{text}"
    );
    started.elapsed()
}

#[test]
fn a_client_stalled_inside_its_headers_is_disconnected() {
    let sc = Scenario::new().set("server.header_timeout=\"1s\"").build();
    let srv = sc.start();
    let tcp = TcpStream::connect(&srv.addr).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(15)))
        .expect("timeout");
    let mut conn = BufReader::new(tcp);
    conn.get_mut().write_all(STALLED_HEAD).expect("write");
    // Closed (0 bytes, or a reset), or answered 408 and closed: not held.
    let waited = time_to_close(&mut conn);
    assert!(waited < Duration::from_secs(10), "held for {waited:?}");
    assert!(
        waited >= Duration::from_millis(500),
        "dropped at once ({waited:?})"
    );
    // Other clients are served meanwhile and after.
    let r = common::http::request(&srv.addr, "GET", "/healthz", None, b"").expect("healthz");
    assert_eq!(r.status, 200);
    stop(srv);
}

/// Telegraf writes every 10 s on a kept-alive connection, and
/// `server.header_timeout` is 10 s: a deadline on the headers counted from
/// the end of the last answer closed Telegraf's connection as it sent its
/// next write. Between requests a connection has `server.idle_timeout`;
/// the headers' deadline runs from their first byte.
#[test]
fn a_kept_alive_connection_waits_the_idle_timeout_between_requests() {
    let sc = Scenario::new()
        .set("server.header_timeout=\"1s\"")
        .set("server.idle_timeout=\"4s\"")
        .build();
    let srv = sc.start();
    let connect = || {
        let tcp = TcpStream::connect(&srv.addr).expect("connect");
        tcp.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        BufReader::new(tcp)
    };

    // Idle for twice the header deadline between requests: still served.
    let mut conn = connect();
    conn.get_mut().write_all(HEALTHZ).expect("write");
    assert_eq!(read_answer(&mut conn).as_deref(), Some("HTTP/1.1 200 OK"));
    std::thread::sleep(Duration::from_secs(2));
    conn.get_mut().write_all(HEALTHZ).expect("write");
    assert_eq!(
        read_answer(&mut conn).as_deref(),
        Some("HTTP/1.1 200 OK"),
        "the connection was closed while idle for less than server.idle_timeout"
    );

    // After an idle wait, headers that stall are still cut a header
    // deadline after their first byte, not an idle deadline.
    std::thread::sleep(Duration::from_millis(1500));
    conn.get_mut().write_all(STALLED_HEAD).expect("write");
    let waited = time_to_close(&mut conn);
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_millis(2500),
        "a stalled head after an idle wait was closed after {waited:?}, not about 1 s"
    );

    // A connection that sends nothing more is closed at the idle deadline.
    let mut conn = connect();
    conn.get_mut().write_all(HEALTHZ).expect("write");
    assert_eq!(read_answer(&mut conn).as_deref(), Some("HTTP/1.1 200 OK"));
    let waited = time_to_close(&mut conn);
    assert!(
        waited >= Duration::from_millis(3500) && waited < Duration::from_secs(10),
        "an idle connection was closed after {waited:?}, not about 4 s"
    );

    // One that connects and sends nothing has made no request to be idle
    // after: the header deadline counts from the connect.
    let mut conn = connect();
    let waited = time_to_close(&mut conn);
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_millis(2500),
        "a connection that sent nothing was closed after {waited:?}, not about 1 s"
    );
    stop(srv);
}

/// Kills a child process when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The consumer reaches its broker over TLS, set up only through
/// `[kafka.client]` as docs/security.md shows, verifying the broker's
/// certificate. Tansu 0.6's own TLS cannot be switched on from its command
/// line (`--cert` with `--key` is refused, `--cert` alone serves plain
/// TCP), so the broker sits behind socat, which ends TLS in front of it;
/// Tansu advertises socat's port, so every connection a client makes goes
/// through TLS.
#[test]
fn the_kafka_consumer_reads_a_broker_over_tls() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = make_certificate(dir.path(), "broker");
    let (plain, tls) = (common::http::free_port(), common::http::free_port());
    let _broker = Killed(
        Command::new(common::kafka::tansu_binary())
            .args([
                "broker",
                "--listener-url",
                &format!("tcp://127.0.0.1:{plain}"),
            ])
            .args([
                "--advertised-listener-url",
                &format!("tcp://127.0.0.1:{tls}"),
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start tansu"),
    );
    let _front = Killed(
        Command::new("socat")
            .arg(format!(
                "OPENSSL-LISTEN:{tls},bind=127.0.0.1,reuseaddr,fork,cert={},key={},verify=0",
                cert.display(),
                key.display()
            ))
            .arg(format!("TCP:127.0.0.1:{plain}"))
            .stdout(std::process::Stdio::null())
            // It logs the readiness probes, which connect without TLS.
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start socat (the socat package; `make test` installs it)"),
    );
    common::http::wait_until_listening(&format!("127.0.0.1:{plain}"), "tansu");
    common::http::wait_until_listening(&format!("127.0.0.1:{tls}"), "socat");
    let created = Command::new(common::kafka::tansu_binary())
        .args(["topic", "create", "cpu", "--partitions", "2"])
        .args(["--broker", &format!("tcp://127.0.0.1:{plain}")])
        .env("RUST_LOG", "warn")
        .status()
        .expect("tansu topic create");
    assert!(created.success());

    // Produced over TLS too.
    let (hosts, points) = (5u64, 2_000u64);
    let producer: BaseProducer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", format!("127.0.0.1:{tls}"))
        .set("security.protocol", "ssl")
        .set("ssl.ca.location", cert.display().to_string())
        .create()
        .expect("producer");
    for i in 0..points {
        let mut line = String::new();
        halite::tsbs::cpu_line(i % hosts, i / hosts, &mut line);
        let key = format!("host_{}", i % hosts);
        loop {
            match producer.send(BaseRecord::to("cpu").key(&key).payload(&line)) {
                Ok(()) => break,
                Err((e, _)) => {
                    assert!(
                        matches!(
                            e,
                            rdkafka::error::KafkaError::MessageProduction(
                                rdkafka::types::RDKafkaErrorCode::QueueFull
                            )
                        ),
                        "produce: {e}"
                    );
                    producer.poll(Duration::from_millis(50));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("every message sent over TLS");

    let sc = Scenario::new()
        .example_config()
        .client("\"security.protocol\" = \"ssl\"")
        .client(&format!("\"ssl.ca.location\" = \"{}\"", cert.display()))
        .set(&format!("kafka.brokers=\"127.0.0.1:{tls}\""))
        .set("kafka.commit_interval=\"200ms\"")
        .build();
    let srv = sc.start();
    common::kafka::wait_for(&srv.addr, "every point over TLS", |s| s["points"] == points);
    common::kafka::assert_cpu_oracle(&srv.addr, hosts, points);
    stop(srv);
}

/// `halite … --cacert cert.pem` with the certificate `openssl req -x509
/// -newkey rsa:2048 -nodes -subj /CN=localhost` makes (a CA certificate,
/// no subject alternative name), which curl and Python accept: the CLI
/// refused it (`CaUsedAsEndEntity`). The server's own certificate named
/// in `--cacert` is trusted as that server's; another such certificate is
/// not.
#[test]
fn the_cli_trusts_the_quick_self_signed_certificate_it_is_given() {
    use common::certs::make_quick_certificate;
    let sc = Scenario::new().build();
    let (cert, key) = make_quick_certificate(sc.dir(), "quick");
    let (other, _) = make_quick_certificate(sc.dir(), "other");
    let srv = common::server::spawn(
        sc.command(&[
            &format!("server.tls_cert=\"{}\"", cert.display()),
            &format!("server.tls_key=\"{}\"", key.display()),
        ]),
        sc.port,
    );
    let https = format!("https://localhost:{}", sc.port);
    let cli = |cacert: &Path| {
        Command::new(env!("CARGO_BIN_EXE_halite"))
            .args(["namespace", "list", "--server", &https, "--cacert"])
            .arg(cacert)
            .env_remove("HALITE_CACERT")
            .env_remove("HALITE_TOKEN")
            .output()
            .expect("run halite")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = cli(&cert);
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("default"));
    let out = cli(&other);
    assert!(
        !out.status.success(),
        "a certificate not the server's was trusted"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    stop(srv);
}
