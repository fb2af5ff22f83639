//! The embedded store: one SQLite file, created if missing, in WAL mode. Nearest-neighbour
//! search is an exact cosine scan over the tenant's visible memories, which is what a
//! project's thousands of memories need (no approximate index can miss the neighbour dedup
//! depends on). Searches (the scan and keyword matching) answer from an in-memory index of
//! each tenant (`index.rs`), built from the file, with visibility applied there; listing and
//! counting stay in SQL, visibility in the statement. Each row keeps the terms `keywords`
//! makes, so every script matches by its words. Content is write-once; only counters change,
//! in a table of their own (`memory_uses`).

mod builds;
mod index;
pub mod reembed;
mod rows;
mod schema;
#[cfg(test)]
mod tests;
mod uses;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use futures_util::FutureExt;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use builds::{Parts, Readers};
use index::{TenantIndex, Versions};
use rows::{
    COLUMNS, MEMORIES, VISIBLE, WIDTH, conversation_of, from_blob, insert, memory_from_row,
};
use schema::{Recorded, connect, recorded_model};
use uses::Pending;

use super::write::{self, Indexed};
use super::{
    After, Counts, Expired, Exported, Matches, MemoryStore, Portable, Remembered, StoreError,
};
use crate::dedup;
use crate::embed::Fit;
use crate::memory::{Hit, Memory, MemoryType, Model, NewMemory, Tenant, Visibility};
use crate::search::cache::{Coherence, Indexing, Slot, TenantCache};
use crate::search::{self, Query};

type Indexes = TenantCache<TenantIndex>;

pub struct SqliteStore {
    path: PathBuf,
    // One connection: SQLite serialises writers anyway, and the lock makes dedup's
    // check-then-insert atomic within the process (the write transaction covers other
    // processes sharing the file). Builds read on their own (`builds.rs`, with the lock
    // order every path keeps).
    conn: Arc<Mutex<Connection>>,
    readers: Arc<Readers>,
    indexes: Arc<Indexes>,
    /// Uses counted in the indexes and not yet in the file (`uses.rs`).
    pending: Arc<Pending>,
    width: usize,
    /// The model this process embeds with, and whether the file is known to record it.
    model: Arc<Recorded>,
}

impl SqliteStore {
    /// Opens (creating if missing) the file and its schema, and checks that stored vectors
    /// come from `model` (or, in a file from before models were recorded, have its width);
    /// the tenants' indexes are kept as `indexing` says.
    pub fn open(path: &Path, model: &Model, indexing: &Indexing) -> Result<Self, StoreError> {
        Self::open_writing_uses(path, model, indexing, uses::EVERY)
    }

    /// `open`, its waiting uses written every `every`.
    fn open_writing_uses(
        path: &Path,
        model: &Model,
        indexing: &Indexing,
        every: std::time::Duration,
    ) -> Result<Self, StoreError> {
        let dimension = model.dimension;
        let conn = connect(path)?;
        let stored_width: Option<usize> = conn
            .query_row(
                "SELECT length(embedding) / 4 FROM memories LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?;
        let location = path.display().to_string();
        let recorded = recorded_model(&conn)?;
        StoreError::unless_same_model(&location, recorded.clone(), model)?;
        if let Some(width) = stored_width.filter(|w| *w != dimension) {
            return Err(StoreError::Dimension {
                location,
                stored: width,
                configured: dimension,
            });
        }
        let indexes = super::tenant_indexes(indexing)?;
        let (conn, indexes, pending) = (
            Arc::new(Mutex::new(conn)),
            Arc::new(indexes),
            Arc::default(),
        );
        uses::start(&conn, &pending, &indexes, every);
        Ok(SqliteStore {
            path: path.to_owned(),
            conn,
            readers: Arc::new(Readers::new(path)),
            indexes,
            pending,
            width: dimension,
            model: Arc::new(Recorded {
                model: model.clone(),
                location,
                done: std::sync::atomic::AtomicBool::new(recorded.is_some()),
            }),
        })
    }

    fn parts(&self) -> Parts {
        Parts {
            conn: Arc::clone(&self.conn),
            readers: Arc::clone(&self.readers),
            indexes: Arc::clone(&self.indexes),
            pending: Arc::clone(&self.pending),
            width: self.width,
            model: Arc::clone(&self.model),
        }
    }

    /// Builds the tenant's index into `slot` in a build's turn unless another call built
    /// one meanwhile; the caller holds the tenant's turn (`Slot::writes`).
    async fn build(&self, tenant: &str, slot: &Arc<Slot<TenantIndex>>) -> Result<(), StoreError> {
        if !slot.holds_nothing() {
            return Ok(());
        }
        let _building = self.indexes.building().await;
        Coherence::build(&self.parts(), &self.indexes, tenant, slot).await
    }

    /// Runs blocking SQLite work off the async runtime, holding the connection; `work`
    /// also gets the tenant indexes and the vector width.
    async fn with_conn<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection, &Indexes, usize) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (conn, indexes, width) = (
            Arc::clone(&self.conn),
            Arc::clone(&self.indexes),
            self.width,
        );
        blocking(move || work(&mut *lock(&conn)?, &indexes, width).map_err(StoreError::from)).await
    }

    /// `with_conn` once the counts waiting in this process are in the file: for work that
    /// reads counts from it.
    async fn with_counts_written<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection, &Indexes, usize) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let pending = Arc::clone(&self.pending);
        self.with_conn(move |conn, indexes, width| {
            uses::flush(conn, &pending, indexes)?;
            work(conn, indexes, width)
        })
        .await
    }
}

