//! Who may call which route: the credentials a request carries, the scope
//! every route declares, and the token routes (`/api/v1/tokens`).
//!
//! Two steps. [`identify`] runs before anything else reads the request
//! (its body included): a route that needs a token and has none, or an
//! unknown one, is answered 401 there. [`authorize`] runs once the route
//! is known, and checks the scope [`route_need`] declares for it against
//! the namespace the path or query names; where the namespace is in the
//! body (a query's table, a new table's name, an InfluxQL statement's
//! database), the handler checks it with [`allow`]. docs/security.md is the
//! user's side.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequestParts, MatchedPath, Path, RawPathParams, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::error::{ApiError, ApiResult};
use super::state::{AppState, AuthSettings, PROMETHEUS_DB, blocking, json_body};
use crate::auth::{Caller, KnownSecret, Scope, TokenRecord};
use crate::catalog::TableName;

/// Decides whether the API checks tokens: when `[auth] enabled`, and
/// always when `listen` is an address other machines reach (unless
/// `insecure`). Refuses, with what to do, a server that would check tokens
/// but has none to check against, and a cluster whose nodes could not
/// call on each other.
pub fn decide(
    config: &crate::config::AuthConfig,
    listen: &str,
    has_tokens: bool,
    cluster: bool,
) -> Result<AuthSettings, String> {
    let public = !is_loopback(listen);
    let enabled = config.enabled || (public && !config.insecure);
    let bootstrap =
        (!config.bootstrap_token.is_empty()).then(|| KnownSecret::new(&config.bootstrap_token));
    if enabled && bootstrap.is_none() && !has_tokens {
        let why = if config.enabled {
            "auth.enabled is set".to_string()
        } else {
            format!("server.listen `{listen}` is reachable from other machines")
        };
        return Err(format!(
            "{why}, so every request needs a token, and there is none yet: set \
             auth.bootstrap_token (say HALITE__AUTH__BOOTSTRAP_TOKEN=$(openssl rand -hex 32)) \
             and make tokens with `halite token create --token <it>`; or listen on 127.0.0.1; \
             or pass --insecure to serve without authentication"
        ));
    }
    if enabled && cluster && bootstrap.is_none() {
        return Err(
            "a cluster's nodes call on each other with auth.bootstrap_token: set \
                    the same one on every node"
                .into(),
        );
    }
    Ok(AuthSettings {
        enabled,
        bootstrap,
        metrics_open: config.metrics_open,
    })
}

