//! What every request passes before a route sees it, on all three servers:
//! - the `Host` header of a server on a loopback address must name the loopback (or a host
//!   `--allow-host` gives), so a DNS-rebinding page cannot reach it through its own name;
//! - a request from a browser page (an `Origin` header) must come from the server's own origin or
//!   one `--cors` allows; allowed origins get CORS headers and their preflights are answered;
//! - with `--api-key`, `Authorization: Bearer KEY` (401 otherwise; `/health` and `/metrics`
//!   answer without it unless `--api-key-health`);
//! - a POST body must be `application/json` (`multipart/form-data` on `/v1/audio/`): 415 for
//!   anything else, which also keeps a page's "simple" cross-origin posts out;
//! - the body is read whole within the body timeout (408) and the size limit (413), and the
//!   route's answer must come within the request timeout (504).
//!
//! Each answer is logged in one line: method, path, status, milliseconds to the answer's head,
//! and the `x-request-id` the route gave it. The refusals are counted by status
//! ([`Refusals`]), and a server's `/metrics` answer gets their counter appended.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;

use crate::error::ApiError;
use crate::metrics::Refusals;
use crate::HttpConfig;

/// The checks of one server.
pub(crate) struct Guard {
    pub cfg: HttpConfig,
    /// Largest body the server's routes take.
    pub max_body: usize,
    /// The server listens on a loopback address: the `Host` check applies.
    pub loopback: bool,
    pub refusals: Arc<Refusals>,
}

/// When the route's answer is due; routes that stream read it to end their streams on time.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    pub at: Instant,
    /// The request timeout it was set from.
    pub limit: std::time::Duration,
}

/// Wraps `router` in the checks of `guard`.
pub(crate) fn wrap(router: axum::Router, guard: Guard) -> axum::Router {
    router.layer(axum::middleware::from_fn_with_state(Arc::new(guard), check))
}

/// Runs the checks and the route, and logs one line of the answer.
async fn check(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let (t0, method, path) = (
        Instant::now(),
        req.method().clone(),
        req.uri().path().to_owned(),
    );
    let r = checked(&g, req, next).await;
    let r = match (method == Method::GET && path == "/metrics", r.status()) {
        (true, StatusCode::OK) => with_refusals(r, &g.refusals).await,
        _ => r,
    };
    let status = r.status().as_u16();
    let id = r
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    let ms = format!("{:.1}", t0.elapsed().as_secs_f64() * 1e3);
    match status {
        500.. => tracing::warn!(%method, %path, status, ms, id, "request"),
        _ => tracing::info!(%method, %path, status, ms, id, "request"),
    }
    r
}

async fn checked(g: &Guard, req: Request, next: Next) -> Response {
    let refuse = |e: ApiError| {
        let r = e.into_response();
        g.refusals.count(r.status().as_u16());
        r
    };
    let origin = match g.origin(req.headers()) {
        Ok(o) => o,
        Err(e) => return refuse(e),
    };
    // A preflight carries no credentials and no body: answered here for allowed origins.
    if req.method() == Method::OPTIONS && origin.is_some() {
        let mut r = StatusCode::NO_CONTENT.into_response();
        preflight(r.headers_mut(), req.headers());
        return with_cors(r, origin);
    }
    let r = match g.admit(req).await {
        Ok(req) => {
            let limit = g.cfg.request_timeout;
            let at = Instant::now() + limit;
            let mut req = req;
            req.extensions_mut().insert(Deadline { at, limit });
            match tokio::time::timeout_at(at.into(), next.run(req)).await {
                Ok(r) => r,
                Err(_) => refuse(ApiError::timed_out(g.cfg.request_timeout.as_secs_f64())),
            }
        }
        Err(e) => refuse(e),
    };
    with_cors(r, origin)
}

