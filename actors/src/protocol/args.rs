//! The protocol's argument rules: positional arguments where `null` and "missing" are the
//! same, typed accessors that answer a wrong JSON type with the exact
//! [`RpcError::InvalidArgument`] text, and option-object fields. Used by every method handler.

use serde_json::{Map, Value};

use super::{RpcError, RpcResult};

/// Positional arguments with the protocol's rule that `null` and "missing" are the same.
#[derive(Debug, Clone, Default)]
pub struct Args(pub Vec<Value>);

impl Args {
    /// The argument at `index`, or `None` when it is missing or JSON `null`.
    pub fn get(&self, index: usize) -> Option<&Value> {
        self.0.get(index).filter(|v| !v.is_null())
    }

    /// An optional string argument; any other JSON type is an [`RpcError::InvalidArgument`].
    pub fn opt_str(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<Option<&str>> {
        match self.get(index) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(invalid(method, index, param, "a string")),
        }
    }

    /// A required string argument.
    pub fn req_str(&self, method: &str, index: usize, param: &'static str) -> RpcResult<&str> {
        self.opt_str(method, index, param)?
            .ok_or_else(|| invalid(method, index, param, "a string"))
    }

    /// An optional object argument.
    pub fn opt_object(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<Option<&Map<String, Value>>> {
        match self.get(index) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(o)),
            Some(_) => Err(invalid(method, index, param, "an object")),
        }
    }

    /// A required object argument.
    pub fn req_object(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<&Map<String, Value>> {
        self.opt_object(method, index, param)?
            .ok_or_else(|| invalid(method, index, param, "an object"))
    }

    /// An optional non-negative integer argument (JSON numbers like `10.0` are accepted).
    pub fn opt_count(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<Option<u64>> {
        match self.get(index) {
            None => Ok(None),
            Some(v) => as_count(v)
                .map(Some)
                .ok_or_else(|| invalid(method, index, param, "a non-negative integer")),
        }
    }

    /// An optional integer argument that may be negative (`afterSeq` can be -1).
    pub fn opt_int(
        &self,
        method: &str,
        index: usize,
        param: &'static str,
    ) -> RpcResult<Option<i64>> {
        match self.get(index) {
            None => Ok(None),
            Some(v) => as_int(v)
                .map(Some)
                .ok_or_else(|| invalid(method, index, param, "an integer")),
        }
    }
}

fn as_int(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
}

fn as_count(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 9.0e15)
            .map(|f| f as u64)
    })
}

/// Builds an [`RpcError::InvalidArgument`].
pub fn invalid(
    method: &str,
    index: usize,
    param: &'static str,
    expected: &'static str,
) -> RpcError {
    RpcError::InvalidArgument {
        method: method.to_string(),
        index,
        param,
        expected,
    }
}

/// Reads an optional string field of an options object, with the same type check as arguments.
pub fn opt_field_str<'a>(
    obj: Option<&'a Map<String, Value>>,
    method: &str,
    index: usize,
    field: &'static str,
) -> RpcResult<Option<&'a str>> {
    match obj.and_then(|o| o.get(field)).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(method, index, field, "a string")),
    }
}

/// Reads an optional non-negative integer field of an options object (`10.0` is accepted, as
/// for arguments).
pub fn opt_field_count(
    obj: Option<&Map<String, Value>>,
    method: &str,
    index: usize,
    field: &'static str,
) -> RpcResult<Option<u64>> {
    match obj.and_then(|o| o.get(field)).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => as_count(v)
            .map(Some)
            .ok_or_else(|| invalid(method, index, field, "a non-negative integer")),
    }
}

/// Reads an optional integer field of an options object, which may be negative (`10.0` is
/// accepted, as for arguments).
pub fn opt_field_int(
    obj: Option<&Map<String, Value>>,
    method: &str,
    index: usize,
    field: &'static str,
) -> RpcResult<Option<i64>> {
    match obj.and_then(|o| o.get(field)).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(v) => as_int(v)
            .map(Some)
            .ok_or_else(|| invalid(method, index, field, "an integer")),
    }
}

/// Reads an optional boolean field of an options object.
pub fn opt_field_bool(
    obj: Option<&Map<String, Value>>,
    method: &str,
    index: usize,
    field: &'static str,
) -> RpcResult<Option<bool>> {
    match obj.and_then(|o| o.get(field)).filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(method, index, field, "a boolean")),
    }
}
