//! The real binary: boot refusals, startup lines, what it logs (and never logs), and a
//! graceful exit on SIGTERM.

mod support;

use serde_json::{Value, json};
use support::process::{command, start, start_as_given};
use support::{EmbeddingStub, base_env};

#[tokio::test]
async fn logs_never_carry_content_queries_tags_or_conversations() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = base_env(&stub, &dir.path().join("memory.db"));
    env.insert("MCP_API_KEY".into(), "key-secret-1".into());
    let server = start(&mut env).await;
    let headers = [
        ("authorization", "Bearer key-secret-1"),
        ("x-tenant-id", "acme"),
        ("x-conversation-id", "chat:secret-conversation"),
    ];
    let stored = server
        .call(&headers, "remember", json!({"content": "the secret fact", "tags": ["secret-tag"], "category": "secret-category", "scope": "conversation"}))
        .await;
    assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    server
        .call(&headers, "recall", json!({"query": "the secret query"}))
        .await;
    // A schema violation (no log line) and a tool-layer refusal (ok:false, not on stderr).
    server
        .call(
            &headers,
            "remember",
            json!({"content": "secret", "tags": "secret-not-a-list"}),
        )
        .await;
    server
        .call(
            &headers,
            "remember",
            json!({"content": "secret", "category": "secret-".repeat(30)}),
        )
        .await;
    stub.fail_with(500);
    let failed = server
        .call(&headers, "recall", json!({"query": "the secret query"}))
        .await;
    assert!(
        failed.contains("could not complete this request"),
        "{failed}"
    );

    let exited = server.terminate().await;
    assert_eq!(exited.code, Some(0), "{}", exited.stderr);
    let all = format!("{}\n{}", exited.stdout.join("\n"), exited.stderr);
    assert!(
        !all.contains("secret"),
        "a log line leaks user data:\n{all}"
    );

    assert!(exited.stdout[0].starts_with(&format!(
        "mcp-memory v{} listening on 127.0.0.1:",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(exited.stdout[0].contains(" (POST /mcp)"));
    assert!(
        exited.stdout[1].starts_with("store: sqlite at ")
            && exited.stdout[1].ends_with("(openai:fake-64, 64d)"),
        "{}",
        exited.stdout[1]
    );
    assert!(
        exited
            .stdout
            .iter()
            .any(|l| l.contains("auth: MCP_API_KEY"))
    );
    let calls: Vec<Value> = exited
        .stdout
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "tool_call")
        .collect();
    assert_eq!(calls.len(), 4, "{all}");
    for call in &calls {
        let keys: Vec<&str> = call
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "event",
                "inConversation",
                "level",
                "ms",
                "ok",
                "tenant",
                "tool"
            ],
            "{call}"
        );
        assert_eq!(call["inConversation"], true);
    }
    let oks: Vec<bool> = calls.iter().map(|c| c["ok"].as_bool().unwrap()).collect();
    assert_eq!(oks, [true, true, false, false]);
    // Only the dependency failure reaches stderr; argument mistakes are the model's.
    let failures: Vec<&str> = exited
        .stderr
        .lines()
        .filter(|l| l.contains("tool_failed"))
        .collect();
    assert_eq!(failures.len(), 1, "{}", exited.stderr);
}

/// Prometheus' view after a few calls: counts by tool and outcome, latencies of tools,
/// embeddings and store calls, and nothing a caller said. With a key, the scrape needs it.
#[tokio::test]
async fn metrics_count_tool_calls_and_time_their_parts() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = base_env(&stub, &dir.path().join("memory.db"));
    env.insert("MCP_API_KEY".into(), "scrape-key".into());
    let server = start(&mut env).await;
    let client = reqwest::Client::new();
    let headers = [
        ("x-memory-tenant", "acme"),
        ("authorization", "Bearer scrape-key"),
    ];
    server
        .call(
            &headers,
            "remember",
            json!({"content": "the secret fact", "type": "project"}),
        )
        .await;
    server
        .call(&headers, "recall", json!({"query": "the secret query"}))
        .await;
    server
        .call(&headers, "recall", json!({"query": "the secret query"}))
        .await;
    let (_, refused) = server.call_tool(&headers, "forget", json!({})).await;
    assert!(refused);

    let scrape = |key: Option<&'static str>| {
        let mut request = client.get(format!("{}/metrics", server.url));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    assert_eq!(scrape(None).await.unwrap().status(), 401);
    assert_eq!(scrape(Some("wrong")).await.unwrap().status(), 401);
    let response = scrape(Some("scrape-key")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = response.text().await.unwrap();
    for line in [
        "mcp_memory_tool_calls_total{tool=\"remember\",outcome=\"ok\"} 1",
        "mcp_memory_tool_calls_total{tool=\"recall\",outcome=\"ok\"} 2",
        "mcp_memory_tool_calls_total{tool=\"forget\",outcome=\"invalid\"} 1",
        "mcp_memory_tool_duration_seconds_count{tool=\"recall\"} 2",
        "mcp_memory_embedding_duration_seconds_count 3",
        "mcp_memory_store_duration_seconds_count{operation=\"remember\"} 1",
        "mcp_memory_store_duration_seconds_count{operation=\"candidates\"} 2",
        "mcp_memory_requests_in_flight 0",
    ] {
        assert!(text.contains(line), "no `{line}` in:\n{text}");
    }
    assert!(text.contains(&format!(
        "mcp_memory_build_info{{version=\"{}\"",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(!text.contains("secret") && !text.contains("acme"), "{text}");
    server.terminate().await;
}

async fn run(
    env: &std::collections::HashMap<String, String>,
    flag: &str,
) -> std::io::Result<std::process::Output> {
    command(env).arg(flag).output().await
}

/// The operator's flags: each answers and exits without serving.
#[tokio::test]
async fn version_help_check_config_and_healthcheck_answer_and_exit() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = base_env(&stub, &dir.path().join("memory.db"));
    let version = run(&env, "--version").await.unwrap();
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("mcp-memory {}", env!("CARGO_PKG_VERSION"))
    );
    let help = String::from_utf8(run(&env, "--help").await.unwrap().stdout).unwrap();
    assert!(
        help.contains("RECALL_KEYWORD_WEIGHT") && help.contains("[default: 3000]"),
        "{help}"
    );
    assert_eq!(run(&env, "--serve").await.unwrap().status.code(), Some(2));

    let checked = run(&env, "--check-config").await.unwrap();
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success() && said.contains("configuration OK"),
        "{said}"
    );
    let mut unreachable = env.clone();
    unreachable.insert("EMBEDDING_BASE_URL".into(), "http://127.0.0.1:9/v1".into());
    let refused = run(&unreachable, "--check-config").await.unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("embedder"));

    let mut served = env.clone();
    let server = start(&mut served).await;
    assert!(
        run(&served, "--healthcheck")
            .await
            .unwrap()
            .status
            .success()
    );
    server.terminate().await;
    let down = run(&served, "--healthcheck").await.unwrap();
    assert_eq!(down.status.code(), Some(1));
}

