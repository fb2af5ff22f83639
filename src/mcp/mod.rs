//! MCP, both protocol eras, over Streamable HTTP (stateless, one endpoint) and over stdio
//! (docs/protocol.md#protocol).
//!
//! A request whose `params._meta` claims a protocol version is served under 2026-07-28
//! (over HTTP with its header checks); everything else is the legacy `initialize` era.
//! Every request is answered on its own: nothing is kept between requests, so any replica
//! answers any request. Tool failures are tool results; JSON-RPC errors are for protocol
//! failures only.

mod jsonrpc;

use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use serde_json::{Map, Value, json};

use crate::context::Identity;
use crate::log;
use crate::tools::{self, RequestError, ToolResult, ToolService, prompts, resources};
use crate::{SERVER_NAME, SERVER_VERSION};
use jsonrpc::{Reply, code};

const MODERN: &str = "2026-07-28";
const LEGACY: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
const LATEST_LEGACY: &str = "2025-11-25";
/// The versions with structured tool results (`outputSchema`, `structuredContent`).
const STRUCTURED: &[&str] = &["2025-11-25", "2025-06-18", MODERN];
const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";
/// MCP Apps (docs/tools.md#the-memory-browser).
const APPS_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// What `initialize` and `server/discover` tell a model: fixed text, nothing a tenant wrote.
const INSTRUCTIONS: &str = "Project memory that outlives a run. Call recall at the start of a \
    task and before asking the user to explain something again; call remember when you learn a \
    decision, a convention or a command that works. When a memory turns out wrong or outdated, \
    remember the correct fact with replaces set to the old memory's id; use forget only for \
    what should not be kept at all.";

/// A JSON-RPC error without an id: what a transport's edge answers for a message it refuses
/// before reading it as a request (too large, unauthorized, the wrong media type).
pub fn refusal(code: i64, message: &str) -> Value {
    Reply::error(StatusCode::OK, None, code, message)
        .body
        .unwrap_or_default()
}

fn server_info() -> Value {
    json!({"name": SERVER_NAME, "version": SERVER_VERSION})
}

/// How a message arrived: what its transport says besides the message itself.
#[derive(Clone, Copy)]
pub enum Arrival<'a> {
    /// A POST, with its headers: the protocol version and, under 2026-07-28, the method and
    /// the tool's name, each checked against the body.
    Http(&'a HeaderMap),
    /// A line of stdin: no headers. The legacy era's version is the one `initialize`
    /// agreed on this connection (`negotiated`), which the caller keeps.
    Stdio { negotiated: Option<&'a str> },
}

impl Arrival<'_> {
    fn header(&self, name: &str) -> Option<String> {
        match self {
            Arrival::Http(headers) => header(headers, name),
            Arrival::Stdio { .. } => None,
        }
    }
}

/// The version an answer to `initialize` agreed on, for a connection that keeps it (stdio).
pub fn negotiated(reply: &Reply) -> Option<&str> {
    reply.body.as_ref()?["result"]["protocolVersion"].as_str()
}

