//! The database's layout: the schema (created, or migrated from an older one, by the first
//! replica to boot, under an advisory lock), the pool, and the model the vectors record.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::{PoolSettings, legacy, versions};
use crate::memory::Model;
use crate::search;
use crate::store::StoreError;

/// Serialises schema work across every replica booting at once.
const SCHEMA_LOCK: i64 = 7_304_592_118_001;

/// The whole layout, in the order it is applied: the memories, then their versions. Every
/// statement holds for a database at any earlier version, so applying it is the upgrade.
const SCHEMA: [&[&str]; 2] = [MEMORIES, versions::LAYOUT];

/// The memories table, its indexes, the columns older tables get, and the model record.
const MEMORIES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS memories (
       tenant_id        text NOT NULL,
       id               text COLLATE \"C\" NOT NULL,
       content          text NOT NULL,
       memory_type      text NOT NULL CHECK (memory_type IN ('project','pattern','reference','conversation')),
       category         text,
       tags             text[] NOT NULL DEFAULT '{}',
       created_at       timestamptz NOT NULL,
       scope            text NOT NULL DEFAULT 'project' CHECK (scope IN ('project','conversation')),
       conversation     text,
       trust_base       double precision NOT NULL DEFAULT 1,
       embedding        vector NOT NULL,
       access_count     bigint NOT NULL DEFAULT 0 CHECK (access_count >= 0),
       last_accessed_at timestamptz,
       terms            text[],
       replaces         text,
       expires_at       timestamptz,
       author           text,
       PRIMARY KEY (tenant_id, id),
       CHECK (scope = 'project' OR conversation IS NOT NULL)
     )",
    "CREATE INDEX IF NOT EXISTS memories_recent_idx
       ON memories (tenant_id, created_at DESC, id DESC)",
    "CREATE INDEX IF NOT EXISTS memories_type_recent_idx
       ON memories (tenant_id, memory_type, created_at DESC, id DESC)",
    // Tables created before keyword recall get the column here and their terms at boot.
    "ALTER TABLE memories ADD COLUMN IF NOT EXISTS terms text[]",
    // Words are matched in this process's index now; the GIN index only slowed writes.
    "DROP INDEX IF EXISTS memories_terms_idx",
    // Tables created before corrections, or before expiry, get the column here.
    "ALTER TABLE memories ADD COLUMN IF NOT EXISTS replaces text",
    "ALTER TABLE memories ADD COLUMN IF NOT EXISTS expires_at timestamptz",
    // Tables created before credentials get who wrote each memory here (none for theirs).
    "ALTER TABLE memories ADD COLUMN IF NOT EXISTS author text",
    // What the vectors are: `model` and `dimension`, recorded by the first write.
    "CREATE TABLE IF NOT EXISTS store_meta (key text PRIMARY KEY, value text NOT NULL)",
    // What the expiry sweep reads: only the memories that expire.
    "CREATE INDEX IF NOT EXISTS memories_expiry_idx
       ON memories (expires_at) WHERE expires_at IS NOT NULL",
];

/// The longest a call waits for a connection, opening one included. While the database is
/// down the pool keeps trying to connect until then, so this is how long a call takes to
/// say so (docs/operations.md#timeouts); a pool so busy that a call would wait longer is
/// answered the same way rather than queued.
const ACQUIRE: Duration = Duration::from_secs(2);
/// How long a booting server waits for the database to accept a connection.
const BOOT_WAIT: Duration = Duration::from_secs(10);

/// A pool of connections to `url`, and where it leads, for messages (never credentials).
pub(super) async fn connect(
    url: &str,
    settings: &PoolSettings,
) -> Result<(PgPool, String), StoreError> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|_| StoreError::unavailable("DATABASE_URL", "it is not a valid PostgreSQL URL"))?;
    let location = format!(
        "{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("postgres")
    );
    let options = options.options([(
        "statement_timeout",
        settings.statement_timeout_ms.to_string(),
    )]);
    let pool = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(ACQUIRE)
        .connect_lazy_with(options);
    // A database still starting beside the server (a compose file's, a pod's) is waited
    // for at boot, up to `BOOT_WAIT`; an error it answers with ends the wait at once.
    let deadline = tokio::time::Instant::now() + BOOT_WAIT;
    loop {
        match pool.acquire().await {
            Ok(_) => return Ok((pool, location)),
            Err(sqlx::Error::PoolTimedOut) if tokio::time::Instant::now() < deadline => {}
            Err(e) => {
                let what = format!("cannot connect to PostgreSQL at {location}");
                return Err(StoreError::unavailable(what, e));
            }
        }
    }
}

/// Creates the schema, or migrates an older one, under the advisory lock that serialises
/// every replica booting at once (held until `tx` ends).
pub(super) async fn create_or_migrate(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    location: &str,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(SCHEMA_LOCK)
        .execute(&mut **tx)
        .await?;
    let has_vector = sqlx::query("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        .fetch_optional(&mut **tx)
        .await?
        .is_some();
    if !has_vector {
        sqlx::query("CREATE EXTENSION IF NOT EXISTS vector")
            .execute(&mut **tx)
            .await
            .map_err(|e| {
                StoreError::unavailable(
                    format!(
                        "the pgvector extension is not installed and this role may not \
                         create it: run `CREATE EXTENSION vector;` in database {} as a \
                         superuser, or use an image that ships it (pgvector/pgvector)",
                        location
                    ),
                    e,
                )
            })?;
    }
    let legacy = legacy::set_aside(tx).await?;
    for statement in SCHEMA.iter().copied().flatten() {
        sqlx::query(statement).execute(&mut **tx).await?;
    }
    if let Some(legacy) = legacy {
        let moved = legacy.carry_over(tx).await?;
        eprintln!("store: migrated {moved} memories from the v0.8 layout into the native table");
    }
    index_terms(tx).await?;
    Ok(())
}

/// The model the database's vectors come from, as its first write recorded it, read with
/// `locking` (a row-locking clause, or nothing).
pub(super) async fn recorded_model(
    conn: &mut sqlx::PgConnection,
    locking: &str,
) -> Result<Option<Model>, sqlx::Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT key, value FROM store_meta WHERE key IN ('model', 'dimension') {locking}"
    ))
    .fetch_all(&mut *conn)
    .await?;
    Ok(Model::recorded(&rows))
}

/// Gives every memory written before keyword recall existed its terms.
async fn index_terms(tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    let unindexed: Vec<(String, String, String)> =
        sqlx::query_as("SELECT tenant_id, id, content FROM memories WHERE terms IS NULL")
            .fetch_all(&mut *tx)
            .await?;
    for (tenant, id, content) in unindexed {
        sqlx::query("UPDATE memories SET terms = $3 WHERE tenant_id = $1 AND id = $2")
            .bind(tenant)
            .bind(id)
            .bind(search::terms(&content))
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}
