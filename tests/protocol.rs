//! The HTTP edge and both MCP eras, through the real router (docs/protocol.md#protocol).

mod support;

use serde_json::{Value, json};
use support::TestServer;

const MODERN: &str = "2026-07-28";

fn meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": MODERN,
           "io.modelcontextprotocol/clientCapabilities": {}})
}

fn modern(id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = meta();
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

async fn raw(
    s: &TestServer,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", s.url))
        .body(body.to_owned());
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.unwrap())
}

const JSON: (&str, &str) = ("content-type", "application/json");

#[tokio::test]
async fn health_answers_any_method_and_query_without_auth() {
    let s = TestServer::start_with(&[("MCP_API_KEY", "s3cret")]).await;
    for method in [
        reqwest::Method::GET,
        reqwest::Method::POST,
        reqwest::Method::HEAD,
    ] {
        let (status, headers, body) = raw(
            &s,
            method.clone(),
            "/health?probe=1",
            &[("origin", "http://evil.example")],
            "",
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "application/json");
        if method != reqwest::Method::HEAD {
            assert_eq!(
                serde_json::from_str::<Value>(&body).unwrap(),
                json!({"status": "ok"})
            );
        }
    }
}

#[tokio::test]
async fn other_paths_are_404() {
    let s = TestServer::start().await;
    for path in ["/", "/mcp/", "/mcp-extra", "/metrics/x"] {
        let (status, _, body) = raw(&s, reqwest::Method::POST, path, &[JSON], "{}").await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"error": "not found"})
        );
    }
}

#[tokio::test]
async fn origins_are_refused_unless_listed() {
    let s = TestServer::start_with(&[(
        "MCP_ALLOWED_ORIGINS",
        "http://127.0.0.1:9, http://localhost:9",
    )])
    .await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    for origin in ["http://evil.example", "null", "http://127.0.0.1:10"] {
        let (status, _, body) = raw(
            &s,
            reqwest::Method::POST,
            "/mcp",
            &[JSON, ("origin", origin)],
            &ping,
        )
        .await;
        assert_eq!(status, 403, "{origin}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert!(
            body.get("id").is_none() && body["error"]["code"] != json!(-32002),
            "{body}"
        );
    }
    let (status, _, _) = raw(
        &s,
        reqwest::Method::POST,
        "/mcp",
        &[JSON, ("origin", "http://localhost:9")],
        &ping,
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn bearer_auth_comes_before_any_mcp_work() {
    let s = TestServer::start_with(&[("MCP_API_KEY", "s3cret")]).await;
    let discover = modern(1, "server/discover", json!({})).to_string();
    let headers = [
        JSON,
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "server/discover"),
    ];
    // (A trailing space never reaches the server: HTTP strips it from header values. The
    // unit tests of the check cover it.)
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer  s3cretx"),
        Some("Basic s3cret"),
    ] {
        let mut h = headers.to_vec();
        if let Some(a) = auth {
            h.push(("authorization", a));
        }
        let (status, resp_headers, body) =
            raw(&s, reqwest::Method::POST, "/mcp", &h, &discover).await;
        assert_eq!(status, 401, "{auth:?}");
        // No token (or another scheme): no error code (RFC 6750, section 3.1).
        let missing = matches!(auth, None | Some("Basic s3cret"));
        let challenge = match missing {
            true => "Bearer realm=\"mcp\"",
            false => "Bearer realm=\"mcp\", error=\"invalid_token\"",
        };
        assert_eq!(resp_headers["www-authenticate"], challenge, "{auth:?}");
        let body: Value = serde_json::from_str(&body).unwrap();
        let message = match missing {
            true => "Unauthorized: missing bearer token",
            false => "Unauthorized: the bearer token is not a key this server knows",
        };
        assert_eq!(body["error"]["message"], message);
        assert!(body.get("id").is_none());
    }
    let mut h = headers.to_vec();
    h.push(("authorization", "bearer s3cret"));
    let (status, _, _) = raw(&s, reqwest::Method::POST, "/mcp", &h, &discover).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn transport_refusals() {
    let s = TestServer::start().await;
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, headers, _) =
            raw(&s, method, "/mcp", &[("accept", "text/event-stream")], "").await;
        assert_eq!(status, 405);
        assert_eq!(headers["allow"], "POST");
    }
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let (status, _, _) = raw(
        &s,
        reqwest::Method::POST,
        "/mcp",
        &[("content-type", "text/plain")],
        &ping,
    )
    .await;
    assert_eq!(status, 415);
    let (status, _, _) = raw(
        &s,
        reqwest::Method::POST,
        "/mcp",
        &[JSON, ("accept", "text/html")],
        &ping,
    )
    .await;
    assert_eq!(status, 406);
    let (status, _, _) = raw(
        &s,
        reqwest::Method::POST,
        "/mcp",
        &[
            ("content-type", "application/json; charset=utf-8"),
            ("accept", "application/json, text/event-stream"),
        ],
        &ping,
    )
    .await;
    assert_eq!(status, 200);

    let (status, _, body) = raw(&s, reqwest::Method::POST, "/mcp", &[JSON], "{not json").await;
    assert_eq!(status, 400);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["code"], -32700);
    assert!(body.get("id").is_none());
    let (status, _, body) = raw(
        &s,
        reqwest::Method::POST,
        "/mcp",
        &[JSON],
        &format!("[{ping}]"),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["error"]["code"],
        -32600
    );
}

