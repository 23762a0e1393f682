//! OpenAI-style error responses: `{"error": {"message", "type", "param", "code"}}` with a 4xx or
//! 5xx status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to the client.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `not_found_error`, `server_error`, ….
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<String>,
    /// A machine-readable code (`context_length_exceeded`, `model_not_found`, …).
    pub code: Option<&'static str>,
    /// Seconds for a `Retry-After` header (overload).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// 400 for the field `param`.
    pub fn bad_param(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.to_string()),
            ..ApiError::bad_request(message)
        }
    }

    /// 400 about the request as a whole.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// The same error with a machine-readable `code`.
    pub fn with_code(self, code: &'static str) -> ApiError {
        ApiError {
            code: Some(code),
            ..self
        }
    }

    /// 404 for an unknown model name.
    pub fn unknown_model(name: &str, served: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            kind: "invalid_request_error",
            ..ApiError::bad_param(
                "model",
                format!("The model '{name}' does not exist; this server serves '{served}'"),
            )
        }
        .with_code("model_not_found")
    }

    /// 503 with `Retry-After` when every slot is busy and the queue is full.
    pub fn overloaded(queued: usize) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!(
                "The server is busy: every slot is generating and {queued} requests are waiting; retry later"
            ),
            kind: "server_error",
            param: None,
            code: Some("server_overloaded"),
            retry_after: Some(1),
        }
    }

    /// 503 for a request the server ends or refuses because it is shutting down.
    pub fn shutting_down() -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "The server is shutting down".into(),
            kind: "server_error",
            param: None,
            code: Some("server_shutting_down"),
            retry_after: None,
        }
    }

    /// 500 for a failure while generating.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// A body that could not be read: 413 past `limit` bytes, else the rejection's status.
    pub fn unread_body(r: &axum::extract::rejection::BytesRejection, limit: usize) -> ApiError {
        ApiError {
            status: r.status(),
            message: if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                format!("The body is larger than the limit of {limit} bytes")
            } else {
                format!("The body could not be read: {}", r.body_text())
            },
            ..ApiError::bad_request("")
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
