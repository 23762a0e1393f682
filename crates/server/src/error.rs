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
        match r.status() {
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(limit),
            status => ApiError {
                status,
                ..ApiError::bad_request(format!("The body could not be read: {}", r.body_text()))
            },
        }
    }

    /// 413 for a body past `limit` bytes.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            ..ApiError::bad_request(format!(
                "The body is larger than the limit of {limit} bytes"
            ))
        }
    }

    /// 401 for a request without the server's API key.
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            ..ApiError::bad_request(
                "Missing or incorrect API key: send the server's key as 'Authorization: Bearer KEY'",
            )
        }
        .with_code("invalid_api_key")
    }

    /// 403 for a request from a host or page this server does not answer.
    pub fn forbidden(code: &'static str, message: String) -> ApiError {
        ApiError {
            status: StatusCode::FORBIDDEN,
            ..ApiError::bad_request(message)
        }
        .with_code(code)
    }

    /// 415 for a body of type `given` where the route takes `want`.
    pub fn unsupported_media(given: &str, want: &str) -> ApiError {
        let given = match given {
            "" => "no Content-Type".to_string(),
            g => format!("Content-Type '{g}'"),
        };
        ApiError {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ..ApiError::bad_request(format!(
                "The body must be {want}, but the request gives {given} (curl: -H 'Content-Type: {want}')"
            ))
        }
        .with_code("unsupported_media_type")
    }

    /// 408 for a body not received within `secs` seconds.
    pub fn body_timed_out(secs: f64) -> ApiError {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            ..ApiError::bad_request(format!(
                "The body did not arrive within {secs} s (--body-timeout)"
            ))
        }
        .with_code("timeout")
    }

    /// 504 for a request not answered within `secs` seconds.
    pub fn timed_out(secs: f64) -> ApiError {
        ApiError {
            status: StatusCode::GATEWAY_TIMEOUT,
            kind: "server_error",
            ..ApiError::bad_request(format!(
                "The request ran past the server's limit of {secs} s (--request-timeout)"
            ))
        }
        .with_code("timeout")
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
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}
