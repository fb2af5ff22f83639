//! The memory browser over HTTP (docs/tools.md#the-memory-browser): the page at `/ui/`,
//! its script and style, what the caller may do (`/ui/access`), and `/ui/mcp`, where the
//! page calls the tools. Every path is behind the same credentials as `/mcp`; a browser is
//! asked for one with HTTP Basic (the password is the key or the access token), since a page
//! cannot set a bearer header on its own navigation. Without credentials configured, the
//! page is served only to a server that listens on loopback.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get};
use serde_json::json;

use super::{auth, json_response, mcp_request};
use crate::app::App;
use crate::auth::{Credential, basic_password};
use crate::ui;

/// Only the server's own files run and are fetched, and only the server is called: no
/// inline script or style, no other origin, no frame around the page.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(page))
        .route("/ui/browser.js", get(script))
        .route("/ui/browser.css", get(style))
        .route("/ui/access", get(access))
        .route("/ui/mcp", any(call))
}

async fn page(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    file(&app, &headers, "text/html; charset=utf-8", ui::PAGE).await
}

async fn script(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    file(&app, &headers, "text/javascript; charset=utf-8", ui::SCRIPT).await
}

async fn style(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    file(&app, &headers, "text/css; charset=utf-8", ui::STYLE).await
}

async fn file(
    app: &App,
    headers: &HeaderMap,
    media_type: &'static str,
    body: &'static str,
) -> Response {
    if let Err(refused) = admit(app, headers).await {
        return refused;
    }
    guarded(([(header::CONTENT_TYPE, media_type)], body).into_response())
}

/// What the page may offer: its actions only with write access.
async fn access(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    match admit(&app, &headers).await {
        Ok(credential) => guarded(json_response(
            StatusCode::OK,
            &json!({"read": credential.access.read, "write": credential.access.write}),
        )),
        Err(refused) => refused,
    }
}

/// The page's tool calls: `/mcp`'s handling, behind the page's credential and origin rules.
async fn call(
    State(app): State<Arc<App>>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if !same_origin(&app, &headers) {
        return guarded(super::rpc_error(
            StatusCode::FORBIDDEN,
            -32600,
            "Forbidden: this Origin is not the page's own (see MCP_ALLOWED_ORIGINS)",
        ));
    }
    match admit(&app, &headers).await {
        Ok(credential) => guarded(mcp_request(&app, method, &headers, body, credential).await),
        Err(refused) => refused,
    }
}

/// The credential of a page request: a Basic password or a bearer token, checked as `/mcp`
/// checks a bearer token; refused with the challenge a browser answers with its login
/// prompt, never with data.
async fn admit(app: &App, headers: &HeaderMap) -> Result<Credential, Response> {
    if app.gate.is_open() {
        return match app.loopback_only {
            true => Ok(Credential::anyone()),
            false => Err(guarded(super::rpc_error(
                StatusCode::FORBIDDEN,
                -32001,
                "Forbidden: the memory browser needs a credential when the server listens \
                 beyond loopback (set MCP_API_KEY, MCP_KEYS_FILE or OAUTH_ISSUER)",
            ))),
        };
    }
    let sent = headers
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    let admitted = match sent.and_then(basic_password) {
        Some(password) => app.gate.admit_token(Some(&password)).await,
        None => app.gate.admit(sent).await,
    };
    match admitted {
        Ok(credential) => Ok(credential),
        Err(refusal) => {
            let mut refused = guarded(auth::refused(app, refusal));
            if refused.status() == StatusCode::UNAUTHORIZED {
                refused.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"mcp-memory\", charset=\"UTF-8\""),
                );
            }
            Err(refused)
        }
    }
}

/// A call from the page carries its own origin: admitted when it is listed, or when it is
/// the origin of the `Host` the request was sent to and that host is this machine by name
/// (a page of another site rebinding its name to loopback sends its own name as `Host`).
fn same_origin(app: &App, headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else {
        return true;
    };
    if app.allowed_origins.iter().any(|o| o == origin) {
        return true;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let loopback = name == "localhost"
        || (name.trim_start_matches('[').trim_end_matches(']'))
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback && origin == format!("http://{host}")
}

/// The headers every answer under `/ui` carries.
fn guarded(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
