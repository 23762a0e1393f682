//! Typed access to the optional fields of a request's JSON body, each wrong one an error that
//! names the field and what it holds.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// JSON type name for errors.
pub(crate) use wgllm_structured::request::kind;

/// Typed access to optional fields (`null` counts as absent).
pub(crate) struct Fields<'a>(pub(crate) &'a Map<String, Value>);

impl Fields<'_> {
    pub(crate) fn get(&self, k: &str) -> Option<&Value> {
        self.0.get(k).filter(|v| !v.is_null())
    }

    pub(crate) fn number(&self, k: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        let x = v.as_f64().ok_or_else(|| {
            ApiError::bad_param(k, format!("'{k}' must be a number, got {}", kind(v)))
        })?;
        if !(lo..=hi).contains(&x) {
            return Err(ApiError::bad_param(
                k,
                format!("'{k}' must be between {lo} and {hi}, got {x}"),
            ));
        }
        Ok(Some(x as f32))
    }

    pub(crate) fn integer(&self, k: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(k) else {
            return Ok(None);
        };
        let x = match v {
            Value::Number(n) => n.as_i64().or_else(|| n.as_u64().map(|u| u as i64)),
            _ => None,
        }
        .ok_or_else(|| {
            ApiError::bad_param(k, format!("'{k}' must be an integer, got {}", kind_num(v)))
        })?;
        if !(lo..=hi).contains(&x) {
            return Err(ApiError::bad_param(
                k,
                format!("'{k}' must be between {lo} and {hi}, got {x}"),
            ));
        }
        Ok(Some(x))
    }

    pub(crate) fn boolean(&self, k: &str) -> Result<Option<bool>, ApiError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(ApiError::bad_param(
                k,
                format!("'{k}' must be a boolean, got {}", kind(v)),
            )),
        }
    }

    pub(crate) fn string(&self, k: &str) -> Result<Option<&str>, ApiError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(ApiError::bad_param(
                k,
                format!("'{k}' must be a string, got {}", kind(v)),
            )),
        }
    }
}

/// Like [`kind`], telling a fractional number apart.
fn kind_num(v: &Value) -> String {
    match v {
        Value::Number(n) => format!("the number {n}"),
        other => kind(other).to_string(),
    }
}
