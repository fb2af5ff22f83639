//! JSON-RPC 2.0 envelopes and the error codes this server uses.

use axum::http::StatusCode;
use serde_json::{Value, json};

pub mod code {
    pub const PARSE: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    /// The legacy era's "resource not found"; 2026-07-28 says -32602 instead.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// 2026-07-28 GA codes.
    pub const HEADER_MISMATCH: i64 = -32020;
    pub const UNSUPPORTED_VERSION: i64 = -32022;
}

/// What to send back: an HTTP status and, unless it is 202, one JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Option<Value>,
    /// For a 403: the call needed write access (true) or read access (false), which the
    /// HTTP edge names as a scope (RFC 6750 `insufficient_scope`).
    pub insufficient_scope: Option<bool>,
}

impl Reply {
    pub fn accepted() -> Self {
        Reply {
            status: StatusCode::ACCEPTED,
            body: None,
            insufficient_scope: None,
        }
    }

    pub fn result(id: Option<Value>, result: Value) -> Self {
        Reply {
            status: StatusCode::OK,
            body: Some(json!({"jsonrpc": "2.0", "id": id, "result": result})),
            insufficient_scope: None,
        }
    }

    /// An error; `id` is omitted when the request's id is unknown (never `null`).
    pub fn error(status: StatusCode, id: Option<Value>, code: i64, message: &str) -> Self {
        Self::envelope(status, id, json!({"code": code, "message": message}))
    }

    pub fn error_with_data(
        status: StatusCode,
        id: Option<Value>,
        code: i64,
        message: &str,
        data: Value,
    ) -> Self {
        Self::envelope(
            status,
            id,
            json!({"code": code, "message": message, "data": data}),
        )
    }

    fn envelope(status: StatusCode, id: Option<Value>, error: Value) -> Self {
        let mut body = json!({"jsonrpc": "2.0", "error": error});
        if let Some(id) = id {
            body["id"] = id;
        }
        Reply {
            status,
            body: Some(body),
            insufficient_scope: None,
        }
    }
}
