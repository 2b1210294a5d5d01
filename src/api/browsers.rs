//! What a web page of another site may ask of this server through its
//! visitor's browser: nothing that changes data, and, on a server that
//! checks no tokens, nothing under a host name that is not this server's.
//!
//! Two attacks, two checks (docs/security.md, "Browsers"):
//!
//! - **Cross-site requests.** A page anywhere can make its visitor's
//!   browser send a "simple" POST (a form, or `fetch` with a `text/plain`
//!   body) to `http://127.0.0.1:8070/api/v1/write` or `/query?q=DROP …`;
//!   the page cannot read the answer, but the write is done. A request
//!   that may change data is refused when the browser says it comes from
//!   another origin: `Sec-Fetch-Site` (every current browser sends it)
//!   other than `same-origin` or `none`, or, from older ones, an `Origin`
//!   whose host is not the request's `Host` — the rule of Go's
//!   `http.CrossOriginProtection`. Clients that are not browsers send
//!   neither header and are not affected; the explorer page is the
//!   server's own origin. `server.allowed_origins` lists pages that may.
//! - **DNS rebinding.** A page of `evil.example` whose name is made to
//!   resolve to 127.0.0.1 is same-origin with whatever listens there, and
//!   can read answers too. Its requests carry `Host: evil.example`. A
//!   server that checks no tokens answers only host names that are IP
//!   addresses, `localhost` (and `*.localhost`), its own listen and
//!   advertised names, and `server.allowed_hosts`. With tokens checked a
//!   rebound page has no token to send, so any name is served (a cluster
//!   or a load balancer may use names of its own).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// Which browsers' requests the server serves (from `[server]`).
#[derive(Debug, Clone, Default)]
pub struct BrowserPolicy {
    /// Origins (`scheme://host[:port]`, lowercase) whose pages may change
    /// data; `*` lets any.
    pub allowed_origins: Vec<String>,
    /// Host names served besides IP addresses and `localhost`, lowercase,
    /// without port; `*` serves any. Checked only when `check_host`.
    pub allowed_hosts: Vec<String>,
    /// Whether `Host` is checked: when the server checks no tokens.
    pub check_host: bool,
}

impl BrowserPolicy {
    /// The policy of a server listening on `listen` (and reached by the
    /// other nodes at `advertise`), with the configured lists.
    pub fn new(
        allowed_origins: &[String],
        allowed_hosts: &[String],
        own_addresses: &[&str],
        tokens_checked: bool,
    ) -> BrowserPolicy {
        let mut hosts: Vec<String> = allowed_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        for address in own_addresses.iter().filter(|a| !a.is_empty()) {
            let (host, _) = split_port(address);
            hosts.push(host.to_ascii_lowercase());
        }
        BrowserPolicy {
            allowed_origins: allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            allowed_hosts: hosts,
            check_host: !tokens_checked,
        }
    }

    /// Why a request with these headers is refused, if it is.
    fn refusal(&self, method: &Method, path: &str, headers: &HeaderMap) -> Option<Refused> {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        // Probes answer nothing a page could use, and a load balancer's
        // may send a name of its own.
        let probe = matches!(path, "/healthz" | "/readyz" | "/ping");
        if self.check_host
            && !probe
            && let Some(host) = host
            && !self.host_served(host)
        {
            return Some(Refused::Host(host.to_string()));
        }
        if !may_change_data(method, path) {
            return None;
        }
        let origin = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok());
        let origin_allowed = |origin: Option<&str>| {
            origin.is_some_and(|o| {
                let o = o.trim_end_matches('/').to_ascii_lowercase();
                self.allowed_origins.iter().any(|a| a == "*" || *a == o)
            })
        };
        let cross = match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
            Some(site) => !matches!(site, "same-origin" | "none"),
            None => match origin {
                None => false,
                Some(o) => host.is_none_or(|h| !origin_is_host(o, h)),
            },
        };
        if cross && !origin_allowed(origin) {
            return Some(Refused::CrossOrigin(
                origin.unwrap_or("another site").to_string(),
            ));
        }
        None
    }

    fn host_served(&self, host: &str) -> bool {
        let (name, _) = split_port(host);
        let name = name.to_ascii_lowercase();
        let bare = name.trim_start_matches('[').trim_end_matches(']');
        bare.parse::<std::net::IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self.allowed_hosts.iter().any(|h| h == "*" || *h == name)
    }
}

