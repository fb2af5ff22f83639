//! The on-premises store: one native `memories` table in PostgreSQL with pgvector
//! (docs/stores.md#postgresql). The tenant and the request's visibility are in every
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
mod rows;
mod schema;
mod versions;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use sqlx::postgres::PgPool;
use sqlx::{Connection, Row};

use super::{
    After, Counts, Expired, Exported, Matches, MemoryStore, Portable, Remembered, StoreError, write,
};
use crate::dedup;
use crate::embed::Fit;
use crate::memory::{Hit, Memory, MemoryType, Model, NewMemory, Tenant, Visibility};
use crate::search::cache::{self, Building, Indexing, Slot, TenantCache, Version};
use crate::search::{self, Query, SearchIndex};
use rows::{
    COLUMNS, Located, VISIBLE, at_of, conversation_of, found_rows, insert, memory_from_row,
};
use schema::{connect, recorded_model};
use versions::Database;

/// Memories an import writes per statement.
const IMPORT_ROWS: usize = 250;

/// How the pool behaves; see docs/guide.md#on-premises-postgresql--pgvector.
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

/// A failed statement: one cut off by `DATABASE_STATEMENT_TIMEOUT_MS`, or no connection free in time, is
/// a timeout; anything else, the database unavailable.
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
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
}

/// A write under way (`begin_write`); this process's next write to the tenant waits until
/// it is dropped. Dropped uncommitted, it rolls back: a write that changed nothing leaves
/// no version row for a tenant that never wrote.
struct Write<'a> {
    slot: Arc<Slot<SearchIndex>>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
    /// A build's turn, taken before the transaction's connection when this process holds
    /// no index of the tenant (the order `search` takes them in, so neither waits on the
    /// other's); the write builds in its transaction (`remember`).
    building: Option<Building<'a>>,
    _taken: TakenSlot<'a>,
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    from: Version,
}

/// `remember`'s steps in a write (`begin_write`): the tenant's version row is held, so
/// nobody can write a repeat or take the replaced memory meanwhile.
struct Remembering<'a> {
    store: &'a PostgresStore,
    tenant: &'a Tenant,
    visibility: &'a Visibility,
    write: Write<'a>,
}

