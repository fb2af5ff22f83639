//! The binary on PostgreSQL as operators run it: replicas booting together on an empty
//! database, and the database restarting under a stream of requests.

mod support;

use std::path::Path;

use serde_json::json;
use support::process::start;
use support::{EmbeddingStub, base_env, postgres_database};

const ACME: &[(&str, &str)] = &[("x-tenant-id", "acme")];

#[tokio::test]
async fn two_servers_booting_together_share_one_schema() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut a = base_env(&stub, &dir.path().join("unused.db"));
    a.insert("DATABASE_URL".into(), postgres_database().await);
    let mut b = a.clone();
    let (first, second) = tokio::join!(start(&mut a), start(&mut b));
    let stored = first
        .call(
            ACME,
            "remember",
            json!({"content": "replica one wrote this"}),
        )
        .await;
    assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    second
        .call(
            ACME,
            "remember",
            json!({"content": "replica two wrote that"}),
        )
        .await;
    for server in [&first, &second] {
        let stats = server.call(ACME, "memory_stats", json!({})).await;
        assert_eq!(
            stats.lines().next().unwrap(),
            "[MEMORY] 2 memories for this project (project: 2)."
        );
    }
    assert_eq!(first.terminate().await.code, Some(0));
    assert_eq!(second.terminate().await.code, Some(0));
}

