//! How this process knows its tenant indexes (`search::cache`) still show the database:
//! a per-tenant version. Rows themselves are read by id for the few memories a search
//! returns, so counters and content are always the database's.
//!
//! A trigger bumps `memory_versions.version` for the tenant in the same transaction as any
//! insert, delete or change of what the index holds, whoever makes it (another replica, an
//! older release, an operator's `DELETE` or `TRUNCATE`). A search first reads the version;
//! an index labelled otherwise is rebuilt. This process's own writes update its index in
//! place: they go one at a time per tenant (the slot's `writes`), each holding the version
//! row's lock from before its check to its commit, so each knows the version it moved the
//! tenant from and to.

use async_trait::async_trait;
use futures_util::TryStreamExt;
use pgvector::Vector;
use sqlx::postgres::{PgPool, PgRow};
use sqlx::{PgExecutor, Row};

use super::failed;
use crate::memory::{Model, Scope};
use crate::search::cache::{Coherence, Version};
use crate::search::{self, Entry, SearchIndex};
use crate::store::StoreError;

/// The version table and the triggers that keep it. Versions only grow.
pub(super) const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS memory_versions (
       tenant_id text PRIMARY KEY,
       version   bigint NOT NULL
     )",
    "CREATE OR REPLACE FUNCTION memory_versions_bump() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF TG_OP <> 'INSERT' THEN
         INSERT INTO memory_versions VALUES (OLD.tenant_id, 1)
           ON CONFLICT (tenant_id) DO UPDATE SET version = memory_versions.version + 1;
       END IF;
       IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.tenant_id IS DISTINCT FROM OLD.tenant_id) THEN
         INSERT INTO memory_versions VALUES (NEW.tenant_id, 1)
           ON CONFLICT (tenant_id) DO UPDATE SET version = memory_versions.version + 1;
       END IF;
       RETURN NULL;
     END $$",
    "CREATE OR REPLACE TRIGGER memories_versioned
       AFTER INSERT OR DELETE OR UPDATE OF tenant_id, id, scope, conversation, embedding, terms, expires_at
       ON memories FOR EACH ROW EXECUTE FUNCTION memory_versions_bump()",
    // Before, while the rows still say which tenants they belong to: a tenant written only
    // by an older release has no version row yet, and must be bumped all the same.
    "CREATE OR REPLACE FUNCTION memory_versions_bump_all() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       INSERT INTO memory_versions SELECT DISTINCT tenant_id, 1 FROM memories
         ON CONFLICT (tenant_id) DO UPDATE SET version = memory_versions.version + 1;
       RETURN NULL;
     END $$",
    "CREATE OR REPLACE TRIGGER memories_truncated
       BEFORE TRUNCATE ON memories FOR EACH STATEMENT EXECUTE FUNCTION memory_versions_bump_all()",
];

/// The tenant's version as committed; 0 before its first write.
pub(super) async fn version<'e>(
    executor: impl PgExecutor<'e>,
    tenant: &str,
) -> Result<Version, sqlx::Error> {
    let version: Option<i64> =
        sqlx::query_scalar("SELECT version FROM memory_versions WHERE tenant_id = $1")
            .bind(tenant)
            .fetch_optional(executor)
            .await?;
    Ok(version.unwrap_or(0))
}

/// Locks the tenant's version row until the transaction ends, so no other writer changes
/// the tenant meanwhile, and returns the version. The tenant's advisory lock comes first:
/// releases before the version table took only that one for check-then-insert, and during
/// a rolling upgrade they must still wait for this release's writers.
pub(super) async fn lock_version<'e>(
    executor: impl PgExecutor<'e>,
    tenant: &str,
) -> Result<Version, sqlx::Error> {
    sqlx::query_scalar(
        "WITH turn AS (SELECT pg_advisory_xact_lock(hashtextextended('mcp-memory:' || $1, 0))) \
         INSERT INTO memory_versions SELECT $1, 0 FROM turn ON CONFLICT (tenant_id) \
         DO UPDATE SET version = memory_versions.version RETURNING version",
    )
    .bind(tenant)
    .fetch_one(executor)
    .await
}

/// Builds the tenant's index from its rows. Rows are indexed as they stream in, never all
/// held at once. Vectors travel in pgvector's binary form (the `pgvector` crate's codec);
/// terms are in the row, and a row an older release wrote without them is indexed from
/// its content.
pub(super) async fn load<'e>(
    executor: impl PgExecutor<'e>,
    tenant: &str,
    width: usize,
) -> Result<SearchIndex, sqlx::Error> {
    let mut rows = sqlx::query(
        "SELECT id, scope, conversation, embedding, terms, \
         (extract(epoch FROM expires_at) * 1000)::bigint AS expires_ms, \
         CASE WHEN terms IS NULL THEN content END AS content \
         FROM memories WHERE tenant_id = $1",
    )
    .bind(tenant)
    .fetch(executor);
    let mut index = SearchIndex::new(width);
    while let Some(row) = rows.try_next().await? {
        add(&mut index, &row)?;
    }
    Ok(index)
}

fn add(index: &mut SearchIndex, row: &PgRow) -> Result<(), sqlx::Error> {
    let terms = match row.try_get::<Option<Vec<String>>, _>("terms")? {
        Some(terms) => terms,
        None => search::terms(
            &row.try_get::<Option<String>, _>("content")?
                .unwrap_or_default(),
        ),
    };
    let scope: String = row.try_get("scope")?;
    let vector: Vector = row.try_get("embedding")?;
    index.push(
        Entry {
            id: row.try_get("id")?,
            scope: Scope::parse(&scope).unwrap_or(Scope::Project),
            conversation: row.try_get("conversation")?,
            expires_at: row.try_get("expires_ms")?,
        },
        vector.as_slice(),
        &terms,
    );
    Ok(())
}

/// The database as the tenant cache reads it, for vectors of `model`.
pub(super) struct Database {
    pub pool: PgPool,
    pub model: Model,
    /// The database, as a refusal names it.
    pub location: String,
}

#[async_trait]
impl Coherence for Database {
    type Index = SearchIndex;
    type Error = StoreError;

    async fn version(&self, tenant: &str) -> Result<Version, StoreError> {
        version(&self.pool, tenant).await.map_err(failed)
    }

    async fn load(&self, tenant: &str) -> Result<(Version, SearchIndex), StoreError> {
        // One snapshot for the version, the model and the rows. A re-embedding's switch
        // moves every tenant's version, so an index of this process's model is never built
        // from another model's vectors.
        let mut tx = self.pool.begin().await.map_err(failed)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        let version = version(&mut *tx, tenant).await.map_err(failed)?;
        let recorded = super::recorded_model(&mut tx, "").await.map_err(failed)?;
        StoreError::unless_same_model(&self.location, recorded, &self.model)?;
        let index = load(&mut *tx, tenant, self.model.dimension)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        Ok((version, index))
    }
}