/// Answers one JSON-RPC message.
pub async fn handle(
    service: &ToolService,
    arrival: Arrival<'_>,
    identity: &Identity,
    body: &[u8],
) -> Reply {
    let message: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => return Reply::error(StatusCode::BAD_REQUEST, None, code::PARSE, "Parse error"),
    };
    let Value::Object(message) = message else {
        return Reply::error(
            StatusCode::BAD_REQUEST,
            None,
            code::INVALID_REQUEST,
            "Invalid Request: the body must be one JSON-RPC object (batches are not supported)",
        );
    };
    let Some(method) = message.get("method") else {
        // A client answering a server request: this server never sends any.
        return if message.contains_key("result") || message.contains_key("error") {
            Reply::accepted()
        } else {
            Reply::error(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                "Invalid Request: no method",
            )
        };
    };
    let id = match message.get("id") {
        None => None,
        Some(v) if v.is_string() || v.is_i64() || v.is_u64() => Some(v.clone()),
        Some(_) => {
            return Reply::error(
                StatusCode::BAD_REQUEST,
                None,
                code::INVALID_REQUEST,
                "Invalid Request: id must be a string or an integer",
            );
        }
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Reply::error(
            StatusCode::BAD_REQUEST,
            id,
            code::INVALID_REQUEST,
            "Invalid Request: jsonrpc must be \"2.0\"",
        );
    }
    let Some(method) = method.as_str() else {
        return Reply::error(
            StatusCode::BAD_REQUEST,
            id,
            code::INVALID_REQUEST,
            "Invalid Request: method must be a string",
        );
    };
    let empty = Map::new();
    let params = message
        .get("params")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let meta = params.get("_meta").and_then(Value::as_object);
    let claim = meta.and_then(|m| m.get(VERSION_KEY));
    let header_version = arrival.header("mcp-protocol-version");

    let request = Request {
        id,
        method,
        params,
        arrival,
    };
    let valid_modern_claim = claim.and_then(Value::as_str) == Some(MODERN)
        && meta.is_some_and(|m| m.get(CAPABILITIES_KEY).is_some_and(Value::is_object));
    if method == "initialize" && !valid_modern_claim {
        if header_version.as_deref() == Some(MODERN) {
            return request.error(StatusCode::BAD_REQUEST, code::HEADER_MISMATCH,
                "MCP-Protocol-Version 2026-07-28 has no initialize; send server/discover with _meta instead");
        }
        return legacy(service, identity, &request).await;
    }
    if claim.is_some() {
        return modern(
            service,
            identity,
            &request,
            meta.unwrap_or(&empty),
            header_version,
        )
        .await;
    }
    match header_version.as_deref() {
        Some(MODERN) => request.error(StatusCode::BAD_REQUEST, code::INVALID_PARAMS,
            "Invalid params: a 2026-07-28 request needs the _meta envelope with io.modelcontextprotocol/protocolVersion"),
        Some(v) if !LEGACY.contains(&v) => request.error(StatusCode::BAD_REQUEST, code::INVALID_REQUEST,
            &format!("Bad Request: unsupported MCP-Protocol-Version \"{v}\"")),
        _ => legacy(service, identity, &request).await,
    }
}

struct Request<'a> {
    id: Option<Value>,
    method: &'a str,
    params: &'a Map<String, Value>,
    arrival: Arrival<'a>,
}

impl Request<'_> {
    fn error(&self, status: StatusCode, code: i64, message: &str) -> Reply {
        Reply::error(status, self.id.clone(), code, message)
    }

    fn result(&self, result: Value) -> Reply {
        Reply::result(self.id.clone(), result)
    }
}

/// A header's value with surrounding spaces and tabs removed (header values compare
/// exactly otherwise).
fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name).map(|v| {
        String::from_utf8_lossy(v.as_bytes())
            .trim_matches([' ', '\t'])
            .to_owned()
    })
}

/// `Mcp-Name` as sent: plain, or `=?base64?…?=` for values that are not plain ASCII.
fn decode_name(raw: &str) -> Option<String> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(encoded) => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok()),
        None => Some(raw.to_owned()),
    }
}

