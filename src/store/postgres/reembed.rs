//! `mcp-memory reembed` on PostgreSQL (`store/reembed.rs`): new vectors wait in
//! `memories_reembedded` until one transaction puts them in place and records the model.
//! The switch locks `store_meta` against every write of a vector (`check_model` holds the
//! record shared until its write commits), so it waits for the writes under way and no
//! replica's write of an old vector lands after it; it moves every tenant's version, so each
//! replica drops its indexes and checks the model before it builds one (`versions.rs`).

use async_trait::async_trait;
use sqlx::PgPool;

use super::PoolSettings;
use super::schema::{self, connect, recorded_model};
use crate::memory::Model;
use crate::store::reembed::{Pending, Plan, Reembedding, Switched, Unembedded, staged_for};
use crate::store::{Exported, StoreError, split_tenant_and_id, tenant_and_id};

const STAGING: &str = "CREATE TABLE IF NOT EXISTS memories_reembedded (
       tenant_id text NOT NULL,
       id        text COLLATE \"C\" NOT NULL,
       embedding vector NOT NULL,
       PRIMARY KEY (tenant_id, id)
     )";

/// Memories without a staged vector.
const UNSTAGED: &str = "FROM memories m WHERE NOT EXISTS (SELECT 1 FROM memories_reembedded r \
     WHERE r.tenant_id = m.tenant_id AND r.id = m.id)";

/// Vectors written per statement (a row is three values).
const STAGE_ROWS: usize = 500;

pub struct Reembedder {
    pool: PgPool,
    location: String,
}

/// The model the vectors staged so far are of (`store_meta`'s `reembedding`), read with
/// `locking` (a row-locking clause, or nothing).
async fn staging(
    conn: &mut sqlx::PgConnection,
    locking: &str,
) -> Result<Option<String>, StoreError> {
    sqlx::query_scalar(&format!(
        "SELECT value FROM store_meta WHERE key = 'reembedding' {locking}"
    ))
    .fetch_optional(conn)
    .await
    .map_err(StoreError::from)
}

/// How many memories have no staged vector.
async fn unstaged(conn: &mut sqlx::PgConnection) -> Result<i64, StoreError> {
    sqlx::query_scalar(&format!("SELECT count(*) {UNSTAGED}"))
        .fetch_one(conn)
        .await
        .map_err(StoreError::from)
}

impl Reembedder {
    pub async fn open(url: &str, settings: &PoolSettings) -> Result<Reembedder, StoreError> {
        let (pool, location) = connect(url, settings).await?;
        let mut tx = pool.begin().await?;
        schema::create_or_migrate(&mut tx, &location).await?;
        sqlx::query(STAGING).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(Reembedder { pool, location })
    }
}

