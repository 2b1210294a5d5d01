//! HTTP(S) client of a halite server, on `ureq` with rustls: the CLI's
//! verbs and the demo talk to a server with it, and the nodes of a cluster
//! call on each other with it (kept-alive connections).
//!
//! A server is named `host:port` (plain HTTP), `http://host:port` or
//! `https://host:port`. HTTPS trusts the public roots, or, when a PEM
//! file is named (`HALITE_CACERT`, [`Tls`]), only the certificates in it
//! (as curl's `--cacert`): a private CA's, or a self-signed server's.

use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach {server}: {why}")]
    Unreachable { server: String, why: String },
    #[error("{server} went quiet for {within:?}")]
    TimedOut { server: String, within: Duration },
    #[error("cannot read the CA certificates in `{path}`: {why}")]
    CaFile { path: PathBuf, why: String },
    #[error("`{0}` is not a server address: use host:port, http://host:port or https://host:port")]
    BadAddress(String),
}

/// An answer, read whole.
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

/// Certificates to trust instead of the public roots.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// A PEM file of certificates (a private CA's, or a self-signed
    /// server's).
    pub ca_file: Option<PathBuf>,
}

impl Tls {
    /// `HALITE_CACERT` from the environment, if set.
    pub fn from_env() -> Tls {
        Tls {
            ca_file: std::env::var_os("HALITE_CACERT")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }
}

/// Largest answer read (a scan streamed as NDJSON or Arrow can be big).
const MAX_ANSWER: u64 = 4 << 30;

/// A client of one kind of server: plain or kept-alive connections, the
/// token it presents, the certificates it trusts.
pub struct HttpClient {
    agent: ureq::Agent,
    token: Option<String>,
}

impl HttpClient {
    /// `keep_alive`: connections stay open for the next request to the
    /// same server (a node asking another often); else one per request.
    pub fn new(tls: &Tls, token: Option<String>, keep_alive: bool) -> Result<Self, ClientError> {
        let pinned = match &tls.ca_file {
            Some(path) => {
                let certs = read_certificates(path)?
                    .iter()
                    .map(|c| rustls::pki_types::CertificateDer::from(c.der().to_vec()))
                    .collect();
                Some(
                    pinned::PinnedTls::new(certs).map_err(|why| ClientError::CaFile {
                        path: path.clone(),
                        why,
                    })?,
                )
            }
            None => None,
        };
        let mut config = ureq::Agent::config_builder()
            // Straight to the server: a proxy from the environment would
            // see the token (and plain HTTP to it).
            .proxy(None)
            // Kept connections go well before the server's idle deadline
            // (server.idle_timeout, default 5 min, which a server may set
            // lower) closes them.
            .max_idle_age(Duration::from_secs(5))
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .user_agent(concat!("halite/", env!("CARGO_PKG_VERSION")));
        if !keep_alive {
            config = config.max_idle_connections(0);
        }
        let agent = match pinned {
            // TCP, then TLS trusting the file's certificates only; no
            // proxy, which the config turns off anyway.
            Some(tls) => {
                use ureq::unversioned::transport::{Connector, TcpConnector};
                ureq::Agent::with_parts(
                    config.build(),
                    ().chain(TcpConnector::default()).chain(tls),
                    ureq::unversioned::resolver::DefaultResolver::default(),
                )
            }
            None => config.build().new_agent(),
        };
        Ok(HttpClient { agent, token })
    }