async fn legacy(service: &ToolService, identity: &Identity, request: &Request<'_>) -> Reply {
    if request.id.is_none() {
        return Reply::accepted();
    }
    // Over HTTP a client names its version on every request after `initialize`; one that
    // does not is taken as 2025-03-26, which has no structured results. Over stdio the
    // connection remembers what `initialize` agreed.
    let version = match request.arrival {
        Arrival::Http(headers) => header(headers, "mcp-protocol-version"),
        Arrival::Stdio { negotiated } => negotiated.map(str::to_owned),
    };
    let structured = version.is_some_and(|v| STRUCTURED.contains(&v.as_str()));
    match request.method {
        "initialize" => {
            let asked = request
                .params
                .get("protocolVersion")
                .and_then(Value::as_str);
            let version = asked
                .filter(|v| LEGACY.contains(v))
                .unwrap_or(LATEST_LEGACY);
            request.result(json!({
                "protocolVersion": version,
                "capabilities": {
                    "tools": {"listChanged": false},
                    "resources": {"subscribe": false, "listChanged": false},
                    "prompts": {"listChanged": false},
                },
                "serverInfo": server_info(),
                "instructions": INSTRUCTIONS,
            }))
        }
        "ping" => request.result(json!({})),
        // A stateless server has forgotten `initialize` by now, so it cannot tell whether the
        // client shows MCP Apps: the app's resource is named for every client (a client
        // ignores the `_meta` it does not know, and the tool's answer is the same).
        "tools/list" => request.result(json!({"tools": service.tool_list(structured, true)})),
        "tools/call" => match call_tool(service, identity, request, false).await {
            Ok(Called::Done(result)) => request.result(tool_result(&result, structured, false)),
            Ok(Called::Ask(_)) => unreachable!("the legacy era is never asked"),
            Err(reply) => reply,
        },
        method if surface(method) => match serve_surface(service, identity, request, false).await {
            Ok(result) => request.result(result),
            Err(reply) => reply,
        },
        other => request.error(
            StatusCode::OK,
            code::METHOD_NOT_FOUND,
            &format!("Method not found: {other}"),
        ),
    }
}

/// The 2026-07-28 era, with the header checks over HTTP in the order the conformance suite
/// expects (docs/protocol.md#protocol); stdio has no headers to check.
async fn modern(
    service: &ToolService,
    identity: &Identity,
    request: &Request<'_>,
    meta: &Map<String, Value>,
    header_version: Option<String>,
) -> Reply {
    let bad_request = StatusCode::BAD_REQUEST;
    let Some(version) = meta.get(VERSION_KEY).and_then(Value::as_str) else {
        return request.error(
            bad_request,
            code::INVALID_PARAMS,
            "Invalid params: _meta io.modelcontextprotocol/protocolVersion must be a string",
        );
    };
    if !meta.get(CAPABILITIES_KEY).is_some_and(Value::is_object) {
        return request.error(
            bad_request,
            code::INVALID_PARAMS,
            "Invalid params: _meta io.modelcontextprotocol/clientCapabilities must be an object",
        );
    }
    let http = matches!(request.arrival, Arrival::Http(_));
    if header_version.as_deref().is_some_and(|h| h != version) {
        return request.error(
            bad_request,
            code::HEADER_MISMATCH,
            "MCP-Protocol-Version header does not match _meta protocolVersion",
        );
    }
    let method_header = request.arrival.header("mcp-method");
    if method_header
        .as_deref()
        .is_some_and(|m| m != request.method)
    {
        return request.error(
            bad_request,
            code::HEADER_MISMATCH,
            "Mcp-Method header does not match the request method",
        );
    }
    if version != MODERN {
        return Reply::error_with_data(
            bad_request,
            request.id.clone(),
            code::UNSUPPORTED_VERSION,
            &format!("Unsupported protocol version \"{version}\""),
            json!({"supported": [MODERN], "requested": version}),
        );
    }
    if http && header_version.is_none() {
        return request.error(
            bad_request,
            code::HEADER_MISMATCH,
            "MCP-Protocol-Version header is required",
        );
    }
    if http && method_header.is_none() {
        return request.error(
            bad_request,
            code::HEADER_MISMATCH,
            "Mcp-Method header is required",
        );
    }
    // The name a request acts on travels in `Mcp-Name` too (SEP-2243).
    let named = match request.method {
        "tools/call" | "prompts/get" => request.params.get("name"),
        "resources/read" => request.params.get("uri"),
        _ => None,
    };
    if http && let Some(name) = named.and_then(Value::as_str) {
        let sent = request
            .arrival
            .header("mcp-name")
            .and_then(|raw| decode_name(&raw));
        if sent.as_deref() != Some(name) {
            return request.error(
                bad_request,
                code::HEADER_MISMATCH,
                "Mcp-Name header is missing or does not match the request's name or uri",
            );
        }
    }
    if request.id.is_none() {
        return Reply::accepted();
    }
    let mut result = match request.method {
        "server/discover" => json!({
            "supportedVersions": [MODERN],
            "capabilities": {
                "tools": {"listChanged": false},
                "resources": {"listChanged": false},
                "prompts": {"listChanged": false},
            },
            "instructions": INSTRUCTIONS,
            "ttlMs": 0,
            "cacheScope": "public",
        }),
        // The catalogue is the same for every caller that declares the same capabilities,
        // so a shared cache may keep it.
        "tools/list" => {
            let apps = shows_apps(meta.get(CAPABILITIES_KEY));
            json!({"tools": service.tool_list(true, apps), "ttlMs": 0, "cacheScope": "public"})
        }
        "tools/call" => {
            let elicits = (meta.get(CAPABILITIES_KEY))
                .and_then(|c| c.get("elicitation"))
                .is_some_and(Value::is_object);
            match call_tool(service, identity, request, elicits).await {
                Ok(Called::Done(result)) => tool_result(&result, true, true),
                // The call is not complete until the user answers (docs/tools.md#asking-before-a-conflicting-memory-stays).
                Ok(Called::Ask(question)) => {
                    return request.result(json!({
                        "resultType": "input_required",
                        "inputRequests": question.input_requests,
                        "requestState": question.state,
                        "_meta": { SERVER_INFO_KEY: server_info() },
                    }));
                }
                Err(reply) => return reply,
            }
        }
        method if surface(method) => match serve_surface(service, identity, request, true).await {
            Ok(result) => result,
            Err(reply) => return reply,
        },
        other => {
            return request.error(
                StatusCode::NOT_FOUND,
                code::METHOD_NOT_FOUND,
                &format!("Method not found: {other}"),
            );
        }
    };
    result["resultType"] = json!("complete");
    result["_meta"] = json!({ SERVER_INFO_KEY: server_info() });
    request.result(result)
}

