//! The on-premises store: one native `memories` table in PostgreSQL with pgvector
//! (docs/behavior.md#postgresql). The tenant and the request's visibility are in every
//! statement; counters live in the row and move by one atomic UPDATE; the schema is
//! created (and a v0.8 database migrated) at boot under an advisory lock, so replicas
//! starting together do not race. Searches (the exact scan and keyword matching) run in
//! this process on an index of the tenant's vectors and terms, kept coherent across
//! replicas by a per-tenant version (`versions.rs`); the rows they find are then read by id.
//! A scan of a heavy index is CPU work, so it runs off the async threads
//! (`search::cache::HAND_OFF_BYTES`).
//! Terms are made by `keywords` and kept in the row's `terms text[]`: language-neutral, any
//! script, and the same terms SQLite indexes.

mod legacy;
pub mod reembed;
mod versions;

use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Row};

use super::{After, Counts, Exported, Matches, MemoryStore, Portable, Remembered, StoreError};
use crate::dedup;
use crate::memory::{
    Conversation, Hit, KeywordHit, Memory, MemoryType, Model, NewMemory, Scope, Tenant, Visibility,
};
use crate::search::cache::{self, Indexing, Slot, TenantCache, Version};
use crate::search::{self, Entry, Found, Query, SearchIndex};
use versions::Database;

/// Memories an import writes per statement.
const IMPORT_ROWS: usize = 250;

/// Serialises schema work across every replica booting at once.
const SCHEMA_LOCK: i64 = 7_304_592_118_001;

const SCHEMA: &[&str] = &[
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
    // What the vectors are: `model` and `dimension`, recorded by the first write.
    "CREATE TABLE IF NOT EXISTS store_meta (key text PRIMARY KEY, value text NOT NULL)",
    // What the expiry sweep reads: only the memories that expire.
    "CREATE INDEX IF NOT EXISTS memories_expiry_idx
       ON memories (expires_at) WHERE expires_at IS NOT NULL",
];

/// `$2` is the request's conversation or NULL, `$3` its instant in epoch milliseconds
/// (docs/behavior.md#visibility).
const VISIBLE: &str = "(scope = 'project' OR (scope = 'conversation' AND $2::text IS NOT NULL AND conversation = $2)) \
     AND (expires_at IS NULL OR expires_at > to_timestamp($3::double precision / 1000))";
/// Times travel as epoch milliseconds, exactly (extract gives numeric since PostgreSQL 14).
const COLUMNS: &str = "id, content, memory_type, category, tags, \
     (extract(epoch FROM created_at) * 1000)::bigint AS created_ms, scope, conversation, trust_base, \
     access_count, (extract(epoch FROM last_accessed_at) * 1000)::bigint AS last_accessed_ms, \
     replaces, (extract(epoch FROM expires_at) * 1000)::bigint AS expires_ms";

/// How the pool behaves; see the README's PostgreSQL section.
pub struct PoolSettings {
    pub max_connections: u32,
    pub statement_timeout_ms: u64,
    /// How the tenants' indexes are kept in this process.
    pub indexing: Indexing,
}

pub struct PostgresStore {
    pool: PgPool,
    location: String,
    width: usize,
    /// Whether the database is known to record a model (this process's is `database.model`).
    recorded: std::sync::atomic::AtomicBool,
    indexes: TenantCache<SearchIndex>,
    /// The same pool, as the tenant cache reads it, with the model and the refusals' name
    /// of the database.
    database: Database,
}

/// A failed statement: a timeout (the pool's or `statement_timeout`'s) or anything else.
fn failed(e: sqlx::Error) -> StoreError {
    let timed_out = match &e {
        sqlx::Error::PoolTimedOut => true,
        // 57014: query_canceled, which is how statement_timeout ends a statement.
        sqlx::Error::Database(db) => db.code().as_deref() == Some("57014"),
        _ => false,
    };
    if timed_out {
        StoreError::timed_out("PostgreSQL", e)
    } else {
        StoreError::unavailable("PostgreSQL", e)
    }
}