    /// `method path` on `server`, with `headers` (and the token). It gives
    /// up when connecting, or any one read or write, takes longer than
    /// `timeout` (a server that answers slowly but steadily is waited for).
    pub fn request(
        &self,
        server: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        timeout: Duration,
    ) -> Result<Response, ClientError> {
        let url = format!("{}{path}", base_url(server)?);
        let unreachable = |why: String| ClientError::Unreachable {
            server: server.to_string(),
            why,
        };
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        if let Some(t) = &self.token {
            builder = builder.header("Authorization", format!("Bearer {t}"));
        }
        let request = builder
            .body(body.to_vec())
            .map_err(|e| unreachable(e.to_string()))?;
        let request = self
            .agent
            .configure_request(request)
            .timeout_connect(Some(timeout))
            .timeout_per_read(Some(timeout))
            .timeout_per_write(Some(timeout))
            .build();
        let response = self.agent.run(request).map_err(|e| match e {
            ureq::Error::Timeout(_) => ClientError::TimedOut {
                server: server.to_string(),
                within: timeout,
            },
            other => unreachable(other.to_string()),
        })?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response
            .into_body()
            .with_config()
            .limit(MAX_ANSWER)
            .read_to_vec()
            .map_err(|e| unreachable(format!("reading the answer: {e}")))?;
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

/// `http://host:port` or `https://host:port`, without a trailing slash.
pub fn base_url(server: &str) -> Result<String, ClientError> {
    let server = server.trim().trim_end_matches('/');
    let with_scheme = if server.starts_with("http://") || server.starts_with("https://") {
        server.to_string()
    } else {
        format!("http://{server}")
    };
    let host = with_scheme
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    if host.is_empty() || host.contains('/') || host.contains(char::is_whitespace) {
        return Err(ClientError::BadAddress(server.to_string()));
    }
    Ok(with_scheme)
}

fn read_certificates(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, ClientError> {
    let bad = |why: String| ClientError::CaFile {
        path: path.to_path_buf(),
        why,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(Ok(c.to_owned())),
            Ok(_) => None,
            Err(e) => Some(Err(bad(e.to_string()))),
        })
        .collect::<Result<_, _>>()?;
    if certs.is_empty() {
        return Err(bad("no CERTIFICATE block in it".into()));
    }
    Ok(certs)
}

/// The TLS of a client that trusts the certificates of a file only:
/// ureq's rustls connection with a verifier of our own. webpki checks the
/// server's chain against the file; beside it, a certificate of the file
/// that the server presents as its own is that server's, as curl and
/// Python take it: the self-signed certificate `openssl req -x509` makes
/// by default is a CA certificate, which webpki refuses as a server's
/// (`CaUsedAsEndEntity`). Its names and dates are not checked then (it is
/// pinned, as curl's `--pinnedpubkey`); the handshake still proves the
/// server holds its key.
mod pinned {
    use std::sync::Arc;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
    use ureq::unversioned::transport::{
        Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, Transport,
        TransportAdapter,
    };

    #[derive(Debug)]
    struct Verifier {
        webpki: Arc<WebPkiServerVerifier>,
        pinned: Vec<CertificateDer<'static>>,
        provider: Arc<CryptoProvider>,
    }

    impl ServerCertVerifier for Verifier {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp_response: &[u8],
            now: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            match self.webpki.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ) {
                Ok(verified) => Ok(verified),
                Err(_)
                    if self
                        .pinned
                        .iter()
                        .any(|p| p.as_ref() == end_entity.as_ref()) =>
                {
                    Ok(ServerCertVerified::assertion())
                }
                Err(e) => Err(e),
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    /// Wraps the chained TCP transport in TLS that trusts `certs` only.
    #[derive(Debug)]
    pub(super) struct PinnedTls {
        config: Arc<rustls::ClientConfig>,
    }

    impl PinnedTls {
        pub(super) fn new(certs: Vec<CertificateDer<'static>>) -> Result<PinnedTls, String> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut roots = rustls::RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certs.iter().cloned());
            if added == 0 {
                return Err("no certificate in it can be trusted".into());
            }
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| e.to_string())?;
            let verifier = Verifier {
                webpki,
                pinned: certs,
                provider: provider.clone(),
            };
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth();
            Ok(PinnedTls {
                config: Arc::new(config),
            })
        }
    }

    impl<In: Transport> Connector<In> for PinnedTls {
        type Out = Either<In, TlsTransport>;

        fn connect(
            &self,
            details: &ConnectionDetails,
            chained: Option<In>,
        ) -> Result<Option<Self::Out>, ureq::Error> {
            let Some(transport) = chained else {
                return Ok(None);
            };
            if !details.needs_tls() || transport.is_tls() {
                return Ok(Some(Either::A(transport)));
            }
            let host = details
                .uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let name = ServerName::try_from(host)
                .map_err(|_| ureq::Error::Tls("the server's name is not a DNS name or address"))?;
            let mut conn = ClientConnection::new(self.config.clone(), name)?;
            let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
            sock.set_timeout(details.timeout);
            conn.complete_io(&mut sock)?;
            Ok(Some(Either::B(TlsTransport {
                buffers: LazyBuffers::new(
                    details.config.input_buffer_size(),
                    details.config.output_buffer_size(),
                ),
                stream: StreamOwned { conn, sock },
            })))
        }
    }

    pub(super) struct TlsTransport {
        buffers: LazyBuffers,
        stream: StreamOwned<ClientConnection, TransportAdapter>,
    }

    impl std::fmt::Debug for TlsTransport {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("TlsTransport").finish_non_exhaustive()
        }
    }

    impl Transport for TlsTransport {
        fn buffers(&mut self) -> &mut dyn Buffers {
            &mut self.buffers
        }

        fn transmit_output(
            &mut self,
            amount: usize,
            timeout: NextTimeout,
        ) -> Result<(), ureq::Error> {
            use std::io::Write;
            self.stream.get_mut().set_timeout(timeout);
            let output = &self.buffers.output()[..amount];
            self.stream.write_all(output)?;
            Ok(())
        }

        fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
            use std::io::Read;
            self.stream.get_mut().set_timeout(timeout);
            let input = self.buffers.input_append_buf();
            let amount = self.stream.read(input)?;
            self.buffers.input_appended(amount);
            Ok(amount > 0)
        }

        fn is_open(&mut self) -> bool {
            self.stream.get_mut().get_mut().is_open()
        }

        fn is_tls(&self) -> bool {
            true
        }
    }
}

/// A free loopback port (for the demo's broker and tests).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_take_a_scheme_or_default_to_http() {
        assert_eq!(
            base_url("127.0.0.1:8070").ok().as_deref(),
            Some("http://127.0.0.1:8070")
        );
        assert_eq!(
            base_url("https://h:1/").ok().as_deref(),
            Some("https://h:1")
        );
        assert!(base_url("http://h:1/x").is_err());
        assert!(base_url("").is_err());
    }
}