/// Whether the client declares the MCP Apps extension with the media type of our app.
fn shows_apps(capabilities: Option<&Value>) -> bool {
    let declared =
        capabilities.and_then(|c| c["extensions"][APPS_EXTENSION]["mimeTypes"].as_array());
    declared.is_some_and(|types| types.iter().any(|t| t == crate::ui::APP_MIME_TYPE))
}

/// What a tool call comes to: a result, or (2026-07-28 `remember`, a client that can be asked)
/// a question for the user first.
enum Called {
    Done(ToolResult),
    Ask(tools::conflict::Question),
}

async fn call_tool(
    service: &ToolService,
    identity: &Identity,
    request: &Request<'_>,
    elicits: bool,
) -> Result<Called, Reply> {
    let Some(name) = request.params.get("name").and_then(Value::as_str) else {
        return Err(request.error(
            StatusCode::OK,
            code::INVALID_PARAMS,
            "Invalid params: tools/call needs a tool name",
        ));
    };
    // A credential without the access the tool needs is refused before the tool runs
    // (docs/protocol.md#scopes); one without a usable tenant hears about that instead.
    if let (Ok(ctx), Some(writes)) = (identity, service.writes(name))
        && !ctx.access.allows(writes)
    {
        return Err(insufficient_scope(request, name, writes));
    }
    let params = request.params;
    // The second round of a question: the answer completes the call; nothing runs again.
    if name == "remember"
        && let Some(state) = params.get("requestState").and_then(Value::as_str)
    {
        let answer = service.conflict_answer(identity, state, params.get("inputResponses"));
        return Ok(Called::Done(answer.await));
    }
    // The client's trace, if it sends one (docs/operations.md#traces).
    let traceparent = (params.get("_meta"))
        .and_then(|meta| meta.get("traceparent"))
        .and_then(Value::as_str);
    let call = tools::call(service, name, params.get("arguments"), identity);
    let label = service.label(name);
    let result = crate::traces::tool_call(label, traceparent, call, |r| r.is_error).await;
    let question = match (name, identity) {
        ("remember", Ok(ctx)) if elicits => service.conflict_question(ctx, &result),
        _ => None,
    };
    Ok(question.map_or(Called::Done(result), Called::Ask))
}