/// A write under way (`begin_write`); this process's next write to the tenant waits until
/// it is dropped. Dropped uncommitted, it rolls back: a write that changed nothing leaves
/// no version row for a tenant that never wrote.
struct Write<'a> {
    slot: Arc<Slot<SearchIndex>>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
    _taken: TakenSlot<'a>,
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    from: Version,
}

/// The cache entry a write took: let go if the write built nothing in it.
struct TakenSlot<'a> {
    indexes: &'a TenantCache<SearchIndex>,
    tenant: &'a str,
    slot: Arc<Slot<SearchIndex>>,
}

impl Drop for TakenSlot<'_> {
    fn drop(&mut self) {
        self.indexes.release(self.tenant, &self.slot);
    }
}

/// A memory a search found, by id, with its similarity and, for a keyword match, its score.
struct Located {
    id: String,
    similarity: f64,
    score: f64,
}

impl Located {
    /// A search's answers as ids, nearest first, then by words.
    fn all(index: &SearchIndex, found: Found) -> [Vec<Located>; 2] {
        let nearest = (found.nearest.into_iter())
            .map(|n| Located {
                id: index.id(n.position).to_owned(),
                similarity: n.similarity,
                score: 0.0,
            })
            .collect();
        let by_words = (found.by_words.into_iter())
            .map(|m| Located {
                id: index.id(m.position).to_owned(),
                similarity: m.similarity,
                score: m.score,
            })
            .collect();
        [nearest, by_words]
    }
}

/// Reads, in one query, the rows of each answer in `found` that `visibility` may see; each
/// keeps its order, and a memory in two answers is read once. A memory deleted since the
/// search is simply not found.
async fn found_rows<'e, const N: usize>(
    executor: impl sqlx::PgExecutor<'e>,
    tenant: &Tenant,
    visibility: &Visibility,
    found: [Vec<Located>; N],
) -> Result<[Vec<KeywordHit>; N], StoreError> {
    let ids: Vec<&str> = found.iter().flatten().map(|l| l.id.as_str()).collect();
    if ids.is_empty() {
        return Ok(found.map(|_| Vec::new()));
    }
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM memories WHERE tenant_id = $1 AND {VISIBLE} AND id = ANY($4)"
    ))
    .bind(tenant.as_str())
    .bind(conversation_of(visibility))
    .bind(at_of(visibility))
    .bind(&ids)
    .fetch_all(executor)
    .await
    .map_err(failed)?;
    let by_id: HashMap<String, Arc<Memory>> = rows
        .iter()
        .map(|row| memory_from_row(row).map(|m| (m.id.clone(), Arc::new(m))))
        .collect::<Result<_, _>>()
        .map_err(failed)?;
    Ok(found.map(|answer| {
        answer
            .into_iter()
            .filter_map(|located| {
                Some(KeywordHit {
                    hit: Hit {
                        memory: Arc::clone(by_id.get(&located.id)?),
                        similarity: located.similarity,
                    },
                    score: located.score,
                })
            })
            .collect()
    }))
}

impl PostgresStore {
    /// Connects, creates or migrates the schema, and checks that stored vectors have the
    /// width this deployment embeds with — before the port is bound.
    pub async fn open(
        url: &str,
        model: &Model,
        settings: &PoolSettings,
    ) -> Result<Self, StoreError> {
        let dimension = model.dimension;
        let indexes: TenantCache<SearchIndex> = super::tenant_indexes(&settings.indexing)?;
        let (pool, location) = connect(url, settings).await?;
        let store = PostgresStore {
            database: Database {
                pool: pool.clone(),
                model: model.clone(),
                location: format!("the database {location}"),
                files: indexes.files().clone(),
            },
            pool,
            location,
            width: dimension,
            recorded: std::sync::atomic::AtomicBool::new(false),
            indexes,
        };
        if let Err(e) = store.ensure_schema(dimension).await {
            store.pool.close().await;
            return Err(e);
        }
        Ok(store)
    }

