//! PostgreSQL store latency without embedding time: recall (nearest 30 + the access
//! update) and remember (duplicate check + insert) at several tenant sizes and widths.
//!
//!     scripts/with-postgres.sh cargo bench --features postgres --bench pg_store [-- SIZES DIMS]
//!
//! e.g. `-- 1000,10000,100000 384,1536`. Each size gets a fresh database filled in bulk with
//! random unit vectors, then 200 recalls and 200 remembers of new random vectors.
//! Prints one line per case and writes bench/results/pg_store.json.

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

#[tokio::main]
async fn main() {
    let server = std::env::var("TEST_DATABASE_URL").expect("run under scripts/with-postgres.sh");
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let parse = |i: usize, default: &str| -> Vec<usize> {
        args.get(i)
            .map(String::as_str)
            .unwrap_or(default)
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect()
    };
    let (sizes, dims) = (parse(0, "1000,10000,100000"), parse(1, "384,1536"));
    let tenant: Tenant = mcp_memory::context::resolve(&{
        let mut h = axum::http::HeaderMap::new();
        h.insert("x-tenant-id", "bench".parse().unwrap());
        h
    })
    .unwrap()
    .tenant;
    let everyone = Visibility::now(None::<Conversation>);
    let mut results = Vec::new();
    for &dim in &dims {
        for &n in &sizes {
            let url = postgres::fresh_database(&server).await;
            let store = open(&url, dim).await;
            let t = Instant::now();
            fill(&url, n, dim).await;
            let fill_s = t.elapsed().as_secs_f64();

            let mut recall = Vec::with_capacity(OPS);
            for i in 0..OPS {
                let q = vector(10_000_000 + i as u64, dim);
                let t = Instant::now();
                let by_meaning = Query {
                    vector: &q,
                    terms: &[],
                    k: 30,
                };
                let hits = store
                    .search(&tenant, &everyone, &by_meaning)
                    .await
                    .unwrap()
                    .nearest;
                let used: Vec<&Memory> = hits.iter().take(5).map(|h| &*h.memory).collect();
                store
                    .record_access(&tenant, &everyone, &used, now_ms())
                    .await
                    .unwrap();
                recall.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let mut remember = Vec::with_capacity(OPS);
            for i in 0..OPS {
                let now = now_ms();
                let memory = NewMemory {
                    id: new_id(now),
                    content: format!("benchmark fact number {i}"),
                    memory_type: MemoryType::Project,
                    category: None,
                    tags: vec![],
                    created_at: now,
                    scope: Scope::Project,
                    conversation: None,
                    replaces: None,
                    expires_at: None,
                };
                let v = vector(20_000_000 + i as u64, dim);
                let t = Instant::now();
                store
                    .remember(&tenant, &everyone, memory, &v)
                    .await
                    .unwrap();
                remember.push(t.elapsed().as_secs_f64() * 1e3);
            }
            recall.sort_by(f64::total_cmp);
            remember.sort_by(f64::total_cmp);
            let line = serde_json::json!({
                "memories": n, "dimension": dim, "fill_s": fill_s,
                "recall_ms": {"p50": percentile(&recall, 0.5), "p99": percentile(&recall, 0.99)},
                "remember_ms": {"p50": percentile(&remember, 0.5), "p99": percentile(&remember, 0.99)},
            });
            println!(
                "pg_store: {n} memories, {dim}d: recall p50 {:.1} ms p99 {:.1} ms, remember p50 {:.1} ms p99 {:.1} ms (fill {fill_s:.0} s)",
                percentile(&recall, 0.5),
                percentile(&recall, 0.99),
                percentile(&remember, 0.5),
                percentile(&remember, 0.99)
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