impl Drop for SqliteStore {
    /// The counts still waiting reach the file: a command's store, a test's, any let go
    /// without `flush`.
    fn drop(&mut self) {
        let Ok(mut conn) = self.conn.lock() else {
            return;
        };
        if let Err(e) = uses::flush(&mut conn, &self.pending, &self.indexes) {
            let fields = crate::log::Fields::default();
            crate::log::error("stats_final_flush_failed", &e.to_string(), &fields);
        }
    }
}

/// The tenant's slot showing `now`, built from the file (once `check` passes) if this
/// process holds none of that version; its counts are the file's and those still waiting.
fn current(
    conn: &Connection,
    indexes: &Indexes,
    pending: &Pending,
    tenant: &str,
    width: usize,
    now: Versions,
    check: impl FnOnce() -> Result<(), StoreError>,
) -> Result<Arc<Slot<TenantIndex>>, StoreError> {
    // The waiting counts stay locked until the new index is in place, so a use counted
    // meanwhile lands in it rather than in the index it replaces.
    let mut held = None;
    let slot = indexes.current(tenant, now.memories, || {
        check()?;
        let index = TenantIndex::load(conn, tenant, width, now.uses, indexes.files())?;
        let waiting = pending.lock();
        index.count_waiting(waiting.get(tenant));
        held = Some(waiting);
        Ok(index)
    });
    drop(held);
    slot
}

/// Runs blocking work off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::unavailable("SQLite task", e))?
}

fn lock(conn: &Mutex<Connection>) -> Result<MutexGuard<'_, Connection>, StoreError> {
    conn.lock()
        .map_err(|_| StoreError::unavailable("SQLite", "the connection was poisoned"))
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::unavailable("SQLite", e)
    }
}

impl SqliteStore {
    /// The write of `remember`, in one transaction on the connection.
    async fn write(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory: NewMemory,
        embedding: &[f32],
        rule: dedup::Rule,
    ) -> Result<Remembered, StoreError> {
        let tenant = tenant.as_str().to_owned();
        let visibility = visibility.clone();
        let embedding = embedding.to_vec();
        let (recorded, pending) = (Arc::clone(&self.model), Arc::clone(&self.pending));
        self.with_conn(move |conn, indexes, width| {
            // IMMEDIATE takes the write lock first, so another process cannot slip the
            // same fact in between our check and our insert, or take the replaced memory.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Err(refused) = recorded.check(&tx)? {
                return Ok(Err(refused));
            }
            let before = Versions::read(&tx, &tenant)?;
            let slot = match current(&tx, indexes, &pending, &tenant, width, before, || Ok(())) {
                Ok(slot) => slot,
                Err(e) => return Ok(Err(e)),
            };
            let steps = Transaction {
                tx,
                tenant: &tenant,
                visibility: &visibility,
                slot,
                before,
                indexes,
                recorded: &recorded,
            };
            let written = write::remember(steps, &visibility, memory, &embedding, rule);
            Ok(written.now_or_never().expect("SQLite's steps never wait"))
        })
        .await?
    }
}

/// A write's steps in one IMMEDIATE transaction, the connection held.
struct Transaction<'a> {
    tx: rusqlite::Transaction<'a>,
    tenant: &'a str,
    visibility: &'a Visibility,
    slot: Arc<Slot<TenantIndex>>,
    before: Versions,
    indexes: &'a Indexes,
    recorded: &'a Recorded,
}