    async fn ensure_schema(&self, dimension: usize) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await.map_err(failed)?;
        let mut tx = conn.begin().await.map_err(failed)?;
        schema(&mut tx, &self.location).await?;
        let stored: Option<i32> =
            sqlx::query_scalar("SELECT vector_dims(embedding) FROM memories LIMIT 1")
                .fetch_optional(&mut *tx)
                .await
                .map_err(failed)?;
        let recorded = recorded_model(&mut tx, "").await.map_err(failed)?;
        let (location, model) = (&self.database.location, &self.database.model);
        StoreError::unless_same_model(location, recorded.clone(), model)?;
        if let Some(width) = stored.filter(|w| *w as usize != dimension) {
            return Err(StoreError::Dimension {
                location: location.clone(),
                stored: width as usize,
                configured: dimension,
            });
        }
        (self.recorded).store(recorded.is_some(), std::sync::atomic::Ordering::Relaxed);
        tx.commit().await.map_err(failed)
    }

    /// Starts a write to `tenant`: this process's other writes to it wait for this one, and
    /// the transaction holds the tenant's version row (one writer per tenant across
    /// replicas, for check-then-insert), so the write knows the version it moves on from.
    /// A write of a vector (`with_vector`) first checks the model (`check_model`), which
    /// comes before the version row in every transaction that takes both.
    async fn begin_write<'a>(
        &'a self,
        tenant: &'a Tenant,
        with_vector: bool,
    ) -> Result<Write<'a>, StoreError> {
        let slot = self.indexes.slot(tenant.as_str());
        let taken = TakenSlot {
            indexes: &self.indexes,
            tenant: tenant.as_str(),
            slot: Arc::clone(&slot),
        };
        let turn = Arc::clone(&slot.writes).lock_owned().await;
        let mut tx = self.pool.begin().await.map_err(failed)?;
        if with_vector {
            self.check_model(&mut tx).await?;
        }
        let from = versions::lock_version(&mut *tx, tenant.as_str())
            .await
            .map_err(failed)?;
        self.catch_up(&mut tx, tenant.as_str(), &slot, from, with_vector)
            .await
            .map_err(failed)?;
        Ok(Write {
            slot,
            _turn: turn,
            _taken: taken,
            tx,
            from,
        })
    }

    /// Within a write, which holds the tenant's version row: brings an index that shows an
    /// earlier version up to `to` with the changes another replica logged since
    /// (`versions.rs`). One it cannot bring up stays as it is, for the write to drop.
    /// `model_checked`: the write checked the model already (`check_model`).
    async fn catch_up(
        &self,
        tx: &mut sqlx::PgConnection,
        tenant: &str,
        slot: &Slot<SearchIndex>,
        to: Version,
        model_checked: bool,
    ) -> Result<(), sqlx::Error> {
        let Some(from) = slot.version().filter(|from| *from < to) else {
            return Ok(());
        };
        // Never another model's vectors.
        if !model_checked {
            let recorded = recorded_model(tx, "").await?;
            let (location, model) = (&self.database.location, &self.database.model);
            if StoreError::unless_same_model(location, recorded, model).is_err() {
                return Ok(());
            }
        }
        if let Some(changes) = versions::changes(tx, tenant, from, to).await? {
            (self.indexes).catch_up(tenant, slot, from, to, |index| changes.apply(index));
        }
        Ok(())
    }
}

/// A pool of connections to `url`, and where it leads, for messages (never credentials).
async fn connect(url: &str, settings: &PoolSettings) -> Result<(PgPool, String), StoreError> {
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
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(options)
        .await
        .map_err(|e| {
            StoreError::unavailable(format!("cannot connect to PostgreSQL at {location}"), e)
        })?;
    Ok((pool, location))
}

/// Creates the schema, or migrates an older one, under the advisory lock that serialises
/// every replica booting at once (held until `tx` ends).
async fn schema(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    location: &str,
) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(SCHEMA_LOCK)
        .execute(&mut **tx)
        .await
        .map_err(failed)?;
    let has_vector = sqlx::query("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
        .fetch_optional(&mut **tx)
        .await
        .map_err(failed)?
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
    if legacy::present(tx).await.map_err(failed)? {
        let moved = legacy::migrate(tx, SCHEMA).await?;
        eprintln!("store: migrated {moved} memories from the v0.8 layout into the native table");
    }
    for statement in SCHEMA {
        sqlx::query(statement)
            .execute(&mut **tx)
            .await
            .map_err(failed)?;
    }
    for statement in versions::SCHEMA {
        sqlx::query(statement)
            .execute(&mut **tx)
            .await
            .map_err(failed)?;
    }
    index_terms(tx).await.map_err(failed)?;
    Ok(())
}