/// Whether a request of this method and path may change data. `/query`
/// by GET may too: InfluxDB runs `CREATE` and `DROP` sent so (with a
/// warning), and a page can make a browser send a GET by an image alone.
fn may_change_data(method: &Method, path: &str) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) || path == "/query"
}

/// `host:port` (or `[v6]:port`, or `host`) split at its port.
fn split_port(address: &str) -> (&str, Option<&str>) {
    if let Some(rest) = address.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((_, port)) => (
                &address[..rest.find(']').map_or(address.len(), |i| i + 2)],
                port.strip_prefix(':'),
            ),
            None => (address, None),
        };
    }
    match address.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, Some(port)),
        _ => (address, None),
    }
}

/// Whether `origin` (`scheme://host[:port]`) names the same host and port
/// as the request's `Host`.
fn origin_is_host(origin: &str, host: &str) -> bool {
    let Some((scheme, rest)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => "80",
        "https" => "443",
        _ => return false,
    };
    let (o_name, o_port) = split_port(rest.trim_end_matches('/'));
    let (h_name, h_port) = split_port(host);
    o_name.eq_ignore_ascii_case(h_name)
        && o_port.unwrap_or(default_port) == h_port.unwrap_or(default_port)
}

enum Refused {
    Host(String),
    CrossOrigin(String),
}