fn pg(command: &str, state: &Path) -> String {
    let out = std::process::Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/pg.sh"))
        .arg(command)
        .env("PG_STATE", state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg.sh {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_database_restart_is_a_tool_error_and_service_resumes() {
    // A server of its own: restarting the shared one would disturb the other tests.
    let state = tempfile::tempdir().unwrap();
    let state_link = state.path().join("pg");
    let url = pg("start", &state_link);
    let stub = EmbeddingStub::start().await;
    let mut env = base_env(&stub, &state.path().join("unused.db"));
    env.insert("DATABASE_URL".into(), url);
    let server = start(&mut env).await;
    for fact in [
        "alpha release checklist",
        "beta rollout owner",
        "gamma incident runbook",
    ] {
        server
            .call(ACME, "remember", json!({"content": fact}))
            .await;
    }

    let restart = {
        let link = state_link.clone();
        tokio::task::spawn_blocking(move || pg("restart", &link))
    };
    let mut failures = Vec::new();
    // Calls all through the restart, however long it takes (bounded: five minutes).
    for i in 0..6_000 {
        if restart.is_finished() {
            break;
        }
        let (text, is_error) = server.call_tool(ACME, "list_memories", json!({})).await;
        if is_error {
            failures.push(text);
        }
        if i % 10 == 0 {
            server
                .call_tool(
                    ACME,
                    "remember",
                    json!({"content": format!("written during the restart, try {i}")}),
                )
                .await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    restart.await.unwrap();
    for text in &failures {
        assert!(
            text.starts_with("Error: the memory store could not complete this request — "),
            "{text}"
        );
    }

    // Once the database is back, everything written before is there and writes work.
    let mut listed = String::new();
    for _ in 0..100 {
        let (text, is_error) = server
            .call_tool(ACME, "list_memories", json!({"limit": 50}))
            .await;
        if !is_error {
            listed = text;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for fact in [
        "alpha release checklist",
        "beta rollout owner",
        "gamma incident runbook",
    ] {
        assert!(
            listed.contains(fact),
            "{fact} is missing after the restart:\n{listed}"
        );
    }
    let after = server
        .call(
            ACME,
            "remember",
            json!({"content": "written after the restart"}),
        )
        .await;
    assert!(after.starts_with("[MEMORY] Stored as "), "{after}");
    assert_eq!(server.terminate().await.code, Some(0));
    pg("stop", &state_link);
}

/// PostgreSQL crashes under four writers (docs/operations.md#timeouts): calls during the
/// outage are tool errors that come within seconds, not after a long wait for a
/// connection; calls succeed again by themselves once it is back; and every write it
/// acknowledged is there after its recovery.
#[tokio::test]
async fn a_database_crash_mid_load_fails_fast_and_loses_no_acknowledged_write() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    let state = tempfile::tempdir().unwrap();
    let link = state.path().join("pg");
    let url = pg("start", &link);
    let stub = EmbeddingStub::start().await;
    let mut env = base_env(&stub, &state.path().join("unused.db"));
    env.insert("DATABASE_URL".into(), url);
    let server = Arc::new(start(&mut env).await);
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (server, acknowledged, stop) = (
                Arc::clone(&server),
                Arc::clone(&acknowledged),
                Arc::clone(&stop),
            );
            tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    // Words of two characters or more: the stub embedder reads no others.
                    let fact = format!("writer w{w} wrote fact number {i:04}");
                    let (text, is_error) = server
                        .call_tool(ACME, "remember", json!({"content": fact}))
                        .await;
                    if !is_error && text.starts_with("[MEMORY] Stored as ") {
                        acknowledged.lock().unwrap().push(fact);
                    }
                    i += 1;
                }
            })
        })
        .collect();
    let written = || acknowledged.lock().unwrap().len();
    // Until 40 writes are acknowledged (bounded: a minute).
    for _ in 0..6_000 {
        if written() >= 40 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(written() >= 40, "the writers never got going");
    pg("crash", &link);
    for _ in 0..3 {
        let asked = Instant::now();
        let (text, is_error) = server
            .call_tool(ACME, "recall", json!({"query": "what did writer w1 write"}))
            .await;
        let took = asked.elapsed();
        assert!(is_error, "{text}");
        assert!(
            text.starts_with("Error: the memory store could not complete this request — "),
            "{text}"
        );
        // The pool waits 2 s for a connection; 10 s before this test was written.
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
    }
    pg("resume", &link);
    let mut back = false;
    // The first call to succeed once the database is up, with no restart of the server
    // (bounded: a minute).
    for _ in 0..600 {
        let (_, is_error) = server.call_tool(ACME, "memory_stats", json!({})).await;
        if !is_error {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "calls never succeeded again");
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let facts = acknowledged.lock().unwrap().clone();
    for fact in &facts {
        let again = server
            .call(ACME, "remember", json!({"content": fact}))
            .await;
        assert!(
            again.starts_with("[MEMORY] Already known"),
            "an acknowledged write was lost: {fact}: {again}"
        );
    }
    let server = Arc::try_unwrap(server).ok().unwrap();
    assert_eq!(server.terminate().await.code, Some(0));
    pg("stop", &link);
}

/// A recall that found its answer gives it even when counting the use fails: the failure is
/// logged and counted in `/metrics`, and nothing else changes.
#[tokio::test]
async fn a_recall_answers_even_when_its_use_cannot_be_counted() {
    use sqlx::Connection;
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let url = postgres_database().await;
    let mut env = base_env(&stub, &dir.path().join("unused.db"));
    env.insert("DATABASE_URL".into(), url.clone());
    let server = start(&mut env).await;
    let fact = "the deploy runbook lives in docs/deploy.md";
    server
        .call(ACME, "remember", json!({"content": fact}))
        .await;
    // From now on every count of a use is refused by the database.
    let mut db = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("ALTER TABLE memories ADD CONSTRAINT no_uses CHECK (access_count = 0) NOT VALID")
        .execute(&mut db)
        .await
        .unwrap();
    let (text, is_error) = server
        .call_tool(ACME, "recall", json!({"query": fact}))
        .await;
    assert!(!is_error && text.contains(fact), "{text}");
    let metrics = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("mcp_memory_access_record_failures_total 1"),
        "{metrics}"
    );
    let exited = server.terminate().await;
    let failed: Vec<&str> = (exited.stderr.lines())
        .filter(|l| l.contains("\"access_record_failed\""))
        .collect();
    assert_eq!(failed.len(), 1, "{}", exited.stderr);
    assert!(failed[0].contains("\"tenant\":\"acme\"") && !failed[0].contains("deploy"));
}
