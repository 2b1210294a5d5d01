//! The connection loop under the routes: HTTP/1.1 over TCP, or over TLS
//! (rustls) when the server has a certificate, with a deadline on each
//! request's headers so a client that stalls inside them does not hold a
//! connection for as long as it likes, and a longer one on a kept-alive
//! connection that sends nothing. axum's own `serve` has none of these.
//!
//! The certificate and key are read again on [`Tls::reload`] (SIGHUP):
//! connections made after it get the new ones, and a pair that does not
//! load leaves the old in place.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use parking_lot::RwLock;
use tokio::net::TcpListener;

/// A certificate chain and key served on TLS connections, swappable while
/// the server runs.
pub struct Tls {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<tokio_rustls::TlsAcceptor>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read TLS {what} `{path}`: {why}; check server.tls_cert and server.tls_key")]
    Read {
        what: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error(
        "the TLS certificate and key do not make a server config ({0}); check that the key is the certificate's"
    )]
    Config(String),
}

impl Tls {
    /// Loads the PEM certificate chain at `cert` and private key at `key`.
    pub fn load(cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let acceptor = acceptor(cert, key)?;
        Ok(Tls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new(acceptor),
        })
    }

    /// Reads the certificate and key again; on failure the ones loaded
    /// before stay in use.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = acceptor(&self.cert, &self.key)?;
        *self.current.write() = fresh;
        Ok(())
    }

    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        self.current.read().clone()
    }
}

fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |what: &'static str, path: &Path, why: String| TlsError::Read {
        what,
        path: path.to_path_buf(),
        why,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| read("certificate", cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| read("certificate", cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(read(
            "certificate",
            cert,
            "no CERTIFICATE block in it".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| read("key", key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// How long a stop waits for the answers under way.
const DRAIN_WITHIN: Duration = Duration::from_secs(20);

/// How connections are served.
#[derive(Clone)]
pub struct Serving {
    /// A request's headers must all arrive within this of their first
    /// byte; a TLS handshake gets as long.
    pub header_timeout: Duration,
    /// A connection waiting for a request that sends nothing for this long
    /// is closed.
    pub idle_timeout: Duration,
    pub tls: Option<Arc<Tls>>,
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the
/// requests under way finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    serving: Serving,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (closing, closed) = tokio::sync::watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it
                    // was taken: wait a moment rather than spin.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let serving = serving.clone();
        let mut closed = closed.clone();
        tokio::spawn(async move {
            match &serving.tls {
                None => connection(stream, peer, router, &serving, &mut closed).await,
                Some(tls) => {
                    if !starts_like_tls(&stream, serving.header_timeout).await {
                        refuse_plain_http(stream).await;
                        return;
                    }
                    let handshake = tls.acceptor().accept(stream);
                    match tokio::time::timeout(serving.header_timeout, handshake).await {
                        Ok(Ok(stream)) => {
                            connection(stream, peer, router, &serving, &mut closed).await;
                        }
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
            drop(closed);
        });
    }
    drop(listener);
    drop(closed);
    // Every connection holds a receiver: this wakes them all, and returns
    // when the last has finished, or gives up on a client that stopped
    // reading a long answer (its connection is dropped with the runtime).
    let _ = closing.send(());
    if tokio::time::timeout(DRAIN_WITHIN, closing.closed())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still under way {DRAIN_WITHIN:?} after the stop: their connections are dropped"
        );
    }
    Ok(())
}

/// Whether a connection's first byte is a TLS handshake record's (22),
/// waiting at most `within` for it. A client that sends nothing in time
/// is left to the handshake's own deadline.
async fn starts_like_tls(stream: &tokio::net::TcpStream, within: Duration) -> bool {
    let mut first = [0u8; 1];
    match tokio::time::timeout(within, stream.peek(&mut first)).await {
        Ok(Ok(1)) => first[0] == 0x16,
        _ => true,
    }
}

/// Answers plain HTTP sent to the TLS port with a 400 saying so (as Go's
/// servers do), rather than a TLS alert the client shows as garbage.
async fn refuse_plain_http(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = "{\"error\":{\"code\":\"tls_required\",\"message\":\"this port speaks HTTPS only: \
                the client sent plain HTTP; use https://\"}}\n";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    })
    .await;
    tracing::debug!("plain HTTP on the TLS port: refused");
}

/// The address a request's connection came from (a request extension).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub std::net::SocketAddr);

async fn connection<IO>(
    io: IO,
    peer: std::net::SocketAddr,
    router: Router,
    serving: &Serving,
    closed: &mut tokio::sync::watch::Receiver<()>,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        let mut router = router.clone();
        req.extensions_mut().insert(Peer(peer));
        tower_service::Service::call(&mut router, req.map(Body::new))
    });
    let reads = Arc::new(HeadWatch::default());
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(HeadTimer {
            reads: reads.clone(),
            header_timeout: serving.header_timeout,
            idle_timeout: serving.idle_timeout,
        })
        .header_read_timeout(serving.header_timeout);
    let io = CountedReads {
        io,
        reads,
        answered: 0,
    };
    let mut conn = pin!(builder.serve_connection(TokioIo::new(io), service));
    tokio::select! {
        done = conn.as_mut() => {
            if let Err(e) = done {
                tracing::debug!(error = %e, "connection ended");
            }
        }
        _ = closed.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// What a connection's [`HeadTimer`] watches: how many of its reads
/// brought bytes, and how many request heads it has waited for.
#[derive(Default)]
struct HeadWatch {
    reads: AtomicU64,
    heads: AtomicU64,
}

impl HeadWatch {
    fn get(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }
}

/// A connection's stream, counting the reads that bring bytes so its
/// [`HeadTimer`] can tell a client idle between requests from one stalled
/// inside a request's headers; and saying why hyper refused a request it
/// could not parse, which it answers with a bare 400 of its own.
struct CountedReads<IO> {
    io: IO,
    reads: Arc<HeadWatch>,
    /// How much of [`UNPARSED_ANSWER`] went out in place of hyper's.
    answered: usize,
}

/// The head of hyper's answer to a request it cannot parse (a malformed
/// `Content-Length`, two of them, a bad header line): no route ran, and
/// every answer of halite's own 400s has a body.
const HYPER_PARSE_ERROR: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n";

/// What goes out instead: the same status, and why.
static UNPARSED_ANSWER: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let body = "{\"error\":{\"code\":\"invalid_request\",\"message\":\"the request is not \
                HTTP/1.1 halite can read: a malformed or repeated Content-Length, a bad header \
                line, or headers over the limit; nothing was read\"}}\n";
    format!(
        "HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
});

impl<IO: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CountedReads<IO> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.reads.reads.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> CountedReads<IO> {
    /// Writes [`UNPARSED_ANSWER`] in place of hyper's answer `head` (no
    /// body), which counts as written once ours is; the connection closes
    /// after it.
    fn poll_answer_unparsed(
        &mut self,
        cx: &mut Context<'_>,
        head: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        while self.answered < UNPARSED_ANSWER.len() {
            let at = self.answered;
            match std::pin::Pin::new(&mut self.io).poll_write(cx, &UNPARSED_ANSWER[at..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Ok(0)),
                Poll::Ready(Ok(n)) => self.answered += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        let head_end = head
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(head.len(), |at| at + 4);
        Poll::Ready(Ok(head_end))
    }
}

impl<IO: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for CountedReads<IO> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if !buf.starts_with(HYPER_PARSE_ERROR) {
            return std::pin::Pin::new(&mut self.io).poll_write(cx, buf);
        }
        self.poll_answer_unparsed(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match bufs.first() {
            Some(head) if head.starts_with(HYPER_PARSE_ERROR) => {
                self.poll_answer_unparsed(cx, head)
            }
            _ => std::pin::Pin::new(&mut self.io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// hyper's header deadline, which it counts from the moment it waits for a
/// request: on a kept-alive connection that includes the wait between
/// requests, so with this alone a client idle for `header_timeout` (10 s;
/// Telegraf flushes every 10 s) had its connection closed as it sent its
/// next write. hyper asks its timer for one sleep per request head (the
/// only sleep an HTTP/1 server connection asks for), and polls it
/// whenever reading the head waits. The first head of a connection gets
/// `header_timeout` from the moment it is waited for (a client that
/// connects and sends nothing is not idle between requests: it has made
/// none). A later head's sleep runs for `idle_timeout` until the
/// connection brings a byte, then for `header_timeout` from there, as
/// nginx's `keepalive_timeout` and `client_header_timeout` do.
#[derive(Clone)]
struct HeadTimer {
    reads: Arc<HeadWatch>,
    header_timeout: Duration,
    idle_timeout: Duration,
}

impl hyper::rt::Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> std::pin::Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(std::time::Instant::now() + duration)
    }

    fn sleep_until(
        &self,
        _deadline: std::time::Instant,
    ) -> std::pin::Pin<Box<dyn hyper::rt::Sleep>> {
        let now = tokio::time::Instant::now();
        let first_head = self.reads.heads.fetch_add(1, Ordering::Relaxed) == 0;
        let deadline = now
            + if first_head {
                self.header_timeout
            } else {
                self.idle_timeout
            };
        Box::pin(HeadSleep {
            reads: self.reads.clone(),
            reads_before: self.reads.get(),
            header_timeout: self.header_timeout,
            head_started: first_head,
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
        })
    }
}

struct HeadSleep {
    reads: Arc<HeadWatch>,
    reads_before: u64,
    header_timeout: Duration,
    /// The connection has brought a byte since the sleep began: the
    /// deadline is the header's.
    head_started: bool,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl Future for HeadSleep {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // hyper polls this right after a read that left the head
        // incomplete, so the first poll that sees a new read is within a
        // parse of the head's first byte.
        if !self.head_started && self.reads.get() != self.reads_before {
            self.head_started = true;
            let deadline = tokio::time::Instant::now() + self.header_timeout;
            if deadline < self.sleep.deadline() {
                self.sleep.as_mut().reset(deadline);
            }
        }
        self.sleep.as_mut().poll(cx)
    }
}

impl hyper::rt::Sleep for HeadSleep {}
