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
//!
//! The same trigger logs each version it makes in `memory_changes`, with the id of the
//! memory that made it, so a process whose index is behind reads only the memories that
//! changed since (`changes`) instead of the whole tenant: 1.1 s at 100k memories for a
//! rebuild (BENCHMARKS.md). A version the log lacks (pruned, a `TRUNCATE`, a write by a
//! release without the log) sends it back to a rebuild.

use async_trait::async_trait;
use futures_util::TryStreamExt;
use pgvector::Vector;
use sqlx::postgres::{PgConnection, PgPool, PgRow};
use sqlx::{PgExecutor, Row};

use crate::memory::{Model, Scope};
use std::sync::Arc;

use crate::search::cache::{Coherence, Slot, TenantCache, Version};
use crate::search::{self, Entry, SearchIndex, VectorFiles};
use crate::store::StoreError;

/// How many of a tenant's latest versions the change log keeps: an index further behind
/// is built again.
pub(super) const LOGGED: Version = 1_000;

/// The version a tenant's write from version 0 (no row) brought it to, read in its
/// transaction, which made the row in an epoch of its own: the row's, when the log holds
/// only the write's own `changes`; otherwise 0, so that index is built again at its next
/// search rather than labelled past a change it lacks (an operator's statement writing the
/// same new tenant at that moment).
pub(super) async fn first_version(
    conn: &mut PgConnection,
    tenant: &str,
    changes: i64,
) -> Result<Version, sqlx::Error> {
    let (version, logged): (Option<i64>, i64) = sqlx::query_as(
        "SELECT (SELECT version FROM memory_versions WHERE tenant_id = $1), \
                (SELECT count(*) FROM memory_changes WHERE tenant_id = $1)",
    )
    .bind(tenant)
    .fetch_one(&mut *conn)
    .await?;
    Ok(match version {
        Some(version) if logged == changes => version,
        _ => 0,
    })
}