/// RFC 6750's 403 for `what` (a tool, or a method), which needs write (or read) access the
/// credential does not grant; the HTTP edge adds the challenge naming the scope.
fn insufficient_scope(request: &Request<'_>, what: &str, writes: bool) -> Reply {
    let needs = if writes { "write" } else { "read" };
    let mut reply = request.error(
        StatusCode::FORBIDDEN,
        code::INVALID_REQUEST,
        &format!(
            "Forbidden: {what} needs {needs} access, which this credential does not grant \
             (insufficient_scope)"
        ),
    );
    reply.insufficient_scope = Some(writes);
    reply
}

/// The methods of resources and prompts (docs/tools.md#resources).
fn surface(method: &str) -> bool {
    matches!(
        method,
        "resources/list"
            | "resources/templates/list"
            | "resources/read"
            | "prompts/list"
            | "prompts/get"
    )
}

/// A resources or prompts request, answered for the caller within the call deadline:
/// memories are the tenant's, so under 2026-07-28 every resource result may be cached by that
/// caller alone (`private`); only the prompts' list is the same for everyone.
async fn serve_surface(
    service: &ToolService,
    identity: &Identity,
    request: &Request<'_>,
    modern: bool,
) -> Result<Value, Reply> {
    // What a tenant holds needs read access, as recall does.
    let reads_memories = !matches!(request.method, "prompts/list" | "resources/templates/list");
    if reads_memories
        && let Ok(ctx) = identity
        && !ctx.access.read
    {
        return Err(insufficient_scope(request, request.method, false));
    }
    let answered = tokio::time::timeout(
        service.deadline,
        surface_result(service, identity, request, modern),
    );
    let (mut result, scope) = answered.await.map_err(|_| {
        request.error(
            StatusCode::OK,
            code::INTERNAL,
            &format!(
                "{} did not finish within {} ms",
                request.method,
                service.deadline.as_millis()
            ),
        )
    })??;
    if modern && request.method != "prompts/get" {
        result["ttlMs"] = json!(0);
        result["cacheScope"] = json!(scope);
    }
    Ok(result)
}

/// At most this much of a caller's own text is echoed in an error.
const ECHOED: usize = 200;