impl write::Steps for Remembering<'_> {
    type Found = String;

    async fn visible(&mut self, id: &str) -> Result<Option<String>, StoreError> {
        let visible: Option<i32> = sqlx::query_scalar(&format!(
            "SELECT 1 FROM memories WHERE tenant_id = $1 AND {VISIBLE} AND id = $4"
        ))
        .bind(self.tenant.as_str())
        .bind(conversation_of(self.visibility))
        .bind(at_of(self.visibility))
        .bind(id)
        .fetch_optional(&mut *self.write.tx)
        .await?;
        Ok(visible.map(|_| id.to_owned()))
    }

    async fn neighbours(
        &mut self,
        seen: &Visibility,
        vector: &[f32],
    ) -> Result<Vec<Hit>, StoreError> {
        let (store, tenant, write) = (self.store, self.tenant.as_str(), &mut self.write);
        let (slot, from) = (Arc::clone(&write.slot), write.from);
        if !slot.shows(from) {
            // In the turn `begin_write` took when this process held nothing; out of turn
            // when another replica wrote past what the change log still holds (rare: waiting
            // for a turn here, holding a connection, could leave a turn's builder waiting
            // for one).
            let _building =
                (write.building.take()).unwrap_or_else(|| store.indexes.building_out_of_turn());
            let files = store.indexes.files();
            let index = versions::load(&mut write.tx, tenant, store.width, files).await?;
            store.indexes.install(tenant, &slot, from, index);
        }
        let (scope, vector) = (seen.clone(), vector.to_vec());
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
        let [nearest] = found_rows(&mut *write.tx, self.tenant, seen, [nearest]).await?;
        Ok(nearest.into_iter().map(|found| found.hit).collect())
    }

    async fn insert(&mut self, stored: &write::Stored, vector: &[f32]) -> Result<(), StoreError> {
        let row = (
            self.tenant.as_str(),
            &stored.memory,
            vector,
            stored.terms.clone(),
        );
        (insert([row]).build().execute(&mut *self.write.tx)).await?;
        Ok(())
    }

    async fn delete(&mut self, id: String) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM memories WHERE tenant_id = $1 AND id = $2")
            .bind(self.tenant.as_str())
            .bind(id)
            .execute(&mut *self.write.tx)
            .await?;
        Ok(())
    }

    async fn commit(self, change: write::Change<'_>, vector: &[f32]) -> Result<(), StoreError> {
        let (tenant, mut write) = (self.tenant.as_str(), self.write);
        // The trigger moved the tenant one version on for each row written or deleted; a
        // tenant without a row starts one in an epoch of its own (`versions.rs`).
        let to = match write.from {
            0 => versions::first_version(&mut write.tx, tenant, change.rows()).await?,
            from => from + change.rows(),
        };
        write.tx.commit().await?;
        let store = self.store;
        (store.recorded).store(true, std::sync::atomic::Ordering::Relaxed);
        let apply = |index: &mut SearchIndex| change.apply(index, vector);
        (store.indexes).apply(tenant, &write.slot, write.from, to, apply);
        Ok(())
    }
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
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin().await?;
        schema::create_or_migrate(&mut tx, &self.location).await?;
        let stored: Option<i32> =
            sqlx::query_scalar("SELECT vector_dims(embedding) FROM memories LIMIT 1")
                .fetch_optional(&mut *tx)
                .await?;
        let recorded = recorded_model(&mut tx, "").await?;
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
        tx.commit().await.map_err(StoreError::from)
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
        let building = match with_vector && slot.holds_nothing() {
            true => Some(self.indexes.building().await),
            false => None,
        };
        let mut tx = self.pool.begin().await?;
        if with_vector {
            self.check_model(&mut tx).await?;
        }
        let from = versions::lock_version(&mut *tx, tenant.as_str()).await?;
        self.catch_up(&mut tx, tenant.as_str(), &slot, from, with_vector)
            .await?;
        Ok(Write {
            slot,
            _turn: turn,
            building,
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
        slot: &Arc<Slot<SearchIndex>>,
        to: Version,
        model_checked: bool,
    ) -> Result<(), StoreError> {
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
            let change = move |index: &mut SearchIndex| changes.apply(index);
            (self.indexes)
                .catch_up(tenant, slot, from, to, change)
                .await?;
        }
        Ok(())
    }
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
            .await?;
        }
        let recorded = recorded_model(tx, "FOR SHARE").await?;
        StoreError::unless_same_model(&self.database.location, recorded, &self.database.model)
    }
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
        let write = self.begin_write(tenant, true).await?;
        let steps = Remembering {
            store: self,
            tenant,
            visibility,
            write,
        };
        write::remember(steps, visibility, memory, embedding, rule).await
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
        // The memory listed last, at its own stored time when it is still there and visible
        // (a row an older release wrote may hold microseconds the cursor's milliseconds lack);
        // one the caller cannot see is never looked up, so a forged cursor tells nothing.
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM memories WHERE tenant_id = $1 AND {VISIBLE} \
             AND ($4::text IS NULL OR memory_type = $4) \
             AND ($6::bigint IS NULL OR (created_at, id) < (coalesce( \
               (SELECT created_at FROM memories WHERE tenant_id = $1 AND id = $7 AND {VISIBLE}), \
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
        .await?;
        rows.iter()
            .map(|r| memory_from_row(r).map_err(StoreError::from))
            .collect()
    }

    async fn get(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<Option<Memory>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM memories WHERE tenant_id = $1 AND {VISIBLE} AND id = $4"
        ))
        .bind(tenant.as_str())
        .bind(conversation_of(visibility))
        .bind(at_of(visibility))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(memory_from_row).transpose()?)
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
        .await?
        .rows_affected()
            > 0;
        if !deleted {
            return Ok(false);
        }
        write.tx.commit().await?;
        (self.indexes).apply(tenant.as_str(), &slot, from, from + 1, |index| {
            index.remove(id);
        });
        Ok(true)
    }

    async fn calibration(&self) -> Result<Option<Fit>, StoreError> {
        let text: Option<String> =
            sqlx::query_scalar("SELECT value FROM store_meta WHERE key = 'calibration'")
                .fetch_optional(&self.pool)
                .await?;
        (text.as_deref())
            .map(|text| super::read_fit(&self.database.location, text))
            .transpose()
    }

    async fn record_calibration(&self, fit: &Fit) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO store_meta VALUES ('calibration', $1) \
             ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        )
        .bind(super::fit_text(fit))
        .execute(&self.pool)
        .await?;
        Ok(())
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
        .await?;
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
            "UPDATE memories SET access_count = LEAST(access_count, 9007199254740991) + 1, \
             last_accessed_at = \
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
        .await?;
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
        .await?;
        let memories = (rows.iter())
            .map(|row| {
                Ok(Portable {
                    memory: memory_from_row(row)?,
                    embedding: row.try_get::<pgvector::Vector, _>("embedding")?.to_vec(),
                    tenant: Tenant::new_unchecked(row.try_get("tenant_id")?),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        Ok(Exported::by_tenant_and_id(memories, limit))
    }

    /// One transaction for the batch; the trigger moves each tenant written, so every
    /// replica's index of it is rebuilt at its next search.
    async fn import(&self, memories: &[Portable]) -> Result<usize, StoreError> {
        super::check_widths(memories, self.width)?;
        let mut tx = self.pool.begin().await?;
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
            written += (insert.build().execute(&mut *tx).await?).rows_affected() as usize;
        }
        tx.commit().await?;
        (self.recorded).store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(written)
    }

    /// Tenant by tenant, each as one of this process's writes, so its index follows.
    async fn expire(&self, at: i64, limit: usize) -> Result<Expired, StoreError> {
        let expired: Vec<(String, String)> = sqlx::query_as(
            "SELECT tenant_id, id FROM memories \
             WHERE expires_at <= to_timestamp($1::double precision / 1000) \
             ORDER BY expires_at LIMIT $2",
        )
        .bind(at as f64)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
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
            .await?;
            if gone.is_empty() {
                continue;
            }
            write.tx.commit().await?;
            let to = from + gone.len() as Version;
            (self.indexes).apply(tenant.as_str(), &slot, from, to, |index| {
                for id in &gone {
                    index.remove(id);
                }
            });
            deleted += gone.len();
        }
        Ok(Expired::of(deleted, expired.len(), limit))
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
