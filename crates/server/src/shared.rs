//! What the text, embedding and speech servers share: the 404 of an unknown route, the
//! model thread's liveness flag and `/health` answer, and `/metrics` counter lines.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::ApiError;

/// The answer to a route no server has.
pub(crate) async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        ..ApiError::bad_request("No such route")
    }
}

/// Clears its flag when dropped: a model thread's end, a panic included.
pub(crate) struct Running(pub Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// `/health` of a server whose model thread is `alive`, else a 503 saying `why`.
pub(crate) fn health(alive: bool, why: &str) -> Response {
    match alive {
        true => Json(json!({"status": "ok"})).into_response(),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "error", "message": why})),
        )
            .into_response(),
    }
}

/// Prometheus text of counters `wgllm_{prefix}_{name}` with their help lines.
pub(crate) fn counters(prefix: &str, rows: &[(&str, &str, f64)]) -> Response {
    let mut text = String::new();
    for (name, help, v) in rows {
        text.push_str(&format!(
            "# HELP wgllm_{prefix}_{name} {help}\n# TYPE wgllm_{prefix}_{name} counter\nwgllm_{prefix}_{name} {v}\n"
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}