/// A memory to write: its tenant, the memory whole, its vector and its terms.
type NewRow<'a> = (&'a str, &'a Memory, &'a [f32], Vec<String>);

/// One statement writing `rows` whole, their uses and times as they hold them; a caller may
/// add an `ON CONFLICT` clause.
fn insert<'a>(
    rows: impl IntoIterator<Item = NewRow<'a>>,
) -> sqlx::QueryBuilder<'a, sqlx::Postgres> {
    let mut insert = sqlx::QueryBuilder::new(
        "INSERT INTO memories (tenant_id, id, content, memory_type, category, tags, created_at, \
         scope, conversation, trust_base, embedding, access_count, last_accessed_at, terms, \
         replaces, expires_at) ",
    );
    let seconds = |ms: i64| ms as f64 / 1000.0;
    insert.push_values(rows, |mut row, (tenant, m, embedding, terms)| {
        row.push_bind(tenant)
            .push_bind(&m.id)
            .push_bind(&m.content)
            .push_bind(m.memory_type.as_str())
            .push_bind(m.category.as_deref())
            .push_bind(&m.tags)
            .push("to_timestamp(")
            .push_bind_unseparated(seconds(m.created_at))
            .push_unseparated(")")
            .push_bind(m.scope.as_str())
            .push_bind(m.conversation.as_ref().map(Conversation::as_str))
            .push_bind(m.trust_base)
            .push_bind(pgvector::Vector::from(embedding.to_vec()))
            .push_bind(i64::try_from(m.access_count).unwrap_or(i64::MAX))
            .push("to_timestamp(")
            .push_bind_unseparated(m.last_accessed_at.map(seconds))
            .push_unseparated(")")
            .push_bind(terms)
            .push_bind(m.replaces.as_deref())
            .push("to_timestamp(")
            .push_bind_unseparated(m.expires_at.map(seconds))
            .push_unseparated(")");
    });
    insert
}

