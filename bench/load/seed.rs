//! Fills a store before a run. Seeding writes rows directly, in bulk: a hundred thousand
//! `remember` calls would each run dedup, and the seeding is not what is measured (the
//! remember-only runs measure writes through the server). The schema is the server's own:
//! the store is opened through the library first, which creates it, and SQLite's keyword
//! terms are made by the server's boot, as for a file from an older release.

use crate::corpus::{Corpus, Rng};
use crate::stub;

pub const DAY_MS: i64 = 86_400_000;

/// One memory as the store holds it.
pub struct Row {
    pub tenant: String,
    pub id: String,
    pub content: String,
    pub memory_type: &'static str,
    pub created_at: i64,
    pub access_count: i64,
    pub embedding: Vec<f32>,
}

/// `per_tenant` memories in each of `tenants`, created over the last 90 days.
pub fn rows(tenants: &[String], per_tenant: usize, width: usize) -> impl Iterator<Item = Row> {
    let corpus = Corpus::new();
    let now = mcp_memory::memory::now_ms();
    let mut rng = Rng::new(7);
    tenants
        .iter()
        .cloned()
        .enumerate()
        .flat_map(move |(t, tenant)| {
            (0..per_tenant)
                .map(|i| {
                    let content = corpus.memory(&mut rng, &format!("seed{t}x{i}"));
                    let created_at = now - (rng.unit() * 90.0 * DAY_MS as f64) as i64;
                    Row {
                        tenant: tenant.clone(),
                        id: mcp_memory::memory::new_id(created_at),
                        embedding: stub::vector_of(&content, width),
                        content,
                        memory_type: ["project", "pattern", "reference", "conversation"]
                            [rng.below(4)],
                        created_at,
                        access_count: rng.below(4) as i64,
                    }
                })
                .collect::<Vec<_>>()
        })
}

pub fn sqlite(path: &std::path::Path, rows: impl Iterator<Item = Row>, width: usize) {
    drop(
        mcp_memory::store::sqlite::SqliteStore::open(
            path,
            // Nothing is written through the store, so nothing of it is recorded: the server
            // records its own model at its first write.
            &mcp_memory::memory::Model {
                name: "bench:seed".into(),
                dimension: width,
            },
            &mcp_memory::search::cache::Indexing::IN_MEMORY,
        )
        .unwrap(),
    );
    let mut conn = rusqlite::Connection::open(path).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO memories (tenant_id, id, content, memory_type, created_at, \
                 embedding, access_count, last_accessed_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
                 CASE WHEN ?7 > 0 THEN ?5 + ?8 END)",
            )
            .unwrap();
        for row in rows {
            let blob: Vec<u8> = row.embedding.iter().flat_map(|x| x.to_le_bytes()).collect();
            insert
                .execute(rusqlite::params![
                    row.tenant,
                    row.id,
                    row.content,
                    row.memory_type,
                    row.created_at,
                    blob,
                    row.access_count,
                    DAY_MS,
                ])
                .unwrap();
        }
    }
    tx.commit().unwrap();
}

pub async fn postgres(url: &str, rows: impl Iterator<Item = Row>, width: usize) {
    use sqlx::Connection;
    let vars = [
        ("DATABASE_URL", url.to_owned()),
        ("EMBEDDING_PROVIDER", "openai".to_owned()),
        ("EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1".to_owned()),
        ("EMBEDDING_API_KEY", "unused".to_owned()),
    ];
    let config = mcp_memory::config::Config::from_vars(|k| {
        vars.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.clone())
    })
    .unwrap();
    // Nothing is written through the store, so nothing of it is recorded: the server
    // records its own model at its first write.
    let model = mcp_memory::memory::Model {
        name: "bench:seed".into(),
        dimension: width,
    };
    drop(
        mcp_memory::store::open(&config.store, &model)
            .await
            .unwrap(),
    );

    let mut conn = sqlx::postgres::PgConnection::connect(url).await.unwrap();
    let mut rows = rows.peekable();
    while rows.peek().is_some() {
        let batch: Vec<Row> = rows.by_ref().take(1000).collect();
        let column = |f: &dyn Fn(&Row) -> String| batch.iter().map(f).collect::<Vec<String>>();
        sqlx::query(
            "INSERT INTO memories (tenant_id, id, content, memory_type, created_at, embedding, \
             access_count, last_accessed_at, terms) \
             SELECT t, i, c, m, to_timestamp(at / 1000.0), e::vector, n, \
               CASE WHEN n > 0 THEN to_timestamp(at / 1000.0) + interval '1 day' END, \
               string_to_array(w, ' ') \
             FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], \
                         $6::text[], $7::bigint[], $8::text[]) AS r(t, i, c, m, at, e, n, w)",
        )
        .bind(column(&|r| r.tenant.clone()))
        .bind(column(&|r| r.id.clone()))
        .bind(column(&|r| r.content.clone()))
        .bind(column(&|r| r.memory_type.to_owned()))
        .bind(batch.iter().map(|r| r.created_at).collect::<Vec<i64>>())
        .bind(column(&|r| {
            let parts: Vec<String> = r.embedding.iter().map(f32::to_string).collect();
            format!("[{}]", parts.join(","))
        }))
        .bind(batch.iter().map(|r| r.access_count).collect::<Vec<i64>>())
        .bind(column(&|r| mcp_memory::search::terms(&r.content).join(" ")))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    sqlx::query("VACUUM ANALYZE memories")
        .execute(&mut conn)
        .await
        .unwrap();
}
