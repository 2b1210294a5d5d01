//! A minimal blocking HTTP/1.1 client: the CLI talks to a running server
//! with it (and the tests use it too), one request per connection; the
//! nodes of a cluster call on each other through a [`ConnectionPool`] of
//! kept-alive connections.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use parking_lot::Mutex;

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as JSON; `Null` when it is not JSON (callers show `text`).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

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

/// Idle connections kept per address.
const IDLE_PER_ADDRESS: usize = 4;

/// Kept-alive connections to other servers, for GETs a node sends often
/// (a query read through another node's tail): a connect and an accept
/// per request cost as much as the answer of a small read.
#[derive(Default)]
pub struct ConnectionPool {
    idle: Mutex<HashMap<String, Vec<BufReader<TcpStream>>>>,
    /// Sent as `Authorization: Bearer` with every request, when set.
    token: Option<String>,
}

impl ConnectionPool {
    pub fn with_token(token: Option<String>) -> ConnectionPool {
        ConnectionPool {
            idle: Mutex::default(),
            token,
        }
    }

    /// `GET path` on `addr`, on an idle connection when there is one. A
    /// kept connection the server closed meanwhile fails at once; the GET
    /// then goes once more on a new connection (it changes nothing, so
    /// sending it twice is safe). A server too slow to answer is not asked
    /// twice.
    pub fn get(&self, addr: &str, path: &str, timeout: Duration) -> std::io::Result<Response> {
        let kept = self.idle.lock().get_mut(addr).and_then(Vec::pop);
        if let Some(conn) = kept {
            match self.exchange(addr, conn, path, timeout) {
                Err(e) if closed_meanwhile(&e) => {}
                answered => return answered,
            }
        }
        let conn = BufReader::new(connect(addr, timeout)?);
        self.exchange(addr, conn, path, timeout)
    }

    /// Forgets the idle connections to `addr` (its server went away).
    pub fn forget(&self, addr: &str) {
        self.idle.lock().remove(addr);
    }

    fn exchange(
        &self,
        addr: &str,
        mut conn: BufReader<TcpStream>,
        path: &str,
        timeout: Duration,
    ) -> std::io::Result<Response> {
        conn.get_ref().set_read_timeout(Some(timeout))?;
        conn.get_ref().set_write_timeout(Some(timeout))?;
        let authorization = self
            .token
            .as_ref()
            .map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{authorization}Content-Length: 0\r\n\r\n"
        );
        conn.get_mut().write_all(head.as_bytes())?;
        let (response, reusable) = read_response(&mut conn, false)?;
        if reusable {
            let mut idle = self.idle.lock();
            let kept = idle.entry(addr.to_string()).or_default();
            if kept.len() < IDLE_PER_ADDRESS {
                kept.push(conn);
            }
        }
        Ok(response)
    }
}

/// Whether an exchange on a kept connection failed because the server had
/// closed it (as servers do with idle connections).
fn closed_meanwhile(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe
    )
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

/// A free loopback port (for tests and benchmarks that start a server).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A server that answers `answers` on each connection it accepts, in
    /// turn, then closes it; counts the connections.
    fn serve(answers: Vec<&'static str>) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                counter.fetch_add(1, Ordering::SeqCst);
                let mut reader = BufReader::new(conn);
                for answer in &answers {
                    // The request's head, up to its empty line.
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            break;
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    if reader.get_mut().write_all(answer.as_bytes()).is_err() {
                        break;
                    }
                }
            }
        });
        (addr, accepted)
    }

    #[test]
    fn a_pool_keeps_connections_alive_and_replaces_closed_ones() {
        let (addr, accepted) = serve(vec![
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nsec\r\n3\r\nond\r\n0\r\n\r\n",
        ]);
        let pool = ConnectionPool::default();
        let t = Duration::from_secs(5);
        let first = pool.get(&addr, "/a", t).unwrap();
        assert_eq!((first.status, first.text().as_str()), (200, "first"));
        let second = pool.get(&addr, "/b", t).unwrap();
        assert_eq!(second.text(), "second");
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection for both"
        );
        // The server closed that connection after two answers: the kept
        // one fails, and the GET goes again on a new one.
        let third = pool.get(&addr, "/c", t).unwrap();
        assert_eq!(third.text(), "first");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn one_shot_requests_read_lengths_chunks_and_bodiless_answers() {
        let (addr, _) = serve(vec![
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        ]);
        let r = request(&addr, "GET", "/", None, b"").unwrap();
        assert_eq!((r.status, r.text().as_str()), (200, "ok"));
        // A HEAD's answer names the length of a body it does not carry.
        let (addr, _) = serve(vec!["HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"]);
        let r = request(&addr, "HEAD", "/", None, b"").unwrap();
        assert_eq!((r.status, r.body.len()), (200, 0));
        let (addr, _) = serve(vec!["HTTP/1.1 204 No Content\r\n\r\n"]);
        assert_eq!(request(&addr, "POST", "/", None, b"").unwrap().status, 204);
    }

    #[test]
    fn an_answer_that_closes_is_not_kept() {
        let (addr, accepted) = serve(vec![
            "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        ]);
        let pool = ConnectionPool::default();
        let t = Duration::from_secs(5);
        assert_eq!(pool.get(&addr, "/", t).unwrap().text(), "ok");
        assert_eq!(pool.get(&addr, "/", t).unwrap().text(), "ok");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert!(pool.idle.lock().get(&addr).is_none_or(Vec::is_empty));
    }
}
