//! The on-premises store: one native `memories` table in PostgreSQL with pgvector
//! (BEHAVIOR.md §8, DESIGN.md §5). The tenant and the request's visibility are in every
//! statement; counters live in the row and move by one atomic UPDATE; the schema is
//! created (and a v0.8 database migrated) at boot under an advisory lock, so replicas
//! starting together do not race. Searches (the exact scan and keyword matching) run in
//! this process on an index of the tenant's vectors and terms, kept coherent across
//! replicas by a per-tenant version (`cached.rs`); the rows they find are then read by id.
//! Terms are made by `keywords` and kept in the row's `terms text[]`: language-neutral, any
//! script, and the same terms SQLite indexes.

mod cached;
mod legacy;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Row};

use std::collections::HashMap;
use std::sync::Arc;

use cached::{Indexes, TenantIndex, Versioned};

use super::index::{Entry, SearchIndex, WordMatch};
use super::{Candidates, Counts, MemoryStore, Remembered, StoreError};
use crate::dedup;
use crate::keywords;
use crate::memory::{
    Conversation, Hit, KeywordHit, Memory, MemoryType, NewMemory, Scope, Tenant, Visibility,
};

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
];

/// `$2` is the request's conversation or NULL (BEHAVIOR.md §8.2).
const VISIBLE: &str = "(scope = 'project' OR (scope = 'conversation' AND $2::text IS NOT NULL AND conversation = $2))";
/// Times travel as epoch milliseconds, exactly (extract gives numeric since PostgreSQL 14).
const COLUMNS: &str = "id, content, memory_type, category, tags, \
     (extract(epoch FROM created_at) * 1000)::bigint AS created_ms, scope, conversation, trust_base, \
     access_count, (extract(epoch FROM last_accessed_at) * 1000)::bigint AS last_accessed_ms";

/// How the pool behaves; see the README's PostgreSQL section.
pub struct PoolSettings {
    pub max_connections: u32,
    pub statement_timeout_ms: u64,
}

pub struct PostgresStore {
    pool: PgPool,
    location: String,
    width: usize,
    indexes: Indexes,
}

fn failed(e: sqlx::Error) -> StoreError {
    StoreError::Failed(format!("PostgreSQL: {e}"))
}

/// pgvector's text form, `[1,-0.5,2e-7]`; Display of f32 round-trips exactly.
fn vector_literal(v: &[f32]) -> String {
    let parts: Vec<String> = v.iter().map(f32::to_string).collect();
    format!("[{}]", parts.join(","))
}

/// A write under way (`begin_write`); this process's next write to the tenant waits until
/// it is dropped.
struct Write {
    entry: Arc<TenantIndex>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    from: i64,
}

/// A search's answer: ids with a similarity and, for keyword matches, a score.
type Found = Vec<(String, f64, f64)>;

/// Reads, in one query, the rows of each answer in `found` that `visibility` may see; each
/// keeps its order, and a memory in two answers is read once. A memory deleted since the
/// search is simply not found.
async fn found_rows<'e, const N: usize>(
    executor: impl sqlx::PgExecutor<'e>,
    tenant: &Tenant,
    visibility: &Visibility,
    found: [Found; N],
) -> Result<[Vec<KeywordHit>; N], StoreError> {
    let ids: Vec<&str> = found
        .iter()
        .flatten()
        .map(|(id, _, _)| id.as_str())
        .collect();
    if ids.is_empty() {
        return Ok(found.map(|_| Vec::new()));
    }
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM memories WHERE tenant_id = $1 AND {VISIBLE} AND id = ANY($3)"
    ))
    .bind(tenant.as_str())
    .bind(conversation_of(visibility))
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
            .filter_map(|(id, similarity, score)| {
                Some(KeywordHit {
                    hit: Hit {
                        memory: Arc::clone(by_id.get(&id)?),
                        similarity,
                    },
                    score,
                })
            })
            .collect()
    }))
}

/// The nearest memories as a search answer.
fn nearest_found(
    search: &SearchIndex,
    embedding: &[f32],
    visibility: &Visibility,
    k: usize,
) -> Found {
    nearest_ids(search, search.nearest(embedding, visibility, k))
}

/// Nearest positions as a search answer (ids, with no keyword score).
fn nearest_ids(search: &SearchIndex, nearest: Vec<(usize, f64)>) -> Found {
    (nearest.into_iter())
        .map(|(i, similarity)| (search.id(i).to_owned(), similarity, 0.0))
        .collect()
}

/// Keyword matches as a search answer.
fn match_ids(search: &SearchIndex, matches: Vec<WordMatch>) -> Found {
    (matches.into_iter())
        .map(|(i, similarity, score)| (search.id(i).to_owned(), similarity, score))
        .collect()
}