/// The version table, the change log and the triggers that keep them. A tenant's versions
/// only grow, past the removal of its row with its last memory too: a new row starts an
/// epoch of its own (`memory_version_epochs`, shifted past 2^32 versions to an epoch), past
/// every version any earlier row reached, so an index labelled in a tenant's past never
/// matches its present; `nextval` never waits and never goes back, whoever commits first.
pub(super) const LAYOUT: &[&str] = &[
    "CREATE SEQUENCE IF NOT EXISTS memory_version_epochs",
    "CREATE TABLE IF NOT EXISTS memory_versions (
       tenant_id text PRIMARY KEY,
       version   bigint NOT NULL
     )",
    "CREATE TABLE IF NOT EXISTS memory_changes (
       tenant_id text NOT NULL,
       version   bigint NOT NULL,
       id        text COLLATE \"C\" NOT NULL,
       PRIMARY KEY (tenant_id, version)
     )",
    // One version per memory changed, logged with its id; every 100th also prunes what
    // lies more than `LOGGED` versions back (the 1000 below). A tenant without a row
    // starts an epoch, taken only then.
    "CREATE OR REPLACE FUNCTION memory_versions_move(tenant text, memory text) RETURNS void
     LANGUAGE plpgsql AS $$
     DECLARE moved bigint;
     BEGIN
       UPDATE memory_versions SET version = version + 1 WHERE tenant_id = tenant
         RETURNING version INTO moved;
       IF NOT FOUND THEN
         INSERT INTO memory_versions VALUES (tenant, (nextval('memory_version_epochs') << 32) + 1)
           ON CONFLICT (tenant_id) DO UPDATE SET version = memory_versions.version + 1
           RETURNING version INTO moved;
       END IF;
       INSERT INTO memory_changes VALUES (tenant, moved, memory)
         ON CONFLICT (tenant_id, version) DO UPDATE SET id = EXCLUDED.id;
       IF moved % 100 = 0 THEN
         DELETE FROM memory_changes WHERE tenant_id = tenant AND version <= moved - 1000;
       END IF;
     END $$",
    // A version row deleted, or set back (an operator's SQL): the log's versions of the
    // tenant belong to a past the next versions would repeat, so they go.
    "CREATE OR REPLACE FUNCTION memory_changes_forget() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF TG_OP = 'TRUNCATE' THEN
         DELETE FROM memory_changes;
       ELSE
         DELETE FROM memory_changes WHERE tenant_id = OLD.tenant_id;
       END IF;
       RETURN NULL;
     END $$",
    "CREATE OR REPLACE TRIGGER memory_versions_deleted
       AFTER DELETE ON memory_versions FOR EACH ROW EXECUTE FUNCTION memory_changes_forget()",
    "CREATE OR REPLACE TRIGGER memory_versions_set_back
       AFTER UPDATE ON memory_versions FOR EACH ROW
       WHEN (NEW.version < OLD.version OR NEW.tenant_id <> OLD.tenant_id)
       EXECUTE FUNCTION memory_changes_forget()",
    "CREATE OR REPLACE TRIGGER memory_versions_truncated
       AFTER TRUNCATE ON memory_versions FOR EACH STATEMENT
       EXECUTE FUNCTION memory_changes_forget()",
    "CREATE OR REPLACE FUNCTION memory_versions_bump() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF TG_OP <> 'INSERT' THEN
         PERFORM memory_versions_move(OLD.tenant_id, OLD.id);
       END IF;
       IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE'
           AND (NEW.tenant_id, NEW.id) IS DISTINCT FROM (OLD.tenant_id, OLD.id)) THEN
         PERFORM memory_versions_move(NEW.tenant_id, NEW.id);
       END IF;
       RETURN NULL;
     END $$",
    "CREATE OR REPLACE TRIGGER memories_versioned
       AFTER INSERT OR DELETE OR UPDATE OF tenant_id, id, scope, conversation, embedding, terms, expires_at
       ON memories FOR EACH ROW EXECUTE FUNCTION memory_versions_bump()",
    // A tenant's last memory gone, its version row goes, and its log with it
    // (`memory_versions_deleted`): a flood of short-lived tenants leaves nothing behind.
    // Once per statement, after every row's version moved: a sweep deleting a tenant's
    // expired memories at once removes its row once, rather than removing it and making it
    // again row after row. Every writer of the tenant holds its row, so none writes
    // meanwhile.
    "CREATE OR REPLACE FUNCTION memory_versions_release() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       DELETE FROM memory_versions v
         WHERE v.tenant_id IN (SELECT DISTINCT tenant_id FROM gone)
           AND NOT EXISTS (SELECT 1 FROM memories m WHERE m.tenant_id = v.tenant_id);
       RETURN NULL;
     END $$",
    "CREATE OR REPLACE TRIGGER memories_released
       AFTER DELETE ON memories REFERENCING OLD TABLE AS gone
       FOR EACH STATEMENT EXECUTE FUNCTION memory_versions_release()",
    // The tenant's advisory lock comes first: releases before the version table took only
    // that one for check-then-insert, and during a rolling upgrade they must still wait
    // for this release's writers. Its own statement, so the next sees what a writer that
    // held it committed (a row it removed with the tenant's last memory). A missing row
    // is not made here: the write's trigger makes it, so a write that changes nothing
    // takes no epoch.
    "CREATE OR REPLACE FUNCTION memory_versions_lock(tenant text) RETURNS bigint
     LANGUAGE plpgsql AS $$
     DECLARE held bigint;
     BEGIN
       PERFORM pg_advisory_xact_lock(hashtextextended('mcp-memory:' || tenant, 0));
       SELECT version INTO held FROM memory_versions WHERE tenant_id = tenant FOR UPDATE;
       RETURN coalesce(held, 0);
     END $$",
    // Before, while the rows still say which tenants they belong to: a tenant written only
    // by an older release has no version row yet, and must be bumped all the same.
    "CREATE OR REPLACE FUNCTION memory_versions_bump_all() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       INSERT INTO memory_versions
         SELECT tenant, (nextval('memory_version_epochs') << 32) + 1
         FROM (SELECT DISTINCT tenant_id AS tenant FROM memories) tenants
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
/// the tenant meanwhile, and returns the version; 0 for a tenant without one, whose writers
/// this release's and older ones take turns by the tenant's advisory lock
/// (`memory_versions_lock`).
pub(super) async fn lock_version<'e>(
    executor: impl PgExecutor<'e>,
    tenant: &str,
) -> Result<Version, sqlx::Error> {
    sqlx::query_scalar("SELECT memory_versions_lock($1)")
        .bind(tenant)
        .fetch_one(executor)
        .await
}