/// The model the database's vectors come from, as its first write recorded it, read with
/// `locking` (a row-locking clause, or nothing).
async fn recorded_model(
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

impl PostgresStore {
    /// Within a write of vectors: records this process's model unless the database has
    /// one, and refuses the write if it holds another (a replica of another model wrote
    /// first, or `mcp-memory reembed` switched since). The record is held shared until the
    /// write commits, so a switch (`reembed.rs`, which locks the table) waits for it.
    async fn check_model(&self, tx: &mut sqlx::PgConnection) -> Result<(), StoreError> {
        if !self.recorded.load(std::sync::atomic::Ordering::Relaxed) {
            sqlx::query(
                "INSERT INTO store_meta VALUES ('model', $1), ('dimension', $2) \
                 ON CONFLICT (key) DO NOTHING",
            )
            .bind(&self.database.model.name)
            .bind(self.database.model.dimension.to_string())
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        }
        let recorded = recorded_model(tx, "FOR SHARE").await.map_err(failed)?;
        StoreError::unless_same_model(&self.database.location, recorded, &self.database.model)
    }
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

fn memory_from_row(row: &PgRow) -> Result<Memory, sqlx::Error> {
    let memory_type: String = row.try_get("memory_type")?;
    let scope: String = row.try_get("scope")?;
    Ok(Memory {
        id: row.try_get("id")?,
        content: row.try_get("content")?,
        memory_type: MemoryType::parse(&memory_type).unwrap_or(MemoryType::Project),
        category: row
            .try_get::<Option<String>, _>("category")?
            .filter(|c| !c.is_empty()),
        tags: row.try_get("tags")?,
        created_at: row.try_get("created_ms")?,
        scope: Scope::parse(&scope).unwrap_or(Scope::Project),
        conversation: row
            .try_get::<Option<String>, _>("conversation")?
            .map(Conversation::new_unchecked),
        trust_base: row.try_get("trust_base")?,
        access_count: row.try_get::<i64, _>("access_count")?.max(0) as u64,
        last_accessed_at: row.try_get("last_accessed_ms")?,
        replaces: row.try_get("replaces")?,
        expires_at: row.try_get("expires_ms")?,
    })
}

fn conversation_of(v: &Visibility) -> Option<&str> {
    v.conversation.as_ref().map(Conversation::as_str)
}

/// The request's instant, as `VISIBLE`'s `$3` takes it.
fn at_of(v: &Visibility) -> f64 {
    v.at as f64
}

#[async_trait]
impl MemoryStore for PostgresStore {
    async fn remember(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory: NewMemory,
        embedding: &[f32],
        rule: dedup::Rule,
    ) -> Result<Remembered, StoreError> {
        let mut write = self.begin_write(tenant, true).await?;
        let (slot, from) = (Arc::clone(&write.slot), write.from);
        // The tenant's version row is held: nobody can take the replaced memory meanwhile.
        if let Some(id) = &memory.replaces {
            let visible: Option<i32> = sqlx::query_scalar(&format!(
                "SELECT 1 FROM memories WHERE tenant_id = $1 AND {VISIBLE} AND id = $4"
            ))
            .bind(tenant.as_str())
            .bind(conversation_of(visibility))
            .bind(at_of(visibility))
            .bind(id)
            .fetch_optional(&mut *write.tx)
            .await
            .map_err(failed)?;
            if visible.is_none() {
                return Err(StoreError::not_visible("replaces", id));
            }
        }
        let dedup_scope = &visibility.for_dedup(memory.scope);
        if !slot.shows(from) {
            let files = self.indexes.files();
            let index = versions::load(&mut write.tx, tenant.as_str(), self.width, files)
                .await
                .map_err(failed)?;
            self.indexes.install(tenant.as_str(), &slot, from, index);
        }
        let (scope, vector) = (dedup_scope.clone(), embedding.to_vec());
        let held = Arc::clone(&slot);
        let nearest = cache::run(slot.heavy(), move || {
            held.read_at(from, |index| {
                let query = Query {
                    vector: &vector,
                    terms: &[],
                    k: dedup::NEIGHBOURS,
                };
                let [nearest, _] = Located::all(index, index.search(&query, &scope));
                nearest
            })
            .unwrap_or_default()
        })
        .await?;
        let [nearest] = found_rows(&mut *write.tx, tenant, dedup_scope, [nearest]).await?;
        let neighbours: Vec<Hit> = nearest.into_iter().map(|found| found.hit).collect();
        let similar = match dedup::judge(&memory, &neighbours, rule) {
            dedup::Verdict::Repeat(existing) => {
                return Ok(Remembered::AlreadyKnown(Memory::clone(&existing.memory)));
            }
            dedup::Verdict::New { similar } => similar,
        };
        let terms = search::terms(&memory.content);
        let memory = memory.into_memory();
        let row = (tenant.as_str(), &memory, embedding, terms.clone());
        (insert([row]).build().execute(&mut *write.tx))
            .await
            .map_err(failed)?;
        if let Some(id) = &memory.replaces {
            sqlx::query("DELETE FROM memories WHERE tenant_id = $1 AND id = $2")
                .bind(tenant.as_str())
                .bind(id)
                .execute(&mut *write.tx)
                .await
                .map_err(failed)?;
        }
        write.tx.commit().await.map_err(failed)?;
        (self.recorded).store(true, std::sync::atomic::Ordering::Relaxed);
        // The trigger moved the tenant one version on for each row written or deleted.
        let to = from + 1 + i64::from(memory.replaces.is_some());
        (self.indexes).apply(tenant.as_str(), &slot, from, to, |index| {
            if let Some(id) = &memory.replaces {
                index.remove(id);
            }
            index.push(
                Entry {
                    id: &memory.id,
                    scope: memory.scope,
                    conversation: memory.conversation.as_ref().map(Conversation::as_str),
                    expires_at: memory.expires_at,
                },
                embedding,
                &terms,
            );
        });
        Ok(Remembered::Stored(memory, similar))
    }

    async fn search(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        query: &Query<'_>,
    ) -> Result<Matches, StoreError> {
        let seen = visibility.clone();
        let (vector, terms, k) = (query.vector.to_vec(), query.terms.to_vec(), query.k);
        let found = self
            .indexes
            .search(&self.database, tenant.as_str(), move |index| {
                let query = Query {
                    vector: &vector,
                    terms: &terms,
                    k,
                };
                let mut found = index.search(&query, &seen);
                let idf = std::mem::take(&mut found.idf);
                (Located::all(index, found), idf)
            })
            .await?;
        let (found, idf) = found;
        let [nearest, by_words] = found_rows(&self.pool, tenant, visibility, found).await?;
        Ok(Matches {
            nearest: nearest.into_iter().map(|found| found.hit).collect(),
            by_words,
            idf,
        })
    }

    async fn list(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory_type: Option<MemoryType>,
        after: Option<&After>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        // The memory listed last, at its own stored time when it is still there (a row an
        // older release wrote may hold microseconds the cursor's milliseconds lack).
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM memories WHERE tenant_id = $1 AND {VISIBLE} \
             AND ($4::text IS NULL OR memory_type = $4) \
             AND ($6::bigint IS NULL OR (created_at, id) < (coalesce( \
               (SELECT created_at FROM memories WHERE tenant_id = $1 AND id = $7), \
               to_timestamp($6::double precision / 1000)), $7)) \
             ORDER BY created_at DESC, id DESC LIMIT $5"
        ))
        .bind(tenant.as_str())
        .bind(conversation_of(visibility))
        .bind(at_of(visibility))
        .bind(memory_type.map(MemoryType::as_str))
        .bind(limit as i64)
        .bind(after.map(|a| a.created_at))
        .bind(after.map(|a| a.id.as_str()))
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        rows.iter()
            .map(|r| memory_from_row(r).map_err(failed))
            .collect()
    }

    async fn delete(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<bool, StoreError> {
        let mut write = self.begin_write(tenant, false).await?;
        let (slot, from) = (Arc::clone(&write.slot), write.from);
        let deleted = sqlx::query(&format!(
            "DELETE FROM memories WHERE tenant_id = $1 AND {VISIBLE} AND id = $4"
        ))
        .bind(tenant.as_str())
        .bind(conversation_of(visibility))
        .bind(at_of(visibility))
        .bind(id)
        .execute(&mut *write.tx)
        .await
        .map_err(failed)?
        .rows_affected()
            > 0;
        if !deleted {
            return Ok(false);
        }
        write.tx.commit().await.map_err(failed)?;
        (self.indexes).apply(tenant.as_str(), &slot, from, from + 1, |index| {
            index.remove(id);
        });
        Ok(true)
    }

    async fn count_by_type(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
    ) -> Result<Counts, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT memory_type, count(*) FROM memories WHERE tenant_id = $1 AND {VISIBLE} \
             GROUP BY memory_type"
        ))
        .bind(tenant.as_str())
        .bind(conversation_of(visibility))
        .bind(at_of(visibility))
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        Ok(Counts::from_type_names(rows))
    }

    async fn record_access(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        used: &[&Memory],
        at: i64,
    ) -> Result<(), StoreError> {
        let ids: Vec<String> = used.iter().map(|m| m.id.clone()).collect();
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query(&format!(
            "UPDATE memories SET access_count = access_count + 1, last_accessed_at = \
             GREATEST(COALESCE(last_accessed_at, '-infinity'::timestamptz), \
             to_timestamp($5::double precision / 1000)) \
             WHERE tenant_id = $1 AND {VISIBLE} AND id = ANY($4::text[])"
        ))
        .bind(tenant.as_str())
        .bind(conversation_of(visibility))
        .bind(at_of(visibility))
        .bind(&ids)
        .bind(at as f64)
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    /// In (tenant, id) order; the cursor is the last tenant and id, a newline apart.
    async fn export(
        &self,
        only: &[Tenant],
        at: i64,
        from: Option<&str>,
        limit: usize,
    ) -> Result<Exported, StoreError> {
        let only: Vec<&str> = only.iter().map(Tenant::as_str).collect();
        let from = Exported::after_tenant_and_id(from);
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS}, embedding, tenant_id FROM memories \
             WHERE (cardinality($1::text[]) = 0 OR tenant_id = ANY($1)) \
             AND (expires_at IS NULL OR expires_at > to_timestamp($2::double precision / 1000)) \
             AND (tenant_id, id) > ($3, $4) \
             ORDER BY tenant_id, id LIMIT $5"
        ))
        .bind(&only)
        .bind(at as f64)
        .bind(from.0)
        .bind(from.1)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        let memories = (rows.iter())
            .map(|row| {
                Ok(Portable {
                    memory: memory_from_row(row)?,
                    embedding: row.try_get::<pgvector::Vector, _>("embedding")?.to_vec(),
                    tenant: Tenant::new_unchecked(row.try_get("tenant_id")?),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(failed)?;
        Ok(Exported::by_tenant_and_id(memories, limit))
    }

    /// One transaction for the batch; the trigger moves each tenant written, so every
    /// replica's index of it is rebuilt at its next search.
    async fn import(&self, memories: &[Portable]) -> Result<usize, StoreError> {
        super::check_widths(memories, self.width)?;
        let mut tx = self.pool.begin().await.map_err(failed)?;
        self.check_model(&mut tx).await?;
        // One multi-row statement per batch (16 values a row, far below the protocol's
        // 65,535): one round trip instead of one per memory.
        let mut written = 0;
        for rows in memories.chunks(IMPORT_ROWS) {
            let rows = (rows.iter()).map(|p| {
                let terms = search::terms(&p.memory.content);
                (p.tenant.as_str(), &p.memory, p.embedding.as_slice(), terms)
            });
            let mut insert = insert(rows);
            insert.push(" ON CONFLICT (tenant_id, id) DO NOTHING");
            written +=
                (insert.build().execute(&mut *tx).await.map_err(failed)?).rows_affected() as usize;
        }
        tx.commit().await.map_err(failed)?;
        (self.recorded).store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(written)
    }

    /// Tenant by tenant, each as one of this process's writes, so its index follows.
    async fn expire(&self, at: i64, limit: usize) -> Result<usize, StoreError> {
        let expired: Vec<(String, String)> = sqlx::query_as(
            "SELECT tenant_id, id FROM memories \
             WHERE expires_at <= to_timestamp($1::double precision / 1000) \
             ORDER BY expires_at LIMIT $2",
        )
        .bind(at as f64)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await
        .map_err(failed)?;
        let mut by_tenant: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (tenant, id) in &expired {
            by_tenant.entry(tenant).or_default().push(id);
        }
        let mut deleted = 0;
        for (tenant, ids) in by_tenant {
            let tenant = Tenant::new_unchecked(tenant.to_owned());
            let mut write = self.begin_write(&tenant, false).await?;
            let (slot, from) = (Arc::clone(&write.slot), write.from);
            // Checked again under the tenant's lock: a replica's sweep may have come first.
            let gone: Vec<String> = sqlx::query_scalar(
                "DELETE FROM memories WHERE tenant_id = $1 AND id = ANY($2) \
                 AND expires_at <= to_timestamp($3::double precision / 1000) RETURNING id",
            )
            .bind(tenant.as_str())
            .bind(&ids)
            .bind(at as f64)
            .fetch_all(&mut *write.tx)
            .await
            .map_err(failed)?;
            if gone.is_empty() {
                continue;
            }
            write.tx.commit().await.map_err(failed)?;
            let to = from + gone.len() as Version;
            (self.indexes).apply(tenant.as_str(), &slot, from, to, |index| {
                for id in &gone {
                    index.remove(id);
                }
            });
            deleted += gone.len();
        }
        Ok(deleted)
    }

    /// Every write is committed when it returns: nothing waits here.
    async fn flush(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    fn describe(&self) -> String {
        format!("postgres at {}", self.location)
    }

    fn index_usage(&self) -> Option<crate::search::cache::Usage> {
        Some(self.indexes.usage())
    }
}

#[cfg(test)]
pub(crate) mod tests;
