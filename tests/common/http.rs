//! A raw HTTP/1.1 client for tests: one request per connection, bytes as
//! written, for checking the server's protocol edges (an answer sent
//! before the whole body was taken, chunked answers, HEAD) that a full
//! client hides. The CLI and the nodes of a cluster use `halite::client`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A port for a server a test starts. The kernel's choice (binding port 0)
/// can hand a port just given to another test process to this one too, and
/// then two servers race for it: one fails to bind while the test talks to
/// the other. So each process takes ports from a block of its own, by its
/// pid, in 20000..32000: below Linux's ephemeral range (no client
/// connection holds them) and apart from the blocks of the test processes
/// running beside it. A port that does not bind is passed over.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const BLOCK: u16 = 30;
    const BLOCKS: u32 = 400;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let block = FIRST + (std::process::id() % BLOCKS) as u16 * BLOCK;
    for _ in 0..BLOCK {
        let port = block + NEXT.fetch_add(1, Ordering::Relaxed) % BLOCK;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The answer, read whole: the same type the library's client gives.
pub use halite::client::Response;

pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> std::io::Result<Response> {
    let headers: Vec<(&str, &str)> = content_type
        .map(|ct| ("Content-Type", ct))
        .into_iter()
        .collect();
    request_with(addr, method, path, &headers, body)
}

/// A request with any headers (`Accept`, say).
pub fn request_with(
    addr: &str,
    method: &str,
    path: &str,
    extra_headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Response> {
    request_within(
        addr,
        method,
        path,
        extra_headers,
        body,
        Duration::from_secs(60),
    )
}

/// A request that gives up when connecting or any read takes longer
/// than `timeout` (a node asking another, which may be gone).
pub fn request_within(
    addr: &str,
    method: &str,
    path: &str,
    extra_headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> std::io::Result<Response> {
    let mut s = connect(addr, timeout)?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in extra_headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    // A server may answer (413, say) and close before taking the whole
    // body; the answer is still there to read.
    let sent = s.write_all(body);
    match read_response(&mut BufReader::new(s), method == "HEAD") {
        Ok((response, _)) => Ok(response),
        Err(e) => {
            sent?;
            Err(e)
        }
    }
}

/// A connection to `addr` whose connect, reads and writes give up after
/// `timeout`.
fn connect(addr: &str, timeout: Duration) -> std::io::Result<TcpStream> {
    // Every address the name has, in turn (`localhost` may be ::1 first).
    let mut connected = Err(std::io::Error::other(format!("no address for {addr}")));
    for target in std::net::ToSocketAddrs::to_socket_addrs(addr)? {
        connected = TcpStream::connect_timeout(&target, timeout);
        if connected.is_ok() {
            break;
        }
    }
    let s = connected?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Reads one response: (the response, whether the connection can carry
/// another request). The body is as long as its length or its chunks say,
/// else up to the end of the connection; the answer to a HEAD, a 204 or a
/// 304 has none.
fn read_response(
    conn: &mut BufReader<TcpStream>,
    to_head: bool,
) -> std::io::Result<(Response, bool)> {
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the server closed the connection",
        ));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status line"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        conn.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let closes = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let length = header("content-length").and_then(|v| v.parse::<usize>().ok());
    let mut body = Vec::new();
    let reusable = if to_head || status == 204 || status == 304 {
        !closes
    } else if chunked {
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|_| std::io::Error::other("malformed chunked body"))?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    line.clear();
                    if conn.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                        break;
                    }
                }
                break;
            }
            let at = body.len();
            body.resize(at + size, 0);
            conn.read_exact(&mut body[at..])?;
            line.clear();
            conn.read_line(&mut line)?;
        }
        !closes
    } else if let Some(n) = length {
        body.resize(n, 0);
        conn.read_exact(&mut body)?;
        !closes
    } else {
        conn.read_to_end(&mut body)?;
        false
    };
    Ok((
        Response {
            status,
            headers,
            body,
        },
        reusable,
    ))
}

/// Waits up to 20 s for a server just started (`what`) to accept
/// connections on `addr`.
pub fn wait_until_listening(addr: &str, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "{what} did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Creates a table through the API; it must answer 201.
pub fn create_table(addr: &str, spec: &serde_json::Value) {
    let r = request(
        addr,
        "POST",
        "/api/v1/tables",
        Some("application/json"),
        spec.to_string().as_bytes(),
    )
    .expect("create table");
    assert_eq!(r.status, 201, "{}", r.text());
}