impl Guard {
    /// The `Access-Control-Allow-Origin` value for the request's `Origin` (`None` without
    /// one), or the 403 of a host or origin this server does not answer.
    fn origin(&self, h: &HeaderMap) -> Result<Option<HeaderValue>, ApiError> {
        let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
        if let Some(host) = host {
            if self.loopback && !self.host_allowed(host) {
                return Err(ApiError::forbidden(
                    "forbidden_host",
                    format!(
                        "The Host '{host}' is not this server's name: a server on a loopback address answers localhost, 127.0.0.1 and ::1 (add names with --allow-host)"
                    ),
                ));
            }
        }
        let Some(origin) = h.get(header::ORIGIN) else {
            return Ok(None);
        };
        let o = origin.to_str().unwrap_or_default();
        let same = host.is_some_and(|host| {
            o.strip_prefix("http://")
                .or_else(|| o.strip_prefix("https://"))
                == Some(host)
        });
        if same || self.cfg.cors.iter().any(|c| c == o) {
            return Ok(Some(origin.clone()));
        }
        if self.cfg.cors.iter().any(|c| c == "*") {
            return Ok(Some(HeaderValue::from_static("*")));
        }
        Err(ApiError::forbidden(
            "forbidden_origin",
            format!(
                "Requests from the page at '{o}' are refused: start the server with --cors {o} to allow that origin"
            ),
        ))
    }

    /// Whether `host` (`name[:port]`) names the loopback or a host `--allow-host` gives.
    fn host_allowed(&self, host: &str) -> bool {
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.rsplit_once(':').map_or(host, |(n, _)| n),
        };
        let name = name.to_ascii_lowercase();
        let loopback = name == "localhost"
            || name.ends_with(".localhost")
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        loopback
            || self
                .cfg
                .allowed_hosts
                .iter()
                .any(|a| a.eq_ignore_ascii_case(&name))
    }

    /// The key, media-type, body-time and size checks; the request with its body read.
    async fn admit(&self, req: Request) -> Result<Request, ApiError> {
        let path = req.uri().path();
        let open = matches!(path, "/health" | "/metrics") && !self.cfg.api_key_health;
        if let (Some(key), false) = (&self.cfg.api_key, open) {
            if !bearer_matches(req.headers(), key) {
                return Err(ApiError::unauthorized());
            }
        }
        if req.method() != Method::POST {
            return Ok(req);
        }
        let want = match path.starts_with("/v1/audio/") {
            true => "multipart/form-data",
            false => "application/json",
        };
        let given = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let essence = given.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case(want) {
            return Err(ApiError::unsupported_media(given, want));
        }
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body as u64) {
            return Err(ApiError::too_large(self.max_body));
        }
        let (parts, body) = req.into_parts();
        let limited = http_body_util::Limited::new(body, self.max_body);
        let read = tokio::time::timeout(self.cfg.body_timeout, limited.collect()).await;
        let bytes = match read {
            Ok(Ok(c)) => c.to_bytes(),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
                return Err(ApiError::too_large(self.max_body))
            }
            Ok(Err(e)) => {
                return Err(ApiError::bad_request(format!(
                    "The body could not be read: {e}"
                )))
            }
            Err(_) => {
                return Err(ApiError::body_timed_out(
                    self.cfg.body_timeout.as_secs_f64(),
                ))
            }
        };
        Ok(Request::from_parts(parts, Body::from(bytes)))
    }
}

/// `r` (a `/metrics` answer) with the refusals' counter after its own text.
async fn with_refusals(r: Response, refusals: &Refusals) -> Response {
    let (parts, body) = r.into_parts();
    match body.collect().await {
        Ok(c) => {
            let mut text = c.to_bytes().to_vec();
            text.extend_from_slice(refusals.render().as_bytes());
            Response::from_parts(parts, Body::from(text))
        }
        Err(_) => ApiError::internal("the metrics could not be read").into_response(),
    }
}

/// Whether `Authorization` is `Bearer KEY`, compared in time independent of where they differ.
fn bearer_matches(h: &HeaderMap, key: &str) -> bool {
    let given = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let (a, b) = (given.as_bytes(), key.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The headers of a preflight's answer: the methods and the headers the request asks for.
fn preflight(out: &mut HeaderMap, req: &HeaderMap) {
    out.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    let asked = req
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("authorization, content-type"));
    out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
}

/// `r` with the CORS headers of an allowed `origin`.
fn with_cors(mut r: Response, origin: Option<HeaderValue>) -> Response {
    if let Some(o) = origin {
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.insert(header::VARY, HeaderValue::from_static("origin"));
    }
    r
}