#[async_trait]
impl Reembedding for Reembedder {
    async fn begin(&self, to: &Model) -> Result<Plan, StoreError> {
        let target = staged_for(to);
        let mut tx = self.pool.begin().await?;
        let earlier = staging(&mut tx, "FOR UPDATE").await?;
        if earlier.as_deref() != Some(target.as_str()) {
            sqlx::query("TRUNCATE memories_reembedded")
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO store_meta VALUES ('reembedding', $1) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            )
            .bind(&target)
            .execute(&mut *tx)
            .await?;
        }
        let total: i64 = sqlx::query_scalar("SELECT count(*) FROM memories")
            .fetch_one(&mut *tx)
            .await?;
        let pending = unstaged(&mut tx).await?;
        let recorded = recorded_model(&mut tx, "").await?;
        tx.commit().await?;
        Ok(Plan {
            recorded,
            total: Some(total as u64),
            staged: (total - pending).max(0) as u64,
        })
    }

    async fn pending(&self, from: Option<&str>, limit: usize) -> Result<Pending, StoreError> {
        let (tenant, id) = Exported::after_tenant_and_id(from);
        let rows: Vec<(String, String, String)> = sqlx::query_as(&format!(
            "SELECT m.tenant_id, m.id, m.content {UNSTAGED} AND (m.tenant_id, m.id) > ($1, $2) \
             ORDER BY m.tenant_id, m.id LIMIT $3"
        ))
        .bind(tenant)
        .bind(id)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        let memories: Vec<Unembedded> = (rows.into_iter())
            .map(|(tenant, id, content)| Unembedded {
                key: tenant_and_id(&tenant, &id),
                content,
            })
            .collect();
        Ok(Pending::by_tenant_and_id(memories, limit))
    }

    async fn stage(&self, vectors: &[(String, Vec<f32>)]) -> Result<(), StoreError> {
        for rows in vectors.chunks(STAGE_ROWS) {
            let rows = rows.iter().filter_map(|(key, v)| {
                let (tenant, id) = split_tenant_and_id(key)?;
                Some((tenant, id, pgvector::Vector::from(v.clone())))
            });
            let mut insert = sqlx::QueryBuilder::new(
                "INSERT INTO memories_reembedded (tenant_id, id, embedding) ",
            );
            insert.push_values(rows, |mut row, (tenant, id, vector)| {
                row.push_bind(tenant).push_bind(id).push_bind(vector);
            });
            insert
                .push(" ON CONFLICT (tenant_id, id) DO UPDATE SET embedding = EXCLUDED.embedding");
            (insert.build().execute(&self.pool)).await?;
        }
        Ok(())
    }

    async fn switch(&self, to: &Model) -> Result<Switched, StoreError> {
        let mut tx = self.pool.begin().await?;
        // Waits for every write of a vector under way, and holds off new ones until this
        // commits; reads of the record go on. Rewriting every vector may outlast the pool's
        // statement timeout, which is sized for a request: the switch has its own.
        for statement in [
            "SET LOCAL statement_timeout = '15min'",
            "LOCK TABLE store_meta IN EXCLUSIVE MODE",
        ] {
            sqlx::query(statement).execute(&mut *tx).await?;
        }
        if staging(&mut tx, "").await?.as_deref() != Some(staged_for(to).as_str()) {
            return Err(StoreError::unavailable(
                format!("the database {}", self.location),
                "another re-embedding started since this one: run it again",
            ));
        }
        let behind = unstaged(&mut tx).await?;
        if behind > 0 {
            return Ok(Switched::Behind(behind as u64));
        }
        // Every tenant's version row next, in the order a write takes its locks (the
        // record, then the version, then the rows), so no write holding one waits for this
        // switch while it waits for that write. With them held, the rows are rewritten
        // without the per-row trigger, and each tenant moves one version.
        for statement in [
            "INSERT INTO memory_versions SELECT tenant, nextval('memory_version_epochs') << 32 \
             FROM (SELECT DISTINCT tenant_id AS tenant FROM memories) tenants \
             ON CONFLICT (tenant_id) DO NOTHING",
            "SELECT 1 FROM memory_versions FOR UPDATE",
            "ALTER TABLE memories DISABLE TRIGGER memories_versioned",
            "UPDATE memories m SET embedding = r.embedding FROM memories_reembedded r \
             WHERE r.tenant_id = m.tenant_id AND r.id = m.id",
            "ALTER TABLE memories ENABLE TRIGGER memories_versioned",
            "UPDATE memory_versions SET version = version + 1",
            "TRUNCATE memories_reembedded",
            "DELETE FROM store_meta WHERE key = 'reembedding'",
        ] {
            sqlx::query(statement).execute(&mut *tx).await?;
        }
        sqlx::query(
            "INSERT INTO store_meta VALUES ('model', $1), ('dimension', $2) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        )
        .bind(&to.name)
        .bind(to.dimension.to_string())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Switched::Done)
    }

    fn describe(&self) -> String {
        format!("postgres at {}", self.location)
    }
}