/// Whether `listen` (`host:port`) is an address only this machine reaches.
pub fn is_loopback(listen: &str) -> bool {
    let host = match listen.rsplit_once(':') {
        Some((host, _)) => host,
        None => listen,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Routes anyone may call: health, readiness, `/ping` (InfluxDB clients
/// ping before they authenticate), the explorer's files (they hold no
/// data; the page asks for a token), and `/metrics` unless closed.
fn is_open(path: &str, metrics_open: bool) -> bool {
    matches!(
        path,
        "/healthz" | "/readyz" | "/ping" | "/" | "/ui" | "/ui/"
    ) || path.starts_with("/ui/")
        || (metrics_open && path == "/metrics")
}

/// Where a route's namespace comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ns {
    /// Nothing of one namespace: only a token over every namespace.
    Global,
    /// The path's `{table}` (`ns:table`).
    PathTable,
    /// The path's `{ns}`.
    PathNamespace,
    /// `?db=` (InfluxDB 1.x writes).
    QueryDb,
    /// `?bucket=db[/rp]` (InfluxDB 2 writes).
    QueryBucket,
    /// `?db=`, `prometheus` when absent (remote write and read).
    PromDb,
    /// The handler checks it (the namespace is in the body, or a listing
    /// shows only what the caller may see).
    Handler,
}

/// The scope each route needs, and where its namespace is; `None` for
/// routes anyone may call. A route missing here is refused to every
/// token but the bootstrap one (see [`authorize`]).
fn route_need(method: &Method, route: &str) -> Option<Option<(Scope, Ns)>> {
    use Scope::{Admin, Read, Write};
    let get = method == Method::GET || method == Method::HEAD;
    let need = match route {
        "/healthz"
        | "/readyz"
        | "/ping"
        | "/"
        | "/ui"
        | "/ui/"
        | "/ui/{file}"
        | "/prometheus/api/v1/status/buildinfo" => {
            return Some(None);
        }
        "/metrics" => (Read, Ns::Global),
        "/api/v1/namespaces" if get => (Read, Ns::Handler),
        "/api/v1/namespaces" => (Admin, Ns::Handler),
        "/api/v1/namespaces/{ns}" => (Admin, Ns::PathNamespace),
        "/api/v1/tables" if get => (Read, Ns::Handler),
        "/api/v1/tables" => (Admin, Ns::Handler),
        "/api/v1/tables/{table}" if get => (Read, Ns::PathTable),
        "/api/v1/tables/{table}"
        | "/api/v1/tables/{table}/compact"
        | "/api/v1/tables/{table}/flush" => (Admin, Ns::PathTable),
        "/api/v1/tables/{table}/rows/{row}"
        | "/api/v1/tables/{table}/scan"
        | "/api/v1/tables/{table}/series" => (Read, Ns::PathTable),
        "/api/v1/tables/{table}/delete" => (Write, Ns::PathTable),
        "/api/v1/write" => (Write, Ns::Handler),
        "/api/v1/prom/write" => (Write, Ns::PromDb),
        "/api/v1/read" | "/api/v1/prom/read" => (Read, Ns::PromDb),
        "/api/v1/query" => (Read, Ns::Handler),
        "/prometheus/api/v1/query"
        | "/prometheus/api/v1/query_range"
        | "/prometheus/api/v1/series"
        | "/prometheus/api/v1/labels"
        | "/prometheus/api/v1/label/{name}/values"
        | "/prometheus/api/v1/metadata" => (Read, Ns::PromDb),
        "/api/v1/ingest" | "/api/v1/cluster" => (Read, Ns::Global),
        "/api/v1/tokens" | "/api/v1/tokens/{id}" => (Admin, Ns::Global),
        "/internal/v1/regions/{id}/tail" => (Admin, Ns::Global),
        "/write" => (Write, Ns::QueryDb),
        "/api/v2/write" => (Write, Ns::QueryBucket),
        "/query" => (Read, Ns::Handler),
        _ => return None,
    };
    Some(Some(need))
}

/// Routes whose clients read InfluxDB's error shape (`{"error": "…"}`).
pub(super) fn speaks_influx(path: &str) -> bool {
    matches!(path, "/write" | "/api/v2/write" | "/query")
}

/// Counts a refused request by why: `missing` (no credentials), `invalid`
/// (unknown, revoked or malformed), `forbidden` (a token without the
/// scope or namespace).
fn count_failure(reason: &'static str) {
    metrics::counter!("halite_auth_failures_total", "reason" => reason).increment(1);
}

fn refusal(path: &str, status: StatusCode, code: &'static str, message: String) -> Response {
    let mut resp = if speaks_influx(path) {
        (status, Json(json!({ "error": message }))).into_response()
    } else {
        ApiError::new(status, code, message).into_response()
    };
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"halite\""),
        );
    }
    resp
}

fn unauthorized(path: &str, reason: &'static str, message: &str) -> Response {
    count_failure(reason);
    let how = if speaks_influx(path) {
        "`Authorization: Token <token>`, Basic auth with the token as password, or \
         ?u=<user>&p=<token>"
    } else {
        "`Authorization: Bearer <token>` (or Basic auth with the token as password)"
    };
    refusal(
        path,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        format!("{message}: send a token as {how}; docs/security.md says how to make one"),
    )
}

fn forbidden_message(scope: Scope, ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!(
            "this token may not {scope} in namespace `{ns}`: use a token with the `{scope}` \
             scope over it"
        ),
        None => format!(
            "this needs the `{scope}` scope over every namespace, which this token does not \
             have"
        ),
    }
}

