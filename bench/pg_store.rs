//! PostgreSQL store latency without embedding time: recall (nearest 30 + the access
//! update) and remember (duplicate check + insert) at several tenant sizes and widths.
//!
//!     scripts/with-postgres.sh cargo bench --features postgres --bench pg_store [-- SIZES DIMS]
//!
//! e.g. `-- 1000,10000,100000 384,1536`. Each size gets a fresh database filled in bulk with
//! random unit vectors, then 200 recalls and 200 remembers of new random vectors.
//! Prints one line per case and writes bench/results/pg_store.json.
//!
//!     scripts/with-postgres.sh cargo bench --features postgres --bench pg_store -- replicas [N]
//!
//! measures two replicas (two stores on one database) of one tenant of N memories (100k),
//! width 384: the first recall after another replica's one write, caught up from the change
//! log and, forced by emptying the log, rebuilt; then recalls while the two write to the
//! tenant in turn, against one replica alone. Writes bench/results/pg_replicas.json.

mod postgres;

use std::time::Instant;

use mcp_memory::config::Config;
use mcp_memory::memory::{Conversation, NewMemory, Scope, Tenant, Visibility, new_id, now_ms};
use mcp_memory::memory::{Memory, MemoryType};
use mcp_memory::search::Query;
use mcp_memory::store::{self, MemoryStore};
use sqlx::Connection;

const OPS: usize = 200;

/// A deterministic pseudo-random unit vector (xorshift), so runs are comparable.
fn vector(seed: u64, dim: usize) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2_000_001) as f32 / 1_000_000.0 - 1.0
        })
        .collect();
    let norm = v.iter().map(|c| c * c).sum::<f32>().sqrt();
    v.iter_mut().for_each(|c| *c /= norm);
    v
}

fn literal(v: &[f32]) -> String {
    format!(
        "[{}]",
        v.iter().map(f32::to_string).collect::<Vec<_>>().join(",")
    )
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Fills the tenant with `n` memories in bulk, straight into the table.
async fn fill(url: &str, n: usize, dim: usize) {
    let mut db = sqlx::postgres::PgConnection::connect(url).await.unwrap();
    let start = now_ms() - n as i64 * 1000;
    for chunk_start in (0..n).step_by(1000) {
        let ids: Vec<String> = (chunk_start..(chunk_start + 1000).min(n))
            .map(|i| new_id(start + i as i64 * 1000))
            .collect();
        let vectors: Vec<String> = (chunk_start..chunk_start + ids.len())
            .map(|i| literal(&vector(i as u64, dim)))
            .collect();
        sqlx::query(
            "INSERT INTO memories (tenant_id, id, content, memory_type, created_at, embedding) \
             SELECT 'bench', id, 'memory ' || id, 'project', now(), v::vector \
             FROM unnest($1::text[], $2::text[]) AS t(id, v)",
        )
        .bind(&ids)
        .bind(&vectors)
        .execute(&mut db)
        .await
        .unwrap();
    }
    sqlx::query("ANALYZE memories")
        .execute(&mut db)
        .await
        .unwrap();
}

async fn open(url: &str, dim: usize) -> std::sync::Arc<dyn MemoryStore> {
    let vars = [
        ("DATABASE_URL", url.to_owned()),
        ("EMBEDDING_PROVIDER", "openai".into()),
        ("EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1".into()),
        ("EMBEDDING_API_KEY", "unused".into()),
        ("EMBEDDING_DIM", dim.to_string()),
    ];
    let config =
        Config::from_vars(|k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())).unwrap();
    let model = mcp_memory::embed::build(&config.embedder).unwrap().model();
    store::open(&config.store, &model).await.unwrap()
}

fn tenant() -> Tenant {
    let mut h = axum::http::HeaderMap::new();
    h.insert("x-tenant-id", "bench".parse().unwrap());
    mcp_memory::context::resolve(&h, &mcp_memory::auth::Credential::anyone())
        .unwrap()
        .tenant
}

/// One recall as a tool makes it: the nearest 30, then the access update for the first 5.
/// Its time in ms.
async fn recall(store: &dyn MemoryStore, seed: u64, dim: usize) -> f64 {
    let (tenant, everyone) = (tenant(), Visibility::now(None::<Conversation>));
    let q = vector(seed, dim);
    let t = Instant::now();
    let by_meaning = Query {
        vector: &q,
        terms: &[],
        k: 30,
    };
    let hits = (store.search(&tenant, &everyone, &by_meaning).await)
        .unwrap()
        .nearest;
    let used: Vec<&Memory> = hits.iter().take(5).map(|h| &*h.memory).collect();
    (store.record_access(&tenant, &everyone, &used, now_ms()))
        .await
        .unwrap();
    t.elapsed().as_secs_f64() * 1e3
}

/// One remember of a new random vector; its time in ms.
async fn remember(store: &dyn MemoryStore, seed: u64, dim: usize) -> f64 {
    let (tenant, everyone) = (tenant(), Visibility::now(None::<Conversation>));
    let now = now_ms();
    let memory = NewMemory {
        id: new_id(now),
        content: format!("benchmark fact number {seed}"),
        memory_type: MemoryType::Project,
        category: None,
        tags: vec![],
        created_at: now,
        scope: Scope::Project,
        conversation: None,
        replaces: None,
        expires_at: None,
        author: None,
    };
    let v = vector(seed, dim);
    let t = Instant::now();
    store
        .remember(
            &tenant,
            &everyone,
            memory,
            &v,
            mcp_memory::dedup::Rule::SPECIFIED,
        )
        .await
        .unwrap();
    t.elapsed().as_secs_f64() * 1e3
}