impl PostgresStore {
    /// Connects, creates or migrates the schema, and checks that stored vectors have the
    /// width this deployment embeds with — before the port is bound.
    pub async fn open(
        url: &str,
        dimension: usize,
        settings: &PoolSettings,
    ) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|_| StoreError::Failed("DATABASE_URL is not a valid PostgreSQL URL".into()))?;
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
                StoreError::Failed(format!("cannot connect to PostgreSQL at {location}: {e}"))
            })?;
        let store = PostgresStore {
            pool,
            location,
            width: dimension,
            indexes: Indexes::default(),
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
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SCHEMA_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        let has_vector = sqlx::query("SELECT 1 FROM pg_extension WHERE extname = 'vector'")
            .fetch_optional(&mut *tx)
            .await
            .map_err(failed)?
            .is_some();
        if !has_vector {
            sqlx::query("CREATE EXTENSION IF NOT EXISTS vector")
                .execute(&mut *tx)
                .await
                .map_err(|e| {
                    StoreError::Failed(format!(
                        "the pgvector extension is not installed and this role may not create it: \
                         run `CREATE EXTENSION vector;` in database {} as a superuser, or use an \
                         image that ships it (pgvector/pgvector) — {e}",
                        self.location
                    ))
                })?;
        }
        if legacy::present(&mut tx).await.map_err(failed)? {
            let moved = legacy::migrate(&mut tx, SCHEMA).await?;
            println!("store: migrated {moved} memories from the v0.8 layout into the native table");
        }
        for statement in SCHEMA {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
        }
        for statement in cached::SCHEMA {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
        }
        index_terms(&mut tx).await.map_err(failed)?;
        let stored: Option<i32> =
            sqlx::query_scalar("SELECT vector_dims(embedding) FROM memories LIMIT 1")
                .fetch_optional(&mut *tx)
                .await
                .map_err(failed)?;
        if let Some(width) = stored.filter(|w| *w as usize != dimension) {
            return Err(StoreError::Dimension(format!(
                "the memories in {} are {width}-dimensional but EMBEDDING_DIM is {dimension}; \
                 use the model they were stored with, or re-embed them (or start from a fresh \
                 database) before changing models — nothing was altered",
                self.location
            )));
        }
        tx.commit().await.map_err(failed)
    }

    /// Starts a write to `tenant`: this process's other writes to it wait for this one, and
    /// the transaction holds the tenant's version row (one writer per tenant across
    /// replicas, for check-then-insert), so the write knows the version it moves on from.
    async fn begin_write(&self, tenant: &Tenant) -> Result<Write, StoreError> {
        let entry = cached::entry(&self.indexes, tenant.as_str());
        let turn = Arc::clone(&entry.writes).lock_owned().await;
        let mut tx = self.pool.begin().await.map_err(failed)?;
        let from = cached::lock_version(&mut *tx, tenant.as_str())
            .await
            .map_err(failed)?;
        Ok(Write {
            entry,
            _turn: turn,
            tx,
            from,
        })
    }

    /// `search` run on the tenant's index as of the committed version, rebuilt first if
    /// this process holds another (or none).
    async fn search<T>(
        &self,
        tenant: &Tenant,
        search: impl Fn(&SearchIndex) -> T,
    ) -> Result<T, StoreError> {
        let entry = cached::entry(&self.indexes, tenant.as_str());
        let committed = cached::version(&self.pool, tenant.as_str())
            .await
            .map_err(failed)?;
        if let Some(found) = entry.read_at(committed, &search) {
            return Ok(found);
        }
        // This process's writes wait meanwhile, so one in flight has applied by now and
        // none moves the index on; one rebuild at a time, and whoever waited for it may
        // find it done. A rebuilt index is as new as the version read above, or newer.
        let _turn = entry.writes.lock().await;
        let mut conn = self.pool.acquire().await.map_err(failed)?;
        let now = cached::version(&mut *conn, tenant.as_str())
            .await
            .map_err(failed)?;
        if entry.read_at(now, |_| ()).is_none() {
            self.rebuild(&entry, &mut conn, tenant, now).await?;
        }
        entry
            .read_held(&search)
            .ok_or_else(|| StoreError::Failed("the tenant's index was dropped".into()))
    }

    /// Builds the tenant's index from the database, labelled `version`: read before the
    /// rows (or locked by the caller's transaction), so the label is never newer than them.
    async fn rebuild(
        &self,
        entry: &TenantIndex,
        conn: &mut sqlx::PgConnection,
        tenant: &Tenant,
        version: i64,
    ) -> Result<(), StoreError> {
        let loaded = Versioned::load(conn, tenant.as_str(), self.width, version)
            .await
            .map_err(failed)?;
        entry.install(loaded);
        self.indexes.grown(tenant.as_str());
        Ok(())
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
            .bind(keywords::terms(&content))
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
    })
}

fn conversation_of(v: &Visibility) -> Option<&str> {
    v.conversation.as_ref().map(Conversation::as_str)
}