/// `serve_surface`'s result and its cache scope, or the error reply.
async fn surface_result(
    service: &ToolService,
    identity: &Identity,
    request: &Request<'_>,
    modern: bool,
) -> Result<(Value, &'static str), Reply> {
    let params = request.params;
    let invalid = |message: &str| {
        request.error(
            StatusCode::OK,
            code::INVALID_PARAMS,
            &format!("Invalid params: {message}"),
        )
    };
    // A parameter of the wrong type is refused, never read as absent.
    let text = |name: &str| match params.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(invalid(&format!("{name} must be a string"))),
    };
    let failed = |shown: &str, logged: &str| {
        let fields = log::Fields {
            tenant: identity.as_ref().ok().map(|ctx| ctx.tenant.as_str()),
            tool: Some(request.method),
            ..Default::default()
        };
        log::error("resource_failed", logged, &fields);
        request.error(StatusCode::OK, code::INTERNAL, shown)
    };
    let request_failed = |e: RequestError| match e {
        RequestError::NotFound(uri) => {
            let shown = tools::quote(&uri, ECHOED);
            Reply::error_with_data(
                StatusCode::OK,
                request.id.clone(),
                if modern {
                    code::INVALID_PARAMS
                } else {
                    code::RESOURCE_NOT_FOUND
                },
                &format!("Resource not found: {shown}"),
                json!({"uri": shown}),
            )
        }
        // What is refused may echo the caller's input (an unknown prompt's name).
        RequestError::Invalid(message) => invalid(&tools::quote(&message, ECHOED)),
        RequestError::Unavailable { shown, logged } => failed(&shown, &logged),
    };
    Ok(match request.method {
        "resources/list" => {
            let (listed, next) =
                (service.resources(identity, text("cursor")?).await).map_err(request_failed)?;
            let mut result = json!({"resources": listed});
            if let Some(next) = next {
                result["nextCursor"] = json!(next);
            }
            (result, "private")
        }
        "resources/templates/list" => (
            json!({"resourceTemplates": resources::templates()}),
            "private",
        ),
        "resources/read" => {
            let uri = text("uri")?.ok_or_else(|| invalid("resources/read needs a uri"))?;
            let contents = (service.read_resource(identity, uri).await).map_err(request_failed)?;
            (json!({"contents": contents}), "private")
        }
        "prompts/list" => (json!({"prompts": prompts::list()}), "public"),
        _ => {
            let name = text("name")?.ok_or_else(|| invalid("prompts/get needs a name"))?;
            let arguments = match params.get("arguments") {
                None | Some(Value::Null) => None,
                Some(Value::Object(arguments)) => Some(arguments),
                Some(_) => return Err(invalid("arguments must be an object")),
            };
            let messages =
                (service.prompt(identity, name, arguments).await).map_err(request_failed)?;
            (json!({"messages": messages}), "private")
        }
    })
}

/// A tool's result; with `structured`, its data too (docs/protocol.md#structured-results);
/// with `links`, a `resource_link` after the text for each memory it names, which a client
/// may read with `resources/read` (2026-07-28 only: the legacy era's clients keep the one
/// text block they were built against).
fn tool_result(result: &ToolResult, structured: bool, links: bool) -> Value {
    let mut content = vec![json!({"type": "text", "text": result.text})];
    if links {
        content.extend(result.links.iter().map(|link| {
            let mut link = link.clone();
            link["type"] = json!("resource_link");
            link
        }));
    }
    let mut reply = json!({
        "content": content,
        "isError": result.is_error,
    });
    if let Some(data) = result.structured.as_ref().filter(|_| structured) {
        reply["structuredContent"] = data.clone();
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cargo.toml is the version's one source: the lock file must agree (a release bumps
    /// both), and no file that ships states another one.
    #[test]
    fn every_copy_of_the_version_is_the_manifest_s() {
        let root = env!("CARGO_MANIFEST_DIR");
        let lock = std::fs::read_to_string(format!("{root}/Cargo.lock")).unwrap();
        let entry = lock
            .split("[[package]]")
            .find(|p| p.contains(&format!("name = \"{SERVER_NAME}\"\n")))
            .expect("the crate is in Cargo.lock");
        assert!(
            entry.contains(&format!("version = \"{SERVER_VERSION}\"")),
            "Cargo.lock disagrees with Cargo.toml ({SERVER_VERSION}):{entry}"
        );
        let version = regex::Regex::new(r#"version[=:]\s*"?(\d+\.\d+\.\d+)"#).unwrap();
        for shipped in ["docker/Dockerfile", "compose.yaml"] {
            let text = std::fs::read_to_string(format!("{root}/{shipped}")).unwrap();
            for found in version.captures_iter(&text) {
                assert_eq!(
                    &found[1], SERVER_VERSION,
                    "{shipped} states another version"
                );
            }
        }
    }

    #[test]
    fn mcp_name_may_be_base64_encoded() {
        assert_eq!(decode_name("recall").as_deref(), Some("recall"));
        assert_eq!(
            decode_name("=?base64?ICBuYW1lICA=?=").as_deref(),
            Some("  name  ")
        );
        assert_eq!(decode_name("=?base64?!!?="), None);
    }
}