fn summary(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    serde_json::json!({"p50": percentile(&ms, 0.5), "p99": percentile(&ms, 0.99), "n": ms.len()})
}

/// `-- replicas [N]`: see the file's head.
async fn replicas(server: &str, n: usize) {
    const DIM: usize = 384;
    let url = postgres::fresh_database(server).await;
    let (a, b) = (open(&url, DIM).await, open(&url, DIM).await);
    fill(&url, n, DIM).await;
    let build_ms = recall(&*a, 1, DIM).await;
    recall(&*b, 2, DIM).await;
    let mut db = sqlx::postgres::PgConnection::connect(&url).await.unwrap();
    let mut seed = 30_000_000;
    let mut next = || {
        seed += 1;
        seed
    };
    // The first recall on A after one write by B, caught up, and rebuilt (log emptied).
    let (mut caught_up, mut rebuilt) = (Vec::new(), Vec::new());
    for round in 0..40 {
        remember(&*b, next(), DIM).await;
        if round % 4 == 3 {
            sqlx::query("DELETE FROM memory_changes")
                .execute(&mut db)
                .await
                .unwrap();
            rebuilt.push(recall(&*a, next(), DIM).await);
        } else {
            caught_up.push(recall(&*a, next(), DIM).await);
        }
    }
    // 200 rounds of a remember then a recall: one replica alone, then the two in turn.
    let mut alone = Vec::new();
    for _ in 0..200 {
        remember(&*a, next(), DIM).await;
        alone.push(recall(&*a, next(), DIM).await);
    }
    let mut in_turn = Vec::new();
    for round in 0..200 {
        let store = if round % 2 == 0 { &a } else { &b };
        remember(&**store, next(), DIM).await;
        in_turn.push(recall(&**store, next(), DIM).await);
    }
    let result = serde_json::json!({
        "memories": n, "dimension": DIM, "first_build_ms": build_ms,
        "first_recall_after_a_foreign_write_ms": {
            "caught_up": summary(caught_up), "rebuilt": summary(rebuilt),
        },
        "recall_ms_with_a_write_before_each": {
            "one_replica": summary(alone), "two_replicas_in_turn": summary(in_turn),
        },
    });
    println!("{}", serde_json::to_string_pretty(&result).unwrap());
    a.flush().await.unwrap();
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/results");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("pg_replicas.json"),
        serde_json::to_string_pretty(&result).unwrap(),
    )
    .unwrap();
}

#[tokio::main]
async fn main() {
    let server = std::env::var("TEST_DATABASE_URL").expect("run under scripts/with-postgres.sh");
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if args.first().is_some_and(|a| a == "replicas") {
        let n = args.get(1).map_or(100_000, |n| n.parse().unwrap());
        return replicas(&server, n).await;
    }
    let parse = |i: usize, default: &str| -> Vec<usize> {
        args.get(i)
            .map(String::as_str)
            .unwrap_or(default)
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect()
    };
    let (sizes, dims) = (parse(0, "1000,10000,100000"), parse(1, "384,1536"));
    let mut results = Vec::new();
    for &dim in &dims {
        for &n in &sizes {
            let url = postgres::fresh_database(&server).await;
            let store = open(&url, dim).await;
            let t = Instant::now();
            fill(&url, n, dim).await;
            let fill_s = t.elapsed().as_secs_f64();

            let mut recall_ms = Vec::with_capacity(OPS);
            for i in 0..OPS {
                recall_ms.push(recall(&*store, 10_000_000 + i as u64, dim).await);
            }
            let mut remember_ms = Vec::with_capacity(OPS);
            for i in 0..OPS {
                remember_ms.push(remember(&*store, 20_000_000 + i as u64, dim).await);
            }
            recall_ms.sort_by(f64::total_cmp);
            remember_ms.sort_by(f64::total_cmp);
            let line = serde_json::json!({
                "memories": n, "dimension": dim, "fill_s": fill_s,
                "recall_ms": {"p50": percentile(&recall_ms, 0.5), "p99": percentile(&recall_ms, 0.99)},
                "remember_ms": {"p50": percentile(&remember_ms, 0.5), "p99": percentile(&remember_ms, 0.99)},
            });
            println!(
                "pg_store: {n} memories, {dim}d: recall p50 {:.1} ms p99 {:.1} ms, remember p50 {:.1} ms p99 {:.1} ms (fill {fill_s:.0} s)",
                percentile(&recall_ms, 0.5),
                percentile(&recall_ms, 0.99),
                percentile(&remember_ms, 0.5),
                percentile(&remember_ms, 0.99)
            );
            results.push(line);
            store.flush().await.unwrap();
        }
    }
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/results");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("pg_store.json"),
        serde_json::to_string_pretty(&results).unwrap(),
    )
    .unwrap();
}