#[tokio::test]
async fn without_a_key_the_server_warns_that_it_answers_anyone() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = base_env(&stub, &dir.path().join("memory.db"));
    let server = start(&mut env).await;
    let exited = server.terminate().await;
    assert_eq!(exited.code, Some(0));
    assert!(
        exited.stderr.contains("auth: none") && exited.stderr.contains("answers ANY caller"),
        "{}",
        exited.stderr
    );
}

/// With nothing set, the server listens on loopback only and says which variable opens it:
/// another address of this machine (127.0.0.2, which a server on every interface answers)
/// is refused; `HOST=0.0.0.0` answers there.
#[tokio::test]
async fn by_default_the_server_listens_on_loopback_only_and_says_how_to_open_it() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = base_env(&stub, &dir.path().join("memory.db"));
    env.remove("HOST");
    let reached = |url: &str| {
        let elsewhere = url.replace("127.0.0.1", "127.0.0.2");
        async move { reqwest::get(format!("{elsewhere}/health")).await.is_ok() }
    };
    let server = start_as_given(&mut env).await;
    assert!(!reached(&server.url).await, "answered on 127.0.0.2");
    let exited = server.terminate().await;
    let port = env["PORT"].clone();
    assert_eq!(
        exited.stdout[0],
        format!(
            "mcp-memory v{} listening on 127.0.0.1:{port} (POST /mcp); loopback only: \
             HOST=0.0.0.0 accepts other machines",
            env!("CARGO_PKG_VERSION")
        )
    );
    env.insert("HOST".into(), "0.0.0.0".into());
    let server = start_as_given(&mut env).await;
    assert!(
        reached(&server.url).await,
        "HOST=0.0.0.0 answers every address"
    );
    let exited = server.terminate().await;
    let port = env["PORT"].clone();
    assert_eq!(
        exited.stdout[0],
        format!(
            "mcp-memory v{} listening on 0.0.0.0:{port} (POST /mcp)",
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[tokio::test]
async fn configuration_refusals_exit_non_zero_with_one_line_naming_the_variable() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let base = base_env(&stub, &dir.path().join("memory.db"));
    let cases: &[(&str, Option<&str>, &str)] = &[
        (
            "RECALL_MIN_SIMILARITY",
            Some("0"),
            "configuration error: RECALL_MIN_SIMILARITY must be greater than 0 and at most 1, got \"0\"",
        ),
        (
            "PORT",
            Some("70000"),
            "configuration error: PORT must be an integer between 1 and 65535, got \"70000\"",
        ),
        (
            "EMBEDDING_API_KEY",
            None,
            "configuration error: EMBEDDING_API_KEY is required",
        ),
        (
            "EMBEDDING_PROVIDER",
            Some("cohere"),
            "configuration error: EMBEDDING_PROVIDER must be",
        ),
    ];
    // The default provider is refused only by builds without it (with it, the server would
    // start, on port 3000).
    let default_provider = (
        "EMBEDDING_PROVIDER",
        None,
        "configuration error: EMBEDDING_PROVIDER defaults to bedrock",
    );
    let cases = [
        cases,
        &[default_provider][..cfg!(not(feature = "bedrock")) as usize],
    ]
    .concat();
    for (name, value, expected) in &cases {
        let mut env = base.clone();
        match value {
            Some(v) => env.insert((*name).into(), (*v).into()),
            None => env.remove(*name),
        };
        let out = command(&env).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.starts_with(expected), "{name}: {stderr}");
        assert!(out.stdout.is_empty(), "nothing listens after a refusal");
    }
}

#[tokio::test]
async fn memories_survive_a_restart() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = base_env(&stub, &dir.path().join("data/memory.db"));
    let acme = [("x-tenant-id", "acme")];
    let server = start(&mut env).await;
    server
        .call(
            &acme,
            "remember",
            json!({"content": "builds use cargo nextest"}),
        )
        .await;
    assert_eq!(server.terminate().await.code, Some(0));
    let server = start(&mut env).await;
    let listed = server.call(&acme, "list_memories", json!({})).await;
    assert!(listed.contains("builds use cargo nextest"), "{listed}");
    server.terminate().await;
}