impl write::Steps for Transaction<'_> {
    type Found = String;

    async fn visible(&mut self, id: &str) -> Result<Option<String>, StoreError> {
        let (seen, at) = (conversation_of(self.visibility), self.visibility.at);
        let visible = (self.tx)
            .prepare_cached(&format!(
                "SELECT 1 FROM memories WHERE tenant_id = ?1 AND {VISIBLE} AND id = ?4"
            ))?
            .exists(params![self.tenant, seen, at, id])?;
        Ok(visible.then(|| id.to_owned()))
    }

    async fn neighbours(
        &mut self,
        seen: &Visibility,
        vector: &[f32],
    ) -> Result<Vec<Hit>, StoreError> {
        let nearest = |index: &TenantIndex| index.nearest(vector, seen, dedup::NEIGHBOURS);
        Ok(self.slot.read_held(nearest).unwrap_or_default())
    }

    async fn insert(&mut self, stored: &write::Stored, vector: &[f32]) -> Result<(), StoreError> {
        let (memory, terms) = (&stored.memory, &stored.terms);
        insert(&self.tx, "INSERT", self.tenant, memory, vector, terms)?;
        Ok(())
    }

    async fn delete(&mut self, id: String) -> Result<(), StoreError> {
        (self.tx).execute(
            "DELETE FROM memories WHERE tenant_id = ?1 AND id = ?2",
            params![self.tenant, id],
        )?;
        Ok(())
    }

    async fn commit(self, change: write::Change<'_>, vector: &[f32]) -> Result<(), StoreError> {
        // The write lock is held: the only changes since `before` are this write's (a
        // tenant's first row starts past its floor, `schema.rs`, so it is read back).
        let after = Versions::read(&self.tx, self.tenant)?.memories;
        self.tx.commit()?;
        self.recorded.committed();
        let apply = |index: &mut TenantIndex| change.apply(index, vector);
        (self.indexes).apply(self.tenant, &self.slot, self.before.memories, after, apply);
        Ok(())
    }
}

#[async_trait]
impl MemoryStore for SqliteStore {
    async fn remember(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory: NewMemory,
        embedding: &[f32],
        rule: dedup::Rule,
    ) -> Result<Remembered, StoreError> {
        // A tenant this process holds no index of is built first, in turn and off the
        // connection (`builds.rs`), so no write builds one holding the connection every call
        // waits on. Otherwise the write goes straight to the connection, which orders this
        // process's writes: a turn held across it too kept 8 writers of one tenant to half
        // their rate (BENCHMARKS.md, "Issue 32: the load benchmark, A/B"). Within the
        // transaction the index is built again only if another process wrote since.
        let slot = self.indexes.slot(tenant.as_str());
        if slot.holds_nothing() {
            let _turn = slot.writes.lock().await;
            if let Err(e) = self.build(tenant.as_str(), &slot).await {
                self.indexes.release(tenant.as_str(), &slot);
                return Err(e);
            }
        }
        let written = (self.write(tenant, visibility, memory, embedding, rule)).await;
        self.indexes.release(tenant.as_str(), &slot);
        written
    }

    async fn search(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        query: &Query<'_>,
    ) -> Result<Matches, StoreError> {
        let (vector, terms, k) = (query.vector.to_vec(), query.terms.to_vec(), query.k);
        let seen = visibility.clone();
        let search = move |index: &TenantIndex| {
            let query = Query {
                vector: &vector,
                terms: &terms,
                k,
            };
            index.search(&query, &seen)
        };
        (self.indexes.search(&self.parts(), tenant.as_str(), search)).await
    }