/// Builds the tenant's index from its rows, which stream to a blocking thread that indexes
/// them a batch at a time, never all held at once, a page of `PAGE` by id per statement, so
/// no statement of a large tenant's build runs into `DATABASE_STATEMENT_TIMEOUT_MS` (one
/// statement for a million memories took longer than its default 10 s). The pages agree
/// with each other: a search's build reads them all in its one repeatable-read snapshot
/// (`Database::snapshot`), and a write's in its transaction, which holds the tenant's
/// version row, so no writer can change the tenant between two pages. Vectors travel in
/// pgvector's binary form (the `pgvector` crate's codec); terms are in the row, and a row
/// an older release wrote without them is indexed from its content.
pub(super) async fn load(
    conn: &mut PgConnection,
    tenant: &str,
    width: usize,
    files: &VectorFiles,
) -> Result<SearchIndex, sqlx::Error> {
    // The rows go in batches to a blocking thread, which builds the index: a large tenant's
    // build is seconds of CPU, and every other tenant's calls and `/health` are served by
    // the async threads it would otherwise hold.
    let (batches, mut arriving) = tokio::sync::mpsc::channel::<Vec<Indexed>>(2);
    let files = files.clone();
    let builder = tokio::task::spawn_blocking(move || {
        let mut index = SearchIndex::new(width, &files);
        while let Some(batch) = arriving.blocking_recv() {
            for row in &batch {
                row.push(&mut index);
            }
        }
        index
    });
    let read = read_rows(conn, tenant, batches).await;
    let index = match builder.await {
        Ok(index) => index,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    read.map(|()| index)
}

/// Every row of the tenant into `batches`, a page of `PAGE` by id per statement.
async fn read_rows(
    conn: &mut PgConnection,
    tenant: &str,
    batches: tokio::sync::mpsc::Sender<Vec<Indexed>>,
) -> Result<(), sqlx::Error> {
    let statement = format!(
        "SELECT {INDEXED} FROM memories WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT {PAGE}"
    );
    // Every id is above the empty string.
    let mut after = String::new();
    loop {
        let mut rows = sqlx::query(&statement)
            .bind(tenant)
            .bind(&after)
            .fetch(&mut *conn);
        let (mut read, mut last, mut batch) = (0i64, None, Vec::with_capacity(BATCH));
        while let Some(row) = rows.try_next().await? {
            batch.push(Indexed::read(&row)?);
            read += 1;
            if batch.len() == BATCH {
                last = Some(batch[BATCH - 1].id.clone());
                // The builder stops early only by panicking, which `load` passes on.
                if batches.send(std::mem::take(&mut batch)).await.is_err() {
                    return Ok(());
                }
            }
        }
        drop(rows);
        if let Some(row) = batch.last() {
            last = Some(row.id.clone());
            if batches.send(batch).await.is_err() {
                return Ok(());
            }
        }
        match last {
            Some(id) if read == PAGE => after = id,
            _ => return Ok(()),
        }
    }
}

/// Rows sent to the builder at a time: enough that the hand-off costs nothing next to them.
const BATCH: usize = 1_000;

/// Rows a build reads per statement: about a second's worth for a large tenant. The unit
/// tests page every few rows, so the store suite builds its indexes across pages.
const PAGE: i64 = if cfg!(test) { 3 } else { 50_000 };

/// The columns `Indexed::read` reads, from `memories`.
const INDEXED: &str = "id, scope, conversation, embedding, terms, \
     (extract(epoch FROM expires_at) * 1000)::bigint AS expires_ms, \
     CASE WHEN terms IS NULL THEN content END AS content";

/// What the index keeps of one row.
pub(super) struct Indexed {
    id: String,
    scope: Scope,
    conversation: Option<String>,
    expires_at: Option<i64>,
    vector: Vector,
    terms: Vec<String>,
}

impl Indexed {
    fn read(row: &PgRow) -> Result<Indexed, sqlx::Error> {
        let terms = match row.try_get::<Option<Vec<String>>, _>("terms")? {
            Some(terms) => terms,
            None => search::terms(
                &row.try_get::<Option<String>, _>("content")?
                    .unwrap_or_default(),
            ),
        };
        let scope: String = row.try_get("scope")?;
        Ok(Indexed {
            id: row.try_get("id")?,
            scope: Scope::parse(&scope).unwrap_or(Scope::Project),
            conversation: row.try_get("conversation")?,
            expires_at: row.try_get("expires_ms")?,
            vector: row.try_get("embedding")?,
            terms,
        })
    }

    fn push(&self, index: &mut SearchIndex) {
        let entry = Entry {
            id: &self.id,
            scope: self.scope,
            conversation: self.conversation.as_deref(),
            expires_at: self.expires_at,
        };
        index.push(entry, self.vector.as_slice(), &self.terms);
    }
}

/// What changed in a tenant between two versions: every memory the log names, and the
/// rows of those that still exist.
pub(super) struct Changes {
    touched: Vec<String>,
    rows: Vec<Indexed>,
}

impl Changes {
    pub fn apply(self, index: &mut SearchIndex) {
        for id in &self.touched {
            index.remove(id);
        }
        for row in &self.rows {
            row.push(index);
        }
    }
}

/// The tenant's changes from `from` to `to`, read in one snapshot that shows `to` (a
/// transaction holding the version row, or a repeatable read), if the log holds every
/// version between.
pub(super) async fn changes(
    conn: &mut sqlx::PgConnection,
    tenant: &str,
    from: Version,
    to: Version,
) -> Result<Option<Changes>, sqlx::Error> {
    if to <= from || to - from > LOGGED {
        return Ok(None);
    }
    let mut touched: Vec<String> = sqlx::query_scalar(
        "SELECT id FROM memory_changes WHERE tenant_id = $1 AND version > $2 AND version <= $3",
    )
    .bind(tenant)
    .bind(from)
    .bind(to)
    .fetch_all(&mut *conn)
    .await?;
    // One row per version: any fewer, and some change is not in the log.
    if touched.len() as Version != to - from {
        return Ok(None);
    }
    touched.sort_unstable();
    touched.dedup();
    let rows = sqlx::query(&format!(
        "SELECT {INDEXED} FROM memories WHERE tenant_id = $1 AND id = ANY($2)"
    ))
    .bind(tenant)
    .bind(&touched)
    .fetch_all(&mut *conn)
    .await?;
    let rows = rows.iter().map(Indexed::read).collect::<Result<_, _>>()?;
    Ok(Some(Changes { touched, rows }))
}

/// The database as the tenant cache reads it, for vectors of `model`.
pub(super) struct Database {
    pub pool: PgPool,
    pub model: Model,
    /// The database, as a refusal names it.
    pub location: String,
}

impl Database {
    /// One snapshot for the tenant's version, the model and the rows, and the version. A
    /// re-embedding's switch moves every tenant's version, so an index of this process's
    /// model is never built, nor caught up, from another model's vectors.
    async fn snapshot(
        &self,
        tenant: &str,
    ) -> Result<(sqlx::Transaction<'static, sqlx::Postgres>, Version), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await?;
        let version = version(&mut *tx, tenant).await?;
        let recorded = super::schema::recorded_model(&mut tx, "").await?;
        StoreError::unless_same_model(&self.location, recorded, &self.model)?;
        Ok((tx, version))
    }
}

#[async_trait]
impl Coherence for Database {
    type Index = SearchIndex;
    type Error = StoreError;
    type Changes = Changes;

    async fn version(&self, tenant: &str) -> Result<Version, StoreError> {
        version(&self.pool, tenant).await.map_err(StoreError::from)
    }

    async fn build(
        &self,
        cache: &TenantCache<SearchIndex>,
        tenant: &str,
        slot: &Arc<Slot<SearchIndex>>,
    ) -> Result<(), StoreError> {
        let (mut tx, version) = self.snapshot(tenant).await?;
        let index = load(&mut tx, tenant, self.model.dimension, cache.files()).await?;
        tx.commit().await?;
        cache.install(tenant, slot, version, index);
        Ok(())
    }

    async fn changes(
        &self,
        tenant: &str,
        from: Version,
    ) -> Result<Option<(Version, Changes)>, StoreError> {
        let (mut tx, to) = self.snapshot(tenant).await?;
        let changes = changes(&mut tx, tenant, from, to).await?;
        tx.commit().await?;
        Ok(changes.map(|c| (to, c)))
    }

    fn catch_up(index: &mut SearchIndex, changes: Changes) {
        changes.apply(index);
    }
}
