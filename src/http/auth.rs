//! The credential at the HTTP edge (docs/protocol.md#authentication): what `auth::Gate`
//! decides, as the statuses and challenges of RFC 6750 and RFC 9728 that MCP clients read.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::{json_response, not_found, rpc_error};
use crate::app::App;
use crate::auth::{Credential, Refusal};

/// RFC 9728's well-known place, and under it the path of the resource (`/mcp`, or whatever
/// path a proxy serves it at).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
pub const METADATA_UNDER: &str = "/.well-known/oauth-protected-resource/{*path}";

/// The request's credential, or the response refusing it.
pub async fn admit(app: &App, headers: &HeaderMap) -> Result<Credential, Response> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    (app.gate.admit(authorization).await).map_err(|refusal| refused(app, refusal))
}

/// The answer to a request the gate did not admit.
pub fn refused(app: &App, refusal: Refusal) -> Response {
    match refusal {
        Refusal::Missing => challenge(app, "missing bearer token", None),
        Refusal::Invalid(why) => challenge(app, &why, Some("invalid_token")),
        Refusal::Unavailable(why) => {
            let mut response = rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                -32000,
                &format!("Service Unavailable: {why}"),
            );
            (response.headers_mut()).insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
            response
        }
    }
}

/// A 401 with the challenge that tells a client where to get a token: RFC 9728's
/// `resource_metadata` under OAuth, a realm otherwise.
fn challenge(app: &App, why: &str, error: Option<&str>) -> Response {
    let mut response = rpc_error(
        StatusCode::UNAUTHORIZED,
        -32001,
        &format!("Unauthorized: {why}"),
    );
    let mut value = match app.gate.resource_server() {
        Some(oauth) => format!(
            "Bearer resource_metadata=\"{}\", scope=\"{} {}\"",
            oauth.metadata_url(),
            oauth.scope(false),
            oauth.scope(true)
        ),
        None => "Bearer realm=\"mcp\"".to_owned(),
    };
    if let Some(error) = error {
        value.push_str(&format!(", error=\"{error}\""));
    }
    insert(&mut response, value);
    response
}

/// RFC 6750's 403: the token is good but lacks the scope the call needs.
pub fn insufficient_scope(app: &App, writes: bool, response: &mut Response) {
    let value = match app.gate.resource_server() {
        Some(oauth) => format!(
            "Bearer error=\"insufficient_scope\", scope=\"{}\", resource_metadata=\"{}\"",
            oauth.scope(writes),
            oauth.metadata_url()
        ),
        None => "Bearer realm=\"mcp\", error=\"insufficient_scope\"".to_owned(),
    };
    insert(response, value);
}

fn insert(response: &mut Response, value: String) {
    // Every part is an ASCII setting or a fixed word; a value that is not a header is left out.
    if let Ok(value) = HeaderValue::from_str(&value) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
}

/// RFC 9728's Protected Resource Metadata: public, as the specification requires, and only
/// when OAuth is configured.
pub async fn metadata(State(app): State<Arc<App>>) -> Response {
    match app.gate.metadata() {
        Some(metadata) => json_response(StatusCode::OK, &metadata),
        None => not_found().await,
    }
}
