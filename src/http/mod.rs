//! The HTTP edge: `POST /mcp`, `GET /health`, `GET /metrics`, RFC 9728's metadata, and the
//! checks that come before any MCP work — Origin, the credential, method, media types and
//! the body limit (docs/protocol.md#http-edge). The caller's identity is resolved here, once
//! per request.

mod auth;
mod deadline;
mod idle;
mod serve;
mod ui;

pub use serve::{Limits, serve};

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};

use crate::app::App;
use crate::{context, mcp};

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/health", any(health))
        .route("/metrics", any(metrics))
        .route("/mcp", any(serve_mcp))
        .route(auth::METADATA_PATH, any(auth::metadata))
        .route(auth::METADATA_UNDER, any(auth::metadata))
        .merge(ui::routes())
        .fallback(not_found)
        .with_state(app)
}

/// What a request past `MCP_MAX_CONNECTIONS` gets: probes and scrapes are answered as
/// usual, anything else 503 (and its connection is closed).
pub fn at_capacity(app: Arc<App>) -> Router {
    Router::new()
        .route("/health", any(health))
        .route("/metrics", any(metrics))
        .fallback(full)
        .with_state(app)
}

/// The answer past the cap.
pub(super) async fn full() -> Response {
    let mut response = rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        -32000,
        "Service Unavailable: the server is serving MCP_MAX_CONNECTIONS connections; try again",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Liveness: it calls no dependency, since restarting a pod cannot fix an outage of the
/// database or the embedding service; but an in-process model whose thread has stopped
/// only comes back with a restart, so that answers 503.
async fn health(State(app): State<Arc<App>>) -> Response {
    match app.tools.embedder.health() {
        Ok(()) => json_response(StatusCode::OK, &json!({"status": "ok"})),
        Err(reason) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({"status": "unavailable", "reason": reason}),
        ),
    }
}

/// Prometheus' scrape. It names no memory or query, but may name tenants
/// (METRICS_TENANT_LABEL), so with credentials configured it asks for one that may use any
/// tenant: configure the scrape job with `authorization: {credentials: <key>}`.
async fn metrics(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Some(refused) = foreign_origin(&app, &headers) {
        return refused;
    }
    match auth::admit(&app, &headers).await {
        Ok(credential) if credential.tenants == crate::auth::Tenants::Any => {}
        Ok(_) => {
            return rpc_error(
                StatusCode::FORBIDDEN,
                -32600,
                "Forbidden: /metrics needs a credential that may use any tenant",
            );
        }
        Err(refused) => return refused,
    }
    let mut response = (app.metrics)
        .render(app.tools.store.index_usage())
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

async fn not_found() -> Response {
    json_response(StatusCode::NOT_FOUND, &json!({"error": "not found"}))
}

async fn serve_mcp(
    State(app): State<Arc<App>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Some(refused) = foreign_origin(&app, &headers) {
        return refused;
    }
    match auth::admit(&app, &headers).await {
        Ok(credential) => mcp_request(&app, method, &headers, body, credential).await,
        Err(refused) => refused,
    }
}

/// An MCP request from an admitted caller, at `/mcp` or from the memory browser's page.
async fn mcp_request(
    app: &App,
    method: Method,
    headers: &HeaderMap,
    body: Body,
    credential: crate::auth::Credential,
) -> Response {
    let _in_flight = app.metrics.in_flight();
    if method != Method::POST {
        // Stateless: there is no session to open with GET or close with DELETE.
        let mut response = rpc_error(
            StatusCode::METHOD_NOT_ALLOWED,
            -32000,
            "Method not allowed.",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    if !media_type_is(headers.get(header::CONTENT_TYPE), "application/json") {
        return rpc_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            -32600,
            "Unsupported Media Type: send Content-Type: application/json",
        );
    }
    if !accepts_json(headers.get(header::ACCEPT)) {
        return rpc_error(
            StatusCode::NOT_ACCEPTABLE,
            -32600,
            "Not Acceptable: this server answers application/json",
        );
    }
    let read = tokio::time::timeout(
        app.timeouts.body,
        axum::body::to_bytes(body, app.body_limit),
    );
    let Ok(read) = read.await else {
        return rpc_error(
            StatusCode::REQUEST_TIMEOUT,
            -32600,
            &format!(
                "Request Timeout: the body did not arrive within {} ms",
                app.timeouts.body.as_millis()
            ),
        );
    };
    let Ok(body) = read else {
        return rpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            -32600,
            &format!(
                "Payload Too Large: the body limit is {} bytes",
                app.body_limit
            ),
        );
    };
    let identity = context::resolve(headers, &credential);
    let reply = mcp::handle(&app.tools, mcp::Arrival::Http(headers), &identity, &body).await;
    let mut response = match &reply.body {
        Some(body) => json_response(reply.status, body),
        None => reply.status.into_response(),
    };
    if let Some(writes) = reply.insufficient_scope {
        auth::insufficient_scope(app, writes, &mut response);
    }
    response
}

/// The DNS-rebinding boundary: a browser page may only reach us from a listed origin.
fn foreign_origin(app: &App, headers: &HeaderMap) -> Option<Response> {
    let origin = headers.get(header::ORIGIN)?;
    let listed = (app.allowed_origins.iter()).any(|o| o.as_bytes() == origin.as_bytes());
    (!listed).then(|| {
        rpc_error(
            StatusCode::FORBIDDEN,
            -32600,
            "Forbidden: this Origin is not allowed (see MCP_ALLOWED_ORIGINS)",
        )
    })
}

fn media_type_is(value: Option<&HeaderValue>, expected: &str) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case(expected))
}

/// An absent Accept accepts anything; a present one must admit JSON.
fn accepts_json(value: Option<&HeaderValue>) -> bool {
    let Some(value) = value.and_then(|v| v.to_str().ok()) else {
        return value.is_none();
    };
    value.split(',').any(|item| {
        let media = item.split(';').next().unwrap_or_default().trim();
        ["application/json", "application/*", "*/*"]
            .iter()
            .any(|ok| media.eq_ignore_ascii_case(ok))
    })
}

/// A JSON-RPC error with no id: these refusals happen before the request is read.
fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    json_response(status, &mcp::refusal(code, message))
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
