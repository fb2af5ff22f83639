//! The real binary: boot refusals, startup lines, what it logs (and never logs), and a
//! graceful exit on SIGTERM.

mod support;

use serde_json::{Value, json};
use support::process::{command, start};
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
        "mcp-memory v{} listening on :",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(exited.stdout[0].ends_with(" (POST /mcp)"));
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
            .any(|l| l.contains("MCP_API_KEY is set"))
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

#[tokio::test]
async fn without_a_key_the_server_warns_that_it_answers_anyone() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = base_env(&stub, &dir.path().join("memory.db"));
    let server = start(&mut env).await;
    let exited = server.terminate().await;
    assert_eq!(exited.code, Some(0));
    assert!(
        exited.stderr.contains("MCP_API_KEY is NOT set")
            && exited.stderr.contains("answers ANY caller"),
        "{}",
        exited.stderr
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
            "DATABASE_URL",
            None,
            "configuration error: no storage is configured",
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