#[async_trait]
impl MemoryStore for PostgresStore {
    async fn remember(
        &self,
        tenant: &Tenant,
        memory: NewMemory,
        embedding: &[f32],
        dedup_scope: &Visibility,
    ) -> Result<Remembered, StoreError> {
        let mut write = self.begin_write(tenant).await?;
        let (entry, from) = (Arc::clone(&write.entry), write.from);
        if entry.read_at(from, |_| ()).is_none() {
            self.rebuild(&entry, &mut write.tx, tenant, from).await?;
        }
        let nearest = entry
            .read_at(from, |s| {
                nearest_found(s, embedding, dedup_scope, dedup::NEIGHBOURS)
            })
            .unwrap_or_default();
        let [nearest] = found_rows(&mut *write.tx, tenant, dedup_scope, [nearest]).await?;
        let neighbours: Vec<Hit> = nearest.into_iter().map(|found| found.hit).collect();
        if let Some(existing) = dedup::find_duplicate(&memory.content, &neighbours) {
            return Ok(Remembered::AlreadyKnown(Memory::clone(&existing.memory)));
        }
        let terms = keywords::terms(&memory.content);
        sqlx::query(
            "INSERT INTO memories (tenant_id, id, content, memory_type, category, tags, created_at, \
             scope, conversation, trust_base, embedding, terms) VALUES ($1, $2, $3, $4, $5, $6, \
             to_timestamp($7::double precision / 1000), $8, $9, 1, $10::vector, $11)",
        )
        .bind(tenant.as_str())
        .bind(&memory.id)
        .bind(&memory.content)
        .bind(memory.memory_type.as_str())
        .bind(memory.category.as_deref())
        .bind(&memory.tags)
        .bind(memory.created_at as f64)
        .bind(memory.scope.as_str())
        .bind(memory.conversation.as_ref().map(Conversation::as_str))
        .bind(vector_literal(embedding))
        .bind(&terms)
        .execute(&mut *write.tx)
        .await
        .map_err(failed)?;
        write.tx.commit().await.map_err(failed)?;
        let memory = memory.into_memory();
        // The trigger moved the tenant exactly one version on.
        entry.apply(from, from + 1, |search| {
            search.push(
                Entry {
                    id: &memory.id,
                    scope: memory.scope,
                    conversation: memory.conversation.as_ref().map(Conversation::as_str),
                },
                embedding,
                &terms,
            );
        });
        Ok(Remembered::Stored(memory))
    }

    async fn nearest(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        embedding: &[f32],
        k: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let found = self
            .search(tenant, |s| nearest_found(s, embedding, visibility, k))
            .await?;
        let [nearest] = found_rows(&self.pool, tenant, visibility, [found]).await?;
        Ok(nearest.into_iter().map(|found| found.hit).collect())
    }

    async fn keyword_hits(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        terms: &[String],
        embedding: &[f32],
        k: usize,
    ) -> Result<Vec<KeywordHit>, StoreError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        let found = self
            .search(tenant, |s| {
                match_ids(s, s.keyword_hits(terms, embedding, visibility, k))
            })
            .await?;
        let [by_words] = found_rows(&self.pool, tenant, visibility, [found]).await?;
        Ok(by_words)
    }

    async fn candidates(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        embedding: &[f32],
        terms: &[String],
        k: usize,
    ) -> Result<Candidates, StoreError> {
        let found = self
            .search(tenant, |s| {
                let (nearest, by_words) = s.candidates(embedding, terms, visibility, k);
                [nearest_ids(s, nearest), match_ids(s, by_words)]
            })
            .await?;
        let [nearest, by_words] = found_rows(&self.pool, tenant, visibility, found).await?;
        Ok(Candidates {
            nearest: nearest.into_iter().map(|found| found.hit).collect(),
            by_words,
        })
    }

    async fn list(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory_type: Option<MemoryType>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM memories WHERE tenant_id = $1 AND {VISIBLE} \
             AND ($3::text IS NULL OR memory_type = $3) \
             ORDER BY created_at DESC, id DESC LIMIT $4"
        ))
        .bind(tenant.as_str())
        .bind(conversation_of(visibility))
        .bind(memory_type.map(MemoryType::as_str))
        .bind(limit as i64)
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
        let mut write = self.begin_write(tenant).await?;
        let (entry, from) = (Arc::clone(&write.entry), write.from);
        let deleted = sqlx::query(&format!(
            "DELETE FROM memories WHERE tenant_id = $1 AND {VISIBLE} AND id = $3"
        ))
        .bind(tenant.as_str())
        .bind(conversation_of(visibility))
        .bind(id)
        .execute(&mut *write.tx)
        .await
        .map_err(failed)?
        .rows_affected()
            > 0;
        write.tx.commit().await.map_err(failed)?;
        if deleted {
            entry.apply(from, from + 1, |search| {
                search.remove(id);
            });
        }
        Ok(deleted)
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
             to_timestamp($4::double precision / 1000)) \
             WHERE tenant_id = $1 AND {VISIBLE} AND id = ANY($3::text[])"
        ))
        .bind(tenant.as_str())
        .bind(conversation_of(visibility))
        .bind(&ids)
        .bind(at as f64)
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.pool.close().await;
        Ok(())
    }

    fn describe(&self) -> String {
        format!("postgres at {}", self.location)
    }
}

#[cfg(test)]
pub(crate) mod tests;