    async fn list(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory_type: Option<MemoryType>,
        after: Option<&After>,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let tenant = tenant.as_str().to_owned();
        let (seen, at) = (conversation_of(visibility), visibility.at);
        let memory_type = memory_type.map(MemoryType::as_str);
        let after = after.map(|a| (a.created_at, a.id.clone()));
        self.with_counts_written(move |conn, _, _| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM {MEMORIES} WHERE m.tenant_id = ?1 AND {VISIBLE} \
                 AND (?4 IS NULL OR m.memory_type = ?4) \
                 AND (?6 IS NULL OR (m.created_at, m.id) < (?6, ?7)) \
                 ORDER BY m.created_at DESC, m.id DESC LIMIT ?5"
            ))?;
            let (after_at, after_id) = after.unzip();
            stmt.query_map(
                params![
                    tenant,
                    seen,
                    at,
                    memory_type,
                    limit as i64,
                    after_at,
                    after_id
                ],
                memory_from_row,
            )?
            .collect()
        })
        .await
    }

    async fn get(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<Option<Memory>, StoreError> {
        let tenant = tenant.as_str().to_owned();
        let (seen, at) = (conversation_of(visibility), visibility.at);
        let id = id.to_owned();
        self.with_counts_written(move |conn, _, _| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM {MEMORIES} WHERE m.tenant_id = ?1 AND {VISIBLE} \
                 AND m.id = ?4"
            ))?;
            let mut rows = stmt.query_map(params![tenant, seen, at, id], memory_from_row)?;
            rows.next().transpose()
        })
        .await
    }

    async fn delete(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<bool, StoreError> {
        let tenant = tenant.as_str().to_owned();
        let (seen, at) = (conversation_of(visibility), visibility.at);
        let id = id.to_owned();
        self.with_conn(move |conn, indexes, _| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let before = Versions::read(&tx, &tenant)?;
            let deleted = tx.execute(
                &format!("DELETE FROM memories WHERE tenant_id = ?1 AND {VISIBLE} AND id = ?4"),
                params![tenant, seen, at, id],
            )? > 0;
            let after = Versions::read(&tx, &tenant)?;
            tx.commit()?;
            if let Some(slot) = indexes.held(&tenant).filter(|_| deleted) {
                indexes.apply(&tenant, &slot, before.memories, after.memories, |index| {
                    index.remove(&id);
                    // Its uses went with it, and nothing else changed.
                    index.moved_uses(before.uses, after.uses);
                });
            }
            Ok(deleted)
        })
        .await
    }

    async fn count_by_type(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
    ) -> Result<Counts, StoreError> {
        let tenant = tenant.as_str().to_owned();
        let (seen, at) = (conversation_of(visibility), visibility.at);
        let tallies = self
            .with_conn(move |conn, _, _| {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT memory_type, count(*) FROM memories \
                     WHERE tenant_id = ?1 AND {VISIBLE} GROUP BY memory_type"
                ))?;
                stmt.query_map(params![tenant, seen, at], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        Ok(Counts::from_type_names(tallies))
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
        if let Some(slot) = self.indexes.held(tenant.as_str()) {
            // Counted in the index and left for the timer to write (`uses.rs`).
            let mut pending = self.pending.lock();
            if let Some(counted) = slot.read_held(|index| index.count_uses(visibility, &ids, at)) {
                let waiting = pending.entry(tenant.as_str().to_owned()).or_default();
                for id in counted {
                    uses::add(waiting.entry(id.clone()).or_default(), 1, Some(at));
                }
                return Ok(());
            }
        }
        // This process holds no index of the tenant (let go since the search): the uses
        // are written at once, visibility checked in the statement.
        let tenant = tenant.as_str().to_owned();
        let visibility = visibility.clone();
        self.with_conn(move |conn, indexes, _| {
            let seen = conversation_of(&visibility);
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let before = Versions::read(&tx, &tenant)?;
            {
                let mut stmt = tx.prepare_cached(&format!(
                    "INSERT INTO memory_uses (tenant_id, id, access_count, last_accessed_at) \
                     SELECT tenant_id, id, 1, ?5 FROM memories \
                     WHERE tenant_id = ?1 AND {VISIBLE} AND id = ?4 \
                     ON CONFLICT (tenant_id, id) DO UPDATE SET \
                     access_count = min(access_count, 9007199254740991) + 1, \
                     last_accessed_at = max(coalesce(last_accessed_at, ?5), ?5)"
                ))?;
                for id in &ids {
                    stmt.execute(params![tenant, seen, visibility.at, id, at])?;
                }
            }
            let after = Versions::read(&tx, &tenant)?;
            tx.commit()?;
            if let Some(slot) = indexes.held(&tenant) {
                // An index built since: counts that were already behind are read again at
                // the next search, this write included; counting it here too would count it
                // twice.
                slot.read_held(|index| {
                    if index.uses() == before.uses {
                        index.count_uses(&visibility, &ids, at);
                        index.moved_uses(before.uses, after.uses);
                    }
                });
            }
            Ok(())
        })
        .await
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
        let only = serde_json::to_string(&only).unwrap_or_else(|_| "[]".into());
        // Always a range of the primary key: an optional cursor made SQLite scan the table
        // for every page.
        let (after_tenant, after_id) = Exported::after_tenant_and_id(from);
        let (after_tenant, after_id) = (after_tenant.to_owned(), after_id.to_owned());
        let memories = self
            .with_counts_written(move |conn, _, _| {
                let mut stmt = conn.prepare_cached(&format!(
                    "SELECT {COLUMNS}, m.embedding, m.tenant_id FROM {MEMORIES} \
                     WHERE (json_array_length(?1) = 0 \
                       OR m.tenant_id IN (SELECT value FROM json_each(?1))) \
                     AND (m.expires_at IS NULL OR m.expires_at > ?2) \
                     AND (m.tenant_id, m.id) > (?3, ?4) \
                     ORDER BY m.tenant_id, m.id LIMIT ?5"
                ))?;
                let rows = stmt.query_map(
                    params![only, at, after_tenant, after_id, limit as i64],
                    |row| {
                        Ok(Portable {
                            memory: memory_from_row(row)?,
                            embedding: from_blob(row.get_ref(WIDTH)?.as_blob()?),
                            tenant: Tenant::new_unchecked(row.get(WIDTH + 1)?),
                        })
                    },
                )?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        Ok(Exported::by_tenant_and_id(memories, limit))
    }

    async fn import(&self, memories: &[Portable]) -> Result<usize, StoreError> {
        super::check_widths(memories, self.width)?;
        let memories = memories.to_vec();
        let recorded = Arc::clone(&self.model);
        self.with_conn(move |conn, _, _| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Err(refused) = recorded.check(&tx)? {
                return Ok(Err(refused));
            }
            let mut written = 0;
            for p in &memories {
                let terms = search::terms(&p.memory.content);
                let (tenant, verb) = (p.tenant.as_str(), "INSERT OR IGNORE");
                written += insert(&tx, verb, tenant, &p.memory, &p.embedding, &terms)?;
            }
            tx.commit()?;
            recorded.committed();
            Ok(Ok(written))
        })
        .await?
    }

    async fn expire(&self, at: i64, limit: usize) -> Result<Expired, StoreError> {
        self.with_conn(move |conn, indexes, _| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let expired: Vec<(String, String)> = tx
                .prepare_cached(
                    "SELECT tenant_id, id FROM memories WHERE expires_at <= ?1 \
                     ORDER BY expires_at LIMIT ?2",
                )?
                .query_map(params![at, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let mut by_tenant: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (tenant, id) in &expired {
                by_tenant.entry(tenant).or_default().push(id);
            }
            let mut moved = Vec::with_capacity(by_tenant.len());
            for (tenant, ids) in by_tenant {
                let before = Versions::read(&tx, tenant)?;
                let mut delete =
                    tx.prepare_cached("DELETE FROM memories WHERE tenant_id = ?1 AND id = ?2")?;
                for id in &ids {
                    delete.execute(params![tenant, id])?;
                }
                moved.push((tenant, ids, before, Versions::read(&tx, tenant)?));
            }
            tx.commit()?;
            for (tenant, ids, before, after) in moved {
                if let Some(slot) = indexes.held(tenant) {
                    indexes.apply(tenant, &slot, before.memories, after.memories, |index| {
                        for id in &ids {
                            index.remove(id);
                        }
                        index.moved_uses(before.uses, after.uses);
                    });
                }
            }
            Ok(Expired::of(expired.len(), expired.len(), limit))
        })
        .await
    }

    async fn calibration(&self) -> Result<Option<Fit>, StoreError> {
        let text: Option<String> = self
            .with_conn(|conn, _, _| {
                conn.query_row(
                    "SELECT value FROM store_meta WHERE key = 'calibration'",
                    [],
                    |r| r.get(0),
                )
                .optional()
            })
            .await?;
        (text.as_deref())
            .map(|text| super::read_fit(&self.model.location, text))
            .transpose()
    }

    async fn record_calibration(&self, fit: &Fit) -> Result<(), StoreError> {
        let text = super::fit_text(fit);
        self.with_conn(move |conn, _, _| {
            conn.execute(
                "INSERT OR REPLACE INTO store_meta (key, value) VALUES ('calibration', ?1)",
                [text],
            )
            .map(drop)
        })
        .await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        // The waiting counts, then the WAL folded back into the main file so a copied .db
        // is complete on its own.
        self.with_counts_written(|conn, _, _| {
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        })
        .await
    }

    fn describe(&self) -> String {
        format!("sqlite at {}", self.path.display())
    }

    fn index_usage(&self) -> Option<crate::search::cache::Usage> {
        Some(self.indexes.usage())
    }
}
