//! The memory browser's HTTP edge through the real router (docs/tools.md#the-memory-browser):
//! what a page request without a credential gets, the origin rule of the page's calls, and an
//! open server that listens beyond loopback. tests/browser/ drives the page itself in Chromium.

mod support;

use serde_json::{Value, json};
use support::TestServer;

async fn get(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.send().await.unwrap()
}

/// A tool call from the page to `/ui/mcp`, with the page's headers.
async fn page_call(
    server: &TestServer,
    headers: &[(&str, &str)],
    tool: &str,
    args: Value,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(format!("{}/ui/mcp", server.url))
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("x-memory-tenant", "browser")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}}));
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn without_a_credential_a_page_request_gets_the_login_challenge_and_no_data() {
    let server = TestServer::start_with(&[("MCP_API_KEY", "s3cret")]).await;
    let stored = server
        .call(
            &[
                ("authorization", "Bearer s3cret"),
                ("x-memory-tenant", "browser"),
            ],
            "remember",
            json!({"content": "the browser test's one memory"}),
        )
        .await;
    assert!(stored.0.starts_with("[MEMORY] Stored"), "{stored:?}");

    for path in ["/ui/", "/ui/browser.js", "/ui/access"] {
        let response = get(&format!("{}{path}", server.url), &[]).await;
        assert_eq!(response.status(), 401, "{path}");
        let challenge = response.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            challenge.starts_with("Basic realm=\"mcp-memory\""),
            "{challenge}"
        );
        assert!(!response.text().await.unwrap().contains("one memory"));
    }
    let (status, reply) = page_call(&server, &[], "list_memories", json!({})).await;
    assert_eq!(status, 401);
    assert!(!reply.to_string().contains("one memory"));

    // The key as a Basic password, any user name, is the credential.
    let basic = format!("Basic {}", base64_of("anyone:s3cret"));
    let page = get(&format!("{}/ui/", server.url), &[("authorization", &basic)]).await;
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("script-src 'self'")
    );
    let (status, reply) = page_call(
        &server,
        &[("authorization", &basic)],
        "list_memories",
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.to_string().contains("one memory"), "{reply}");
    // A wrong password is challenged again, as a missing one is.
    let wrong = format!("Basic {}", base64_of("anyone:guess"));
    assert_eq!(
        get(&format!("{}/ui/", server.url), &[("authorization", &wrong)])
            .await
            .status(),
        401
    );
}

#[tokio::test]
async fn the_page_s_calls_come_from_its_own_origin_on_loopback_or_a_listed_one() {
    let server =
        TestServer::start_with(&[("MCP_ALLOWED_ORIGINS", "https://memory.example.com")]).await;
    let host = server.url.trim_start_matches("http://").to_owned();
    let own = format!("http://{host}");
    let (status, reply) = page_call(&server, &[("origin", &own)], "list_memories", json!({})).await;
    assert_eq!(status, 200, "{reply}");
    let (status, _) = page_call(
        &server,
        &[("origin", "https://memory.example.com")],
        "list_memories",
        json!({}),
    )
    .await;
    assert_eq!(status, 200);
    // Another site's page whose name was rebound to this machine sends its own name as Host.
    let port = host.rsplit(':').next().unwrap();
    let rebound = format!("evil.example:{port}");
    let (status, reply) = page_call(
        &server,
        &[("origin", &format!("http://{rebound}")), ("host", &rebound)],
        "list_memories",
        json!({}),
    )
    .await;
    assert_eq!(status, 403, "{reply}");
    let (status, _) = page_call(
        &server,
        &[("origin", "http://127.0.0.1:1")],
        "list_memories",
        json!({}),
    )
    .await;
    assert_eq!(status, 403, "another loopback port is another origin");
}

#[tokio::test]
async fn an_open_server_beyond_loopback_never_serves_the_page() {
    let server = TestServer::start_with(&[("HOST", "0.0.0.0")]).await;
    for path in ["/ui/", "/ui/access"] {
        let response = get(&format!("{}{path}", server.url), &[]).await;
        assert_eq!(response.status(), 403, "{path}");
        assert!(
            response
                .text()
                .await
                .unwrap()
                .contains("needs a credential")
        );
    }
    let (status, _) = page_call(&server, &[], "list_memories", json!({})).await;
    assert_eq!(status, 403);
    // On loopback the same open server's page is served.
    let local = TestServer::start().await;
    assert_eq!(get(&format!("{}/ui/", local.url), &[]).await.status(), 200);
    let access: Value = get(&format!("{}/ui/access", local.url), &[])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(access, json!({"read": true, "write": true}));
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}