#[tokio::test]
async fn the_body_limit_is_413() {
    let s = TestServer::start_with(&[("MCP_BODY_LIMIT_BYTES", "2048")]).await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "remember", "arguments": {"content": "x".repeat(4096)}}});
    let (status, _) = s.post(&big, &[("x-tenant-id", "acme")]).await;
    assert_eq!(status, 413);
    assert_eq!(
        s.ok(&[("x-tenant-id", "acme")], "memory_stats", json!({}))
            .await
            .lines()
            .next()
            .unwrap(),
        "[MEMORY] This project has no memories yet."
    );
}

#[tokio::test]
async fn legacy_era_handshake_and_methods_need_no_tenant() {
    let s = TestServer::start().await;
    let (status, reply) = s.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}), &[]).await;
    assert_eq!(status, 200);
    let result = &reply["result"];
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert_eq!(
        result["serverInfo"],
        json!({"name": "mcp-memory", "version": env!("CARGO_PKG_VERSION")})
    );
    assert_eq!(result["capabilities"]["tools"]["listChanged"], false);
    let (_, reply) = s
        .post(
            &json!({"jsonrpc": "2.0", "id": "a", "method": "initialize",
        "params": {"protocolVersion": "1999-01-01", "capabilities": {}}}),
            &[],
        )
        .await;
    assert_eq!(reply["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(reply["id"], "a");

    let (status, _) = s
        .post(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &[],
        )
        .await;
    assert_eq!(status, 202);
    let v = [("mcp-protocol-version", "2025-11-25")];
    let (_, reply) = s
        .post(&json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}), &v)
        .await;
    assert_eq!(reply["result"], json!({}));
    let (_, reply) = s
        .post(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
            &v,
        )
        .await;
    let names: Vec<&str> = reply["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "recall",
            "remember",
            "list_memories",
            "forget",
            "memory_stats"
        ]
    );
    let (status, reply) = s
        .post(
            &json!({"jsonrpc": "2.0", "id": 4, "method": "completion/complete"}),
            &v,
        )
        .await;
    assert_eq!(
        (status, reply["error"]["code"].clone(), reply["id"].clone()),
        (200, json!(-32601), json!(4))
    );
    let (status, _) = s
        .post(
            &json!({"jsonrpc": "2.0", "id": 5, "method": "ping"}),
            &[("mcp-protocol-version", "banana")],
        )
        .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn modern_era_discover_list_and_call() {
    let s = TestServer::start().await;
    let headers =
        |method: &'static str| vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
    let (status, reply) = s
        .post(
            &modern(1, "server/discover", json!({})),
            &headers("server/discover"),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let r = &reply["result"];
    assert_eq!(r["resultType"], "complete");
    assert_eq!(r["supportedVersions"], json!([MODERN]));
    assert_eq!(r["cacheScope"], "public");
    assert!(r["ttlMs"].is_u64());
    assert_eq!(
        r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcp-memory"
    );

    let (_, reply) = s
        .post(&modern(2, "tools/list", json!({})), &headers("tools/list"))
        .await;
    assert_eq!(reply["result"]["tools"].as_array().unwrap().len(), 5);
    assert_eq!(reply["result"]["resultType"], "complete");

    let mut h = headers("tools/call");
    h.push(("mcp-name", "memory_stats"));
    h.push(("x-tenant-id", "acme"));
    let (_, reply) = s
        .post(
            &modern(
                3,
                "tools/call",
                json!({"name": "memory_stats", "arguments": {}}),
            ),
            &h,
        )
        .await;
    assert_eq!(
        (reply["result"]["content"][0]["text"].as_str()).and_then(|text| text.lines().next()),
        Some("[MEMORY] This project has no memories yet.")
    );
    assert_eq!(reply["result"]["isError"], false);
    assert_eq!(reply["result"]["resultType"], "complete");
    // A missing argument is a tool error, not a JSON-RPC error.
    let mut h = headers("tools/call");
    h.push(("mcp-name", "  recall  "));
    let (_, reply) = s
        .post(
            &modern(4, "tools/call", json!({"name": "recall", "arguments": {}})),
            &h,
        )
        .await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
}

#[tokio::test]
async fn modern_era_header_rules_in_order() {
    let s = TestServer::start().await;
    let code = |reply: &Value| reply["error"]["code"].as_i64().unwrap();
    let discover = modern(1, "server/discover", json!({}));

    // Body version unsupported, header matching the supported one: mismatch comes first.
    let mut v999 = discover.clone();
    v999["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let (status, reply) = s
        .post(
            &v999,
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "server/discover"),
            ],
        )
        .await;
    assert_eq!((status, code(&reply)), (400, -32020));
    let (status, reply) = s
        .post(
            &v999,
            &[
                ("mcp-protocol-version", "v999.0.0"),
                ("mcp-method", "server/discover"),
            ],
        )
        .await;
    assert_eq!((status, code(&reply)), (400, -32022));
    assert_eq!(
        reply["error"]["data"],
        json!({"supported": [MODERN], "requested": "v999.0.0"})
    );

    let (status, reply) = s
        .post(&discover, &[("mcp-method", "server/discover")])
        .await;
    assert_eq!((status, code(&reply)), (400, -32020));
    let (status, reply) = s.post(&discover, &[("mcp-protocol-version", MODERN)]).await;
    assert_eq!((status, code(&reply)), (400, -32020));
    let (status, reply) = s
        .post(
            &discover,
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/list"),
            ],
        )
        .await;
    assert_eq!((status, code(&reply)), (400, -32020));

    let call = modern(
        2,
        "tools/call",
        json!({"name": "recall", "arguments": {"query": "q"}}),
    );
    let (status, reply) = s
        .post(
            &call,
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "tools/call"),
                ("mcp-name", "remember"),
            ],
        )
        .await;
    assert_eq!((status, code(&reply)), (400, -32020));

    let mut no_caps = discover.clone();
    no_caps["params"]["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": MODERN});
    let (status, reply) = s
        .post(
            &no_caps,
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "server/discover"),
            ],
        )
        .await;
    assert_eq!((status, code(&reply)), (400, -32602));

    let (status, reply) = s
        .post(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
            &[("mcp-protocol-version", MODERN)],
        )
        .await;
    assert_eq!((status, code(&reply)), (400, -32602));

    let init = json!({"jsonrpc": "2.0", "id": 4, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
    let (status, reply) = s.post(&init, &[("mcp-protocol-version", MODERN)]).await;
    assert_eq!((status, code(&reply)), (400, -32020));

    for method in ["ping", "initialize", "completion/complete"] {
        let (status, reply) = s
            .post(
                &modern(5, method, json!({})),
                &[("mcp-protocol-version", MODERN), ("mcp-method", method)],
            )
            .await;
        assert_eq!(
            (status, code(&reply), reply["id"].clone()),
            (404, -32601, json!(5)),
            "{method}"
        );
    }
}

/// Checks `value` against the parts of JSON Schema the output schemas use: type (one or a
/// list), required, properties, items, enum, additionalProperties.
fn conforms(value: &Value, schema: &Value, at: &str) -> Result<(), String> {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let allowed: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![kind],
    };
    let fits = allowed.contains(&kind) || (kind == "integer" && allowed.contains(&"number"));
    if !fits {
        return Err(format!("{at}: {kind} where the schema allows {allowed:?}"));
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(value)
    {
        return Err(format!("{at}: {value} is not one of {values:?}"));
    }
    if let Value::Object(map) = value {
        for key in schema["required"].as_array().into_iter().flatten() {
            let key = key.as_str().unwrap();
            if !map.contains_key(key) {
                return Err(format!("{at}: `{key}` is required"));
            }
        }
        for (key, item) in map {
            let property = schema["properties"]
                .get(key)
                .or(schema.get("additionalProperties"));
            if let Some(property) = property.filter(|p| p.is_object()) {
                conforms(item, property, &format!("{at}.{key}"))?;
            }
        }
    }
    if let (Value::Array(items), Some(schema)) = (value, schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            conforms(item, schema, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

#[tokio::test]
async fn structured_results_match_their_schemas_and_only_for_versions_that_have_them() {
    let s = TestServer::start().await;
    let list = |version: Option<&'static str>| {
        let s = &s;
        async move {
            let headers: Vec<(&str, &str)> = version
                .map(|v| ("mcp-protocol-version", v))
                .into_iter()
                .collect();
            let (_, reply) = s
                .post(
                    &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
                    &headers,
                )
                .await;
            reply["result"]["tools"].as_array().unwrap().clone()
        }
    };
    for old in [None, Some("2025-03-26")] {
        assert!(
            list(old)
                .await
                .iter()
                .all(|t| t.get("outputSchema").is_none()),
            "{old:?}"
        );
    }
    let tools = list(Some("2025-06-18")).await;
    let schemas: std::collections::HashMap<String, Value> = tools
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["outputSchema"].clone(),
            )
        })
        .collect();
    assert!(
        schemas.values().all(|s| s["type"] == "object"),
        "{schemas:?}"
    );

    let call = |version: Option<&'static str>, tool: &'static str, args: Value| {
        let s = &s;
        async move {
            let mut headers = vec![("x-tenant-id", "acme")];
            headers.extend(version.map(|v| ("mcp-protocol-version", v)));
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}});
            s.post(&body, &headers).await.1["result"].clone()
        }
    };
    let v = Some("2025-11-25");
    let stored = call(
        v,
        "remember",
        json!({"content": "deploys go out blue green on fridays", "tags": ["ops"]}),
    )
    .await;
    let id = stored["structuredContent"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let corrected = call(
        v,
        "remember",
        json!({"content": "deploys go out blue green on mondays", "replaces": id}),
    )
    .await;
    assert_eq!(corrected["structuredContent"]["outcome"], "replaced");
    assert_eq!(
        corrected["structuredContent"]["memory"]["expires"],
        Value::Null
    );
    // An expiry given in any offset comes back as the instant, in UTC.
    let instant = chrono::Utc::now() + chrono::Duration::days(400);
    let seoul = chrono::FixedOffset::east_opt(9 * 3600).unwrap();
    let expiring = call(
        v,
        "remember",
        json!({"content": "the staging cluster is down for maintenance",
               "expires_at": instant.with_timezone(&seoul).to_rfc3339()}),
    )
    .await;
    assert_eq!(
        expiring["structuredContent"]["memory"]["expires"],
        instant.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    assert_eq!(
        corrected["structuredContent"]["memory"]["replaces"],
        json!(id)
    );
    for (tool, args) in [
        ("recall", json!({"query": "when do deploys go out"})),
        ("recall", json!({"query": "zebras in antarctica"})),
        (
            "remember",
            json!({"content": "deploys go out blue green on mondays"}),
        ),
        ("list_memories", json!({"limit": 1})),
        ("memory_stats", json!({})),
        ("forget", json!({"id": "01JZZZZZZZZZZZZZZZZZZZZZZZ"})),
    ] {
        let result = call(v, tool, args.clone()).await;
        let data = &result["structuredContent"];
        conforms(data, &schemas[tool], tool).unwrap_or_else(|e| panic!("{args}: {e}\n{data}"));
        // The text stays the model's reading.
        assert!(
            result["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("[MEMORY]")
        );
        // An older client gets the same text alone.
        let old = call(None, tool, args).await;
        assert!(old.get("structuredContent").is_none(), "{old}");
        assert_eq!(old["content"], result["content"]);
    }
    let recalled = call(v, "recall", json!({"query": "when do deploys go out"})).await;
    assert_eq!(
        recalled["structuredContent"]["results"][0]["content"],
        "deploys go out blue green on mondays"
    );
    // A refusal carries no data.
    let refused = call(v, "recall", json!({})).await;
    assert_eq!(refused["isError"], true);
    assert!(refused.get("structuredContent").is_none());
}

/// A 2026-07-28 `remember` of `content`, from a client whose capabilities are `capabilities`,
/// with `more` params (the second round's answer and state).
fn remember_modern(content: &str, capabilities: Value, more: Value) -> Value {
    let mut params = json!({"name": "remember", "arguments": {"content": content},
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientCapabilities": capabilities}});
    for (k, v) in more.as_object().unwrap() {
        params[k] = v.clone();
    }
    json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params})
}

#[tokio::test]
async fn a_conflicting_memory_is_put_to_the_user_and_the_answer_completes_the_call() {
    let s = TestServer::start().await;
    let acme = [("x-memory-tenant", "acme")];
    let headers = |tenant: &'static str| {
        [
            ("mcp-protocol-version", MODERN),
            ("mcp-method", "tools/call"),
            ("mcp-name", "remember"),
            ("x-memory-tenant", tenant),
        ]
    };
    let old_text = "the admin api listens on port 8080 behind the internal load balancer";
    let old = support::stored_id(&s.ok(&acme, "remember", json!({"content": old_text})).await);
    let changed = "the admin api listens on port 8443 behind the internal load balancer";
    let asks = json!({"elicitation": {}});

    // A client that cannot be asked gets the plain answer: stored beside, with the hint.
    s.ok(
        &[("x-memory-tenant", "plain")],
        "remember",
        json!({"content": old_text}),
    )
    .await;
    let (_, plain) = s
        .post(
            &remember_modern(changed, json!({}), json!({})),
            &headers("plain"),
        )
        .await;
    assert_eq!(plain["result"]["resultType"], "complete", "{plain}");
    let text = plain["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("SIMILAR: 1 stored memory"), "{text}");

    // One that can: the question, with the state to send back; the new memory is already kept.
    let (status, asked) = s
        .post(
            &remember_modern(changed, asks.clone(), json!({})),
            &headers("acme"),
        )
        .await;
    assert_eq!(status, 200, "{asked}");
    let result = &asked["result"];
    assert_eq!(result["resultType"], "input_required", "{asked}");
    let question = &result["inputRequests"]["conflict"];
    assert_eq!(question["method"], "elicitation/create");
    let message = question["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("8080") && message.contains("8443"),
        "{message}"
    );
    let state = result["requestState"].as_str().unwrap().to_owned();
    let listed = s.ok(&acme, "list_memories", json!({})).await;
    assert!(
        listed.contains("2 memories"),
        "stored before asking: {listed}"
    );

    let answer = |choice: &str, state: &str| {
        json!({"inputResponses": {"conflict": {"action": "accept", "content": {"choice": choice}}},
               "requestState": state})
    };
    // Forged, or replayed by another tenant: refused, and nothing changes.
    let mut forged = state.clone();
    forged.replace_range(2..3, if &state[2..3] == "A" { "B" } else { "A" });
    for (state, tenant) in [(forged.as_str(), "acme"), (state.as_str(), "other")] {
        let (_, refused) = s
            .post(
                &remember_modern(changed, asks.clone(), answer("replace", state)),
                &headers(tenant),
            )
            .await;
        assert_eq!(refused["result"]["isError"], true, "{refused}");
        let text = refused["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("requestState is not one this server gave"),
            "{text}"
        );
    }
    let listed = s.ok(&acme, "list_memories", json!({})).await;
    assert!(
        listed.contains("2 memories") && listed.contains(&old),
        "{listed}"
    );

    // The user chose the new one: the old is gone, in the second round, and the call completes.
    let (_, done) = s
        .post(
            &remember_modern(changed, asks.clone(), answer("replace", &state)),
            &headers("acme"),
        )
        .await;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["outcome"], "replaced",
        "{done}"
    );
    assert_eq!(done["result"]["structuredContent"]["removed"], old.as_str());
    let listed = s.ok(&acme, "list_memories", json!({})).await;
    assert!(
        listed.contains("1 memory") && listed.contains("8443") && !listed.contains(&old),
        "{listed}"
    );

    // Asked again with another value, the user keeps the old one: the new is discarded.
    let third = "the admin api listens on port 9443 behind the internal load balancer";
    let (_, asked) = s
        .post(
            &remember_modern(third, asks.clone(), json!({})),
            &headers("acme"),
        )
        .await;
    let state = asked["result"]["requestState"].as_str().unwrap().to_owned();
    let (_, done) = s
        .post(
            &remember_modern(third, asks.clone(), answer("discard_new", &state)),
            &headers("acme"),
        )
        .await;
    assert_eq!(
        done["result"]["structuredContent"]["outcome"], "discarded",
        "{done}"
    );
    let listed = s.ok(&acme, "list_memories", json!({})).await;
    assert!(
        listed.contains("1 memory") && listed.contains("8443") && !listed.contains("9443"),
        "{listed}"
    );
}