/// Refuses what [`BrowserPolicy`] does not serve, before anything else
/// reads the request.
pub(super) async fn guard(
    State(policy): State<Arc<BrowserPolicy>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let refused = policy.refusal(req.method(), req.uri().path(), req.headers());
    let Some(refused) = refused else {
        return next.run(req).await;
    };
    use crate::codec::quote_prefix;
    let (reason, error) = match refused {
        Refused::Host(host) => (
            "host",
            ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!(
                    "host `{}` is not a name of this server, which checks no tokens: a page \
                     of another site may be reaching it through DNS rebinding. Reach it by \
                     its address or localhost, or list the name in server.allowed_hosts",
                    quote_prefix(&host)
                ),
            ),
        ),
        Refused::CrossOrigin(origin) => (
            "origin",
            ApiError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                format!(
                    "a page of {} may not change this server's data through a browser: \
                     writes, deletes and administration come from this server's own pages \
                     or from clients that are not browsers; list the origin in \
                     server.allowed_origins to let its pages",
                    quote_prefix(&origin)
                ),
            ),
        ),
    };
    metrics::counter!("halite_http_browser_refusals_total", "reason" => reason).increment(1);
    tracing::info!(
        reason,
        method = %req.method(),
        path = %quote_prefix(req.uri().path()),
        "refused a browser's request"
    );
    error.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    fn refused(
        policy: &BrowserPolicy,
        method: Method,
        path: &str,
        h: &[(&'static str, &str)],
    ) -> bool {
        policy.refusal(&method, path, &headers(h)).is_some()
    }

    #[test]
    fn pages_of_other_sites_may_not_change_data() {
        let p = BrowserPolicy::new(&[], &[], &["127.0.0.1:8070"], false);
        let own = [
            ("host", "127.0.0.1:8070"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert!(!refused(&p, Method::POST, "/api/v1/write", &own));
        // curl, Telegraf, Grafana's server: neither header.
        assert!(!refused(
            &p,
            Method::POST,
            "/api/v1/write",
            &[("host", "127.0.0.1:8070")]
        ));
        let other = [
            ("host", "127.0.0.1:8070"),
            ("origin", "http://evil.example"),
            ("sec-fetch-site", "cross-site"),
        ];
        assert!(refused(&p, Method::POST, "/api/v1/write", &other));
        assert!(refused(&p, Method::DELETE, "/api/v1/tables/t", &other));
        // A page on another port of the same machine is same-site.
        let local = [
            ("host", "127.0.0.1:8070"),
            ("origin", "http://127.0.0.1:3000"),
            ("sec-fetch-site", "same-site"),
        ];
        assert!(refused(&p, Method::POST, "/write", &local));
        // /query by GET may drop; other GETs only read (a page cannot read
        // the answer).
        assert!(refused(&p, Method::GET, "/query", &other));
        assert!(!refused(&p, Method::GET, "/api/v1/tables", &other));
        // Older browsers: Origin alone, compared with Host.
        assert!(refused(
            &p,
            Method::POST,
            "/write",
            &[
                ("host", "127.0.0.1:8070"),
                ("origin", "http://evil.example")
            ]
        ));
        assert!(refused(
            &p,
            Method::POST,
            "/write",
            &[("host", "127.0.0.1:8070"), ("origin", "null")]
        ));
        assert!(!refused(
            &p,
            Method::POST,
            "/write",
            &[
                ("host", "127.0.0.1:8070"),
                ("origin", "http://127.0.0.1:8070")
            ]
        ));
        assert!(refused(
            &p,
            Method::POST,
            "/write",
            &[
                ("host", "127.0.0.1:8070"),
                ("origin", "http://127.0.0.1:8071")
            ]
        ));
        let allowed = BrowserPolicy::new(&["http://evil.example/".into()], &[], &[], false);
        assert!(!refused(&allowed, Method::POST, "/api/v1/write", &other));
    }

    #[test]
    fn a_server_without_tokens_answers_its_own_names_only() {
        let p = BrowserPolicy::new(
            &[],
            &["grafana-host".into()],
            &["127.0.0.1:8070", "node-a:8070"],
            false,
        );
        for host in [
            "127.0.0.1:8070",
            "localhost:8070",
            "[::1]:8070",
            "LOCALHOST",
            "app.localhost:8070",
            "node-a:8070",
            "grafana-host:8070",
            "10.0.0.5",
        ] {
            assert!(
                !refused(&p, Method::GET, "/api/v1/tables", &[("host", host)]),
                "{host}"
            );
        }
        assert!(refused(
            &p,
            Method::GET,
            "/api/v1/tables",
            &[("host", "evil.example:8070")]
        ));
        assert!(refused(
            &p,
            Method::GET,
            "/metrics",
            &[("host", "localhost.evil.example")]
        ));
        assert!(!refused(
            &p,
            Method::GET,
            "/healthz",
            &[("host", "lb-probe.internal")]
        ));
        let tokens = BrowserPolicy::new(&[], &[], &["0.0.0.0:8070"], true);
        assert!(!refused(
            &tokens,
            Method::GET,
            "/api/v1/tables",
            &[("host", "halite.example:8070")]
        ));
        let any = BrowserPolicy::new(&[], &["*".into()], &[], false);
        assert!(!refused(
            &any,
            Method::GET,
            "/",
            &[("host", "whatever.example")]
        ));
    }

    #[test]
    fn addresses_split_at_their_port() {
        assert_eq!(split_port("a:1"), ("a", Some("1")));
        assert_eq!(split_port("a"), ("a", None));
        assert_eq!(split_port("[::1]:8070"), ("[::1]", Some("8070")));
        assert_eq!(split_port("[::1]"), ("[::1]", None));
        assert!(origin_is_host("http://a:80", "a"));
        assert!(origin_is_host("https://a", "a:443"));
        assert!(!origin_is_host("https://a", "a:80"));
    }
}