/// The token a request presents, if any; `Err` for credentials that
/// cannot be read.
fn presented_token(headers: &HeaderMap, query: Option<&str>) -> Result<Option<String>, String> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let value = value
            .to_str()
            .map_err(|_| "the Authorization header is not ASCII".to_string())?;
        let (kind, rest) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
        let rest = rest.trim();
        if kind.eq_ignore_ascii_case("bearer") || kind.eq_ignore_ascii_case("token") {
            return Ok(Some(rest.to_string()));
        }
        if kind.eq_ignore_ascii_case("basic") {
            use base64::Engine;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or("the Basic credentials are not base64 of `user:password`")?;
            let (user, password) = decoded.split_once(':').unwrap_or((&decoded, ""));
            // InfluxDB 1 clients and Prometheus put the token in the
            // password; the user name is theirs to choose.
            let token = if password.is_empty() { user } else { password };
            return Ok(Some(token.to_string()));
        }
        return Err(format!(
            "the Authorization scheme `{}` is not one halite reads (Bearer, Token or Basic)",
            crate::codec::quote_prefix(kind)
        ));
    }
    // InfluxDB 1 clients: ?u=user&p=password.
    if let Some(q) = query.filter(|q| q.contains("p=")) {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(q).unwrap_or_default();
        if let Some((_, p)) = pairs.into_iter().find(|(k, _)| k == "p") {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

impl AppState {
    /// Who presents `token`: the bootstrap token, a token of the catalog,
    /// or no one (`None`).
    fn caller_of(&self, token: &str) -> Option<Caller> {
        if let Some(boot) = &self.auth.bootstrap
            && boot.matches(token)
        {
            return Some(Caller::Bootstrap);
        }
        let (id, secret) = crate::auth::split(token)?;
        self.store.catalog().with_token(id, |record| {
            record
                .filter(|r| crate::auth::secret_matches(r, secret))
                .map(Caller::from_record)
        })
    }
}

/// Step one: who is calling. Answers 401 to a request for a closed route
/// without a known token, before its body is read. A refusal is logged
/// (never the token) and counted, and repeated ones from one address are
/// slowed ([`super::guessing::FailedLogins`]).
pub(super) async fn identify(
    State(s): State<Arc<AppState>>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let caller = if !s.auth.enabled {
        Caller::Unchecked
    } else if is_open(req.uri().path(), s.auth.metrics_open) {
        Caller::Anonymous
    } else {
        let path = req.uri().path().to_string();
        let refused = match presented_token(req.headers(), req.uri().query()) {
            Ok(None) => ("missing", "this route needs a token".to_string()),
            Err(why) => ("invalid", why),
            Ok(Some(token)) => match s.caller_of(&token) {
                Some(caller) => {
                    req.extensions_mut().insert(caller);
                    return next.run(req).await;
                }
                None => ("invalid", "the token is unknown or revoked".to_string()),
            },
        };
        let (reason, why) = refused;
        let peer = req
            .extensions()
            .get::<super::listen::Peer>()
            .map(|p| p.0.ip());
        if let Some(ip) = peer {
            let (count, answer_at) = s.failed_logins.failed(ip);
            // Every failure of a few, then one at each doubling: an
            // address guessing all day writes a few dozen lines.
            if count <= 5 || count.is_power_of_two() {
                tracing::warn!(
                    address = %ip,
                    reason,
                    path = %crate::codec::quote_prefix(&path),
                    failures = count,
                    "refused credentials"
                );
            }
            if let Some(at) = answer_at {
                metrics::counter!("halite_auth_slowed_total").increment(1);
                tokio::time::sleep_until(at.into()).await;
            }
        }
        return unauthorized(&path, reason, &why);
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// Step two: whether the caller holds the scope the route declares, over
/// the namespace the path or query names.
pub(super) async fn authorize(
    State(s): State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let caller = req
        .extensions()
        .get::<Caller>()
        .cloned()
        .unwrap_or(Caller::Anonymous);
    if caller == Caller::Unchecked {
        return next.run(req).await;
    }
    // An unknown path goes on to its 404 (or a known one to its 405).
    let Some(route) = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
    else {
        return next.run(req).await;
    };
    let (scope, from) = match route_need(req.method(), &route) {
        Some(Some(need)) => need,
        Some(None) => return next.run(req).await,
        // Fail closed: a route nobody declared is the bootstrap token's.
        None if caller == Caller::Bootstrap => return next.run(req).await,
        None => {
            count_failure("forbidden");
            return Forbidden(format!(
                "route `{route}` declares no scope, so only the bootstrap token may call it"
            ))
            .into_response_for(req.uri().path());
        }
    };
    if route == "/metrics" && s.auth.metrics_open {
        return next.run(req).await;
    }
    // Owned: a borrow of the request (whose body is not Sync) may not be
    // held across the handler's await.
    let query = req.uri().query().unwrap_or("").to_string();
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&query).unwrap_or_default();
    // A parameter that names a namespace, given twice, could be checked
    // as one and used as the other.
    for name in ["db", "bucket", "table"] {
        if pairs.iter().filter(|(k, _)| k == name).count() > 1 {
            return refusal(
                req.uri().path(),
                StatusCode::BAD_REQUEST,
                "invalid_input",
                format!("query parameter `{name}` is given more than once: give it once"),
            );
        }
    }
    let param = |name: &str| -> Option<String> {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let ns = match from {
        Ns::Global | Ns::Handler => None,
        Ns::QueryDb => param("db"),
        Ns::QueryBucket => {
            param("bucket").map(|b| b.split('/').next().unwrap_or_default().to_string())
        }
        Ns::PromDb => Some(param("db").unwrap_or_else(|| PROMETHEUS_DB.into())),
        Ns::PathTable | Ns::PathNamespace => {
            let key = if from == Ns::PathTable { "table" } else { "ns" };
            let (mut parts, body) = req.into_parts();
            let value = match RawPathParams::from_request_parts(&mut parts, &()).await {
                Ok(params) => params
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| v.to_string()),
                Err(_) => None,
            };
            let req = axum::extract::Request::from_parts(parts, body);
            let ns = match value {
                Some(t) if from == Ns::PathTable => match TableName::parse(&t) {
                    Ok(name) => Some(name.namespace),
                    // A name that does not parse is the handler's 400 to
                    // give, to a caller that holds the scope somewhere.
                    Err(_) if caller.holds(scope) => return next.run(req).await,
                    Err(_) => None,
                },
                v => v,
            };
            return match allow(&caller, scope, ns.as_deref()) {
                Ok(()) => next.run(req).await,
                Err(e) => e.into_response_for(req.uri().path()),
            };
        }
    };
    let checked = if from == Ns::Handler {
        if caller.holds(scope) {
            Ok(())
        } else {
            count_failure("forbidden");
            Err(Forbidden(format!(
                "this token does not have the `{scope}` scope"
            )))
        }
    } else {
        allow(&caller, scope, ns.as_deref())
    };
    match checked {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response_for(req.uri().path()),
    }
}

/// A request refused for want of a scope (403).
#[derive(Debug)]
pub(super) struct Forbidden(String);

impl Forbidden {
    fn into_response_for(self, path: &str) -> Response {
        refusal(path, StatusCode::FORBIDDEN, "forbidden", self.0)
    }

    /// The message, for a handler answering in its own protocol's shape.
    pub(super) fn message(&self) -> &str {
        &self.0
    }
}

impl From<Forbidden> for ApiError {
    fn from(f: Forbidden) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", f.0)
    }
}

/// Whether `caller` may do `scope` in `ns` (`None`: in every namespace);
/// a refusal is counted.
pub(super) fn allow(caller: &Caller, scope: Scope, ns: Option<&str>) -> Result<(), Forbidden> {
    if caller.may(scope, ns) {
        return Ok(());
    }
    count_failure("forbidden");
    Err(Forbidden(forbidden_message(scope, ns)))
}

/// `POST /api/v1/tokens` `{"name", "scopes": [...], "namespaces": [...]}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NewTokenReq {
    #[serde(default)]
    name: String,
    scopes: Vec<String>,
    /// Empty or absent: every namespace.
    #[serde(default)]
    namespaces: Vec<String>,
}

/// A token as listed: never its secret or the secret's digest.
fn token_json(r: &TokenRecord) -> serde_json::Value {
    json!({
        "id": r.id,
        "name": r.name,
        "scopes": r.scopes,
        "namespaces": r.namespaces,
        "created_ms": r.created_ms,
    })
}

/// Makes a token; the answer holds the token itself, shown only here.
pub(super) async fn create_token(
    State(s): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    let req: NewTokenReq = json_body(body)?;
    let scopes = req
        .scopes
        .iter()
        .map(|x| Scope::parse(x))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::bad(e.to_string()))?;
    for ns in &req.namespaces {
        crate::catalog::check_name("namespace", ns)?;
    }
    let made =
        crate::auth::mint(&req.name, &scopes, &req.namespaces, s.clock.now_ms()).map_err(|e| {
            match e {
                crate::auth::AuthError::Invalid(why) => ApiError::bad(why),
                other => ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    other.to_string(),
                ),
            }
        })?;
    let store = s.store.clone();
    let record = made.record.clone();
    blocking(move || store.catalog().add_token(&record)).await?;
    // What the token may do, never the token.
    tracing::info!(
        id = %made.record.id,
        name = %crate::codec::quote_prefix(&made.record.name),
        scopes = ?made.record.scopes,
        namespaces = ?made.record.namespaces,
        "token created"
    );
    metrics::counter!("halite_auth_tokens_total", "change" => "created").increment(1);
    let mut body = token_json(&made.record);
    body["token"] = json!(made.token);
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// Every token, without secrets.
pub(super) async fn list_tokens(State(s): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(serde_json::Value::Array(
        s.store.catalog().tokens().iter().map(token_json).collect(),
    ))
}

/// Revokes a token: the next request presenting it gets 401.
pub(super) async fn revoke_token(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let store = s.store.clone();
    let revoked = blocking(move || store.catalog().revoke_token(&id)).await?;
    tracing::info!(
        id = %revoked.id,
        name = %crate::codec::quote_prefix(&revoked.name),
        "token revoked"
    );
    metrics::counter!("halite_auth_tokens_total", "change" => "revoked").increment(1);
    Ok(StatusCode::NO_CONTENT)
}
