//! The binary against callers who are hostile, careless or broken: floods of tenants,
//! more memories than the budget, hostile text, slow and stalled clients, a kill in the
//! middle of writes. Each test checks what an operator would: the process stays up and
//! bounded, every other caller is served, and nothing acknowledged is lost.

mod support;

use std::collections::HashMap;

use serde_json::json;
use support::process::{Running, start};
use support::{EmbeddingStub, base_env, postgres_database};

/// A server on a fresh SQLite file, or on a fresh PostgreSQL database.
struct Served {
    server: Running,
    env: HashMap<String, String>,
    _dir: tempfile::TempDir,
    _stub: EmbeddingStub,
}

async fn serve(store: &str, extra: &[(&str, &str)]) -> Served {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = base_env(&stub, &dir.path().join("memory.db"));
    if store == "postgres" {
        env.insert("DATABASE_URL".into(), postgres_database().await);
    }
    for (k, v) in extra {
        env.insert((*k).into(), (*v).into());
    }
    let server = start(&mut env).await;
    Served {
        server,
        env,
        _dir: dir,
        _stub: stub,
    }
}

/// Rows the store holds, in every table the server writes.
async fn rows(served: &Served) -> i64 {
    let url = &served.env["DATABASE_URL"];
    if let Some(path) = url.strip_prefix("sqlite:") {
        let conn = rusqlite::Connection::open(path).unwrap();
        let count = |table: &str| -> i64 {
            conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .unwrap()
        };
        return count("memories") + count("memory_uses");
    }
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let mut total = 0;
    for table in ["memories", "memory_versions"] {
        let n: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&mut conn)
            .await
            .unwrap();
        total += n;
    }
    total
}

fn tenant(name: &str) -> [(&'static str, String); 1] {
    [("x-tenant-id", name.to_owned())]
}

async fn call(server: &Running, tenant_name: &str, tool: &str, args: serde_json::Value) -> String {
    let headers = tenant(tenant_name);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    server.call(&headers, tool, args).await
}

#[tokio::test]
async fn ever_new_tenant_names_leave_nothing_behind() {
    for store in ["sqlite", "postgres"] {
        let served = serve(store, &[]).await;
        let server = &served.server;
        for n in 0..150 {
            let name = format!("flood-{n}");
            call(server, &name, "recall", json!({"query": "anything at all"})).await;
            call(server, &name, "list_memories", json!({})).await;
            call(server, &name, "memory_stats", json!({})).await;
            let forgot = call(
                server,
                &name,
                "forget",
                json!({"id": "01JAAAAAAAAAAAAAAAAAAAAAAA"}),
            )
            .await;
            assert!(forgot.contains("No memory"), "{store}: {forgot}");
        }
        assert_eq!(
            server.metric("mcp_memory_index_tenants").await,
            0.0,
            "{store}"
        );
        assert_eq!(
            server.metric("mcp_memory_index_bytes").await,
            0.0,
            "{store}"
        );
        assert_eq!(
            rows(&served).await,
            0,
            "{store}: a tenant that never wrote left a row"
        );
        // A tenant that wrote, then forgot everything, is let go from memory too.
        let stored = call(
            server,
            "brief",
            "remember",
            json!({"content": "a short-lived note"}),
        )
        .await;
        let id = support::stored_id(&stored);
        call(
            server,
            "brief",
            "recall",
            json!({"query": "short-lived note"}),
        )
        .await;
        assert_eq!(
            server.metric("mcp_memory_index_tenants").await,
            1.0,
            "{store}"
        );
        call(server, "brief", "forget", json!({"id": id})).await;
        assert_eq!(
            server.metric("mcp_memory_index_tenants").await,
            0.0,
            "{store}"
        );
    }
}

/// About 3 KB of words no other memory has.
fn long_note(tenant: usize, note: usize) -> String {
    (0..300)
        .map(|w| format!("t{tenant}n{note}w{w}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn the_index_budget_holds_however_memories_arrive() {
    for store in ["sqlite", "postgres"] {
        let served = serve(store, &[("INDEX_BUDGET_MB", "1")]).await;
        let server = &served.server;
        let tenants = 24;
        // Round-robin, a recall after each write: every index is built small, then grows
        // by this process's own writes (what the budget once never saw).
        for note in 0..16 {
            for t in 0..tenants {
                let name = format!("tenant-{t}");
                let stored = call(
                    server,
                    &name,
                    "remember",
                    json!({"content": long_note(t, note)}),
                )
                .await;
                assert!(
                    stored.starts_with("[MEMORY] Stored as "),
                    "{store}: {stored}"
                );
                call(
                    server,
                    &name,
                    "recall",
                    json!({"query": format!("t{t}n{note}w1")}),
                )
                .await;
            }
        }
        let (bytes, budget) = (
            server.metric("mcp_memory_index_bytes").await,
            server.metric("mcp_memory_index_budget_bytes").await,
        );
        assert_eq!(budget, (1 << 20) as f64);
        assert!(
            bytes > 0.0 && bytes <= budget,
            "{store}: {bytes} held, budget {budget}"
        );
        let held = server.metric("mcp_memory_index_tenants").await;
        assert!(held < tenants as f64, "{store}: {held} tenants held");
        // The weight is true to what is held: at least the content of every held memory.
        assert!(
            bytes >= held * 16.0 * 3000.0,
            "{store}: {held} tenants in {bytes} bytes"
        );
        // Every tenant dropped from memory is rebuilt when asked, whole.
        for t in 0..tenants {
            let name = format!("tenant-{t}");
            let stats = call(server, &name, "memory_stats", json!({})).await;
            assert!(stats.contains("16 memories"), "{store}: {stats}");
            let found = call(
                server,
                &name,
                "recall",
                json!({"query": format!("t{t}n0w7 t{t}n0w8")}),
            )
            .await;
            assert!(found.contains(&format!("t{t}n0w7")), "{store}: {found}");
        }
        assert!(server.metric("mcp_memory_index_bytes").await <= budget);
    }
}
