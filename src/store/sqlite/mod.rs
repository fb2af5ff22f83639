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
mod uses;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use builds::{Asked, Parts, Readers};
use index::{TenantIndex, Versions};
use uses::Pending;

use super::{After, Counts, Exported, Matches, MemoryStore, Portable, Remembered, StoreError};
use crate::dedup;
use crate::memory::{
    Conversation, Memory, MemoryType, Model, NewMemory, Scope, Tenant, Visibility,
};
use crate::search::cache::{Indexing, Interrupted, Slot, TenantCache};
use crate::search::{self, Query};

type Indexes = TenantCache<TenantIndex>;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memories (
  tenant_id        TEXT NOT NULL,
  id               TEXT NOT NULL,
  content          TEXT NOT NULL,
  memory_type      TEXT NOT NULL CHECK (memory_type IN ('project','pattern','reference','conversation')),
  category         TEXT,
  tags             TEXT NOT NULL DEFAULT '[]',
  created_at       INTEGER NOT NULL,
  scope            TEXT NOT NULL DEFAULT 'project' CHECK (scope IN ('project','conversation')),
  conversation     TEXT,
  trust_base       REAL NOT NULL DEFAULT 1,
  embedding        BLOB NOT NULL,
  access_count     INTEGER NOT NULL DEFAULT 0 CHECK (access_count >= 0),
  last_accessed_at INTEGER,
  terms            TEXT,
  replaces         TEXT,
  expires_at       INTEGER,
  PRIMARY KEY (tenant_id, id),
  CHECK (scope = 'project' OR conversation IS NOT NULL)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memories_recent_idx
  ON memories (tenant_id, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS memories_type_recent_idx
  ON memories (tenant_id, memory_type, created_at DESC, id DESC);
-- Each memory's uses since this table came, apart from the memory: counting a use rewrites
-- this small row, where an update of `memories` rewrote the memory with its embedding (its
-- cost is measured in BENCHMARKS.md, round 3). The columns in `memories`
-- keep what older releases counted, and still count what they count; a memory's count is
-- the sum of both, its last use the later (`COLUMNS`).
CREATE TABLE IF NOT EXISTS memory_uses (
  tenant_id        TEXT NOT NULL,
  id               TEXT NOT NULL,
  access_count     INTEGER NOT NULL DEFAULT 0,
  last_accessed_at INTEGER,
  PRIMARY KEY (tenant_id, id)
) WITHOUT ROWID;
-- Whoever deletes a memory (an older release too), its uses go with it.
CREATE TRIGGER IF NOT EXISTS memory_uses_follow_deletes AFTER DELETE ON memories BEGIN
  DELETE FROM memory_uses WHERE tenant_id = OLD.tenant_id AND id = OLD.id;
END;
-- Each tenant's two change signals (index.rs): `memories` moves with any change to a
-- memory's row, `uses` with any change to its counted uses, whoever makes it (another
-- process, an older release, an operator). Versions only grow.
CREATE TABLE IF NOT EXISTS memory_versions (
  tenant_id TEXT PRIMARY KEY,
  memories  INTEGER NOT NULL DEFAULT 0,
  uses      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
-- What the vectors are: `model` and `dimension`, recorded by the first write.
CREATE TABLE IF NOT EXISTS store_meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
";

/// The triggers that keep `memory_versions`: for each change to a table, whose tenant it
/// moves (the row before, after, or both) and which version.
const VERSIONED: [(&str, &str, &[&str], &str); 6] = [
    ("INSERT", "memories", &["NEW"], "memories"),
    ("DELETE", "memories", &["OLD"], "memories"),
    ("UPDATE", "memories", &["OLD", "NEW"], "memories"),
    ("INSERT", "memory_uses", &["NEW"], "uses"),
    ("UPDATE", "memory_uses", &["NEW"], "uses"),
    ("DELETE", "memory_uses", &["OLD"], "uses"),
];

/// `VERSIONED` as SQL, created with the schema.
fn version_triggers() -> String {
    let mut sql = String::new();
    for (event, table, rows, version) in VERSIONED {
        let done = match event {
            "INSERT" => "inserted",
            "DELETE" => "deleted",
            _ => "updated",
        };
        let name = format!("{table}_{done}_version");
        sql.push_str(&format!(
            "CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {table} BEGIN\n"
        ));
        for row in rows {
            sql.push_str(&format!(
                "  INSERT INTO memory_versions (tenant_id, {version}) VALUES ({row}.tenant_id, 1)\n\
                 ON CONFLICT (tenant_id) DO UPDATE SET {version} = {version} + 1;\n"
            ));
        }
        sql.push_str("END;\n");
    }
    sql
}

/// How long a statement waits for another process's lock on the file.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `?2` is the request's conversation or NULL, `?3` its instant (docs/behavior.md#visibility).
const VISIBLE: &str = "(scope = 'project' OR (?2 IS NOT NULL AND conversation = ?2)) \
     AND (expires_at IS NULL OR expires_at > ?3)";
/// A memory whole, read `FROM {MEMORIES}`: its counters add up both tables.
const COLUMNS: &str = "m.id, m.content, m.memory_type, m.category, m.tags, m.created_at, m.scope, \
     m.conversation, m.trust_base, m.access_count + coalesce(u.access_count, 0), \
     max(coalesce(m.last_accessed_at, u.last_accessed_at), \
         coalesce(u.last_accessed_at, m.last_accessed_at)), m.replaces, m.expires_at";
const MEMORIES: &str =
    "memories m LEFT JOIN memory_uses u ON u.tenant_id = m.tenant_id AND u.id = m.id";

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

/// This process's model, recorded in the file by its first write (`store_meta`).
struct Recorded {
    model: Model,
    location: String,
    done: std::sync::atomic::AtomicBool,
}

impl Recorded {
    /// Within a write transaction: records the model unless the file has one, and refuses
    /// the write if the file holds another (a process of another model wrote first, or
    /// `mcp-memory reembed` switched the file to another since this process opened it).
    fn check(&self, tx: &Connection) -> rusqlite::Result<Result<(), StoreError>> {
        if !self.done.load(std::sync::atomic::Ordering::Relaxed) {
            tx.execute(
                "INSERT OR IGNORE INTO store_meta (key, value) VALUES ('model', ?1), ('dimension', ?2)",
                params![self.model.name, self.model.dimension.to_string()],
            )?;
        }
        self.still_ours(tx)
    }

    /// Whether the file still records this process's model (or none): checked by every
    /// write, and before a tenant's index is built from the file's vectors.
    fn still_ours(&self, conn: &Connection) -> rusqlite::Result<Result<(), StoreError>> {
        let recorded = recorded_model(conn)?;
        Ok(StoreError::unless_same_model(
            &self.location,
            recorded,
            &self.model,
        ))
    }

    /// After the write committed.
    fn committed(&self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The model the file's vectors come from, as its first write recorded it.
fn recorded_model(conn: &Connection) -> rusqlite::Result<Option<Model>> {
    // One statement for both: every write of a vector reads them.
    let rows: Vec<(String, String)> = conn
        .prepare_cached("SELECT key, value FROM store_meta WHERE key IN ('model', 'dimension')")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Model::recorded(&rows))
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
            .optional()
            .map_err(failed)?;
        let location = path.display().to_string();
        let recorded = recorded_model(&conn).map_err(failed)?;
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

    /// Builds the tenant's index into `slot` on a blocking thread unless it shows the file's
    /// memories by then; the caller holds the tenant's turn (`Slot::writes`).
    async fn build(&self, tenant: &str, slot: &Arc<Slot<TenantIndex>>) -> Result<(), StoreError> {
        let _building = self.indexes.building().await;
        let (parts, slot, tenant) = (self.parts(), Arc::clone(slot), tenant.to_owned());
        blocking(move || parts.build(&tenant, &slot)).await
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
        blocking(move || work(&mut *lock(&conn)?, &indexes, width).map_err(failed)).await
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
        let index =
            TenantIndex::load(conn, tenant, width, now.uses, indexes.files()).map_err(failed)?;
        let waiting = pending.lock();
        index.count_waiting(waiting.get(tenant));
        held = Some(waiting);
        Ok(index)
    });
    drop(held);
    slot
}

/// Opens (creating if missing) the file, its schema up to date.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::unavailable(format!("cannot create {}", dir.display()), e))?;
    }
    let mut conn = Connection::open(path).map_err(failed)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(failed)?;
    into_wal(&conn).map_err(failed)?;
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(failed)?;
    // Searches never read rows, but every recall updates a few: 16 MiB of page cache
    // (the default is 2 MiB) keeps those pages in memory instead of re-reading them.
    conn.pragma_update(None, "cache_size", -16_384)
        .map_err(failed)?;
    // Under the write lock, so processes opening a new file at once create it once.
    let schema = format!("BEGIN IMMEDIATE;{SCHEMA}{}COMMIT;", version_triggers());
    conn.execute_batch(&schema).map_err(failed)?;
    upgrade(&mut conn).map_err(failed)?;
    Ok(conn)
}

/// Switches the file to WAL. The switch needs the file to itself and SQLite answers "busy"
/// at once instead of waiting (another process opening the file at the same moment), so it
/// is retried for as long as the busy timeout.
fn into_wal(conn: &Connection) -> rusqlite::Result<()> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            done => return done,
        }
    }
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

fn failed(e: rusqlite::Error) -> StoreError {
    StoreError::unavailable("SQLite", e)
}

fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_blob(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn memory_from_row(row: &Row) -> rusqlite::Result<Memory> {
    let tags: String = row.get(4)?;
    let scope: String = row.get(6)?;
    Ok(Memory {
        id: row.get(0)?,
        content: row.get(1)?,
        memory_type: MemoryType::parse(&row.get::<_, String>(2)?).unwrap_or(MemoryType::Project),
        category: row.get(3)?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        created_at: row.get(5)?,
        scope: Scope::parse(&scope).unwrap_or(Scope::Project),
        conversation: row
            .get::<_, Option<String>>(7)?
            .map(Conversation::new_unchecked),
        trust_base: row.get(8)?,
        access_count: row.get::<_, i64>(9)?.max(0) as u64,
        last_accessed_at: row.get(10)?,
        replaces: row.get(11)?,
        expires_at: row.get(12)?,
    })
}

/// Writes `memory` of `tenant` whole, its uses and times as it holds them, with `verb`
/// (`INSERT`, or `INSERT OR IGNORE` to keep a memory the file already holds); how many
/// rows it wrote.
fn insert(
    tx: &Connection,
    verb: &str,
    tenant: &str,
    m: &Memory,
    embedding: &[f32],
    terms: &[String],
) -> rusqlite::Result<usize> {
    tx.prepare_cached(&format!(
        "{verb} INTO memories (tenant_id, id, content, memory_type, category, tags, \
         created_at, scope, conversation, trust_base, embedding, access_count, \
         last_accessed_at, terms, replaces, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
         ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
    ))?
    .execute(params![
        tenant,
        m.id,
        m.content,
        m.memory_type.as_str(),
        m.category,
        serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into()),
        m.created_at,
        m.scope.as_str(),
        m.conversation.as_ref().map(|c| c.as_str()),
        m.trust_base,
        to_blob(embedding),
        i64::try_from(m.access_count).unwrap_or(i64::MAX),
        m.last_accessed_at,
        terms.join(" "),
        m.replaces,
        m.expires_at,
    ])
}

/// Brings a file an older release wrote up to date: the columns it lacks (`terms` came
/// with keyword recall, `replaces` with corrections, `expires_at` with expiry), the index
/// the expiry sweep reads, and every memory's terms.
fn upgrade(conn: &mut Connection) -> rusqlite::Result<()> {
    // Checked under the write lock: two processes opening an old file at once must not
    // both add a column.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for (column, kind) in [
        ("terms", "TEXT"),
        ("replaces", "TEXT"),
        ("expires_at", "INTEGER"),
    ] {
        let present: bool = tx
            .prepare("SELECT 1 FROM pragma_table_info('memories') WHERE name = ?1")?
            .exists([column])?;
        if !present {
            tx.execute_batch(&format!("ALTER TABLE memories ADD COLUMN {column} {kind}"))?;
        }
    }
    tx.execute_batch(
        "CREATE INDEX IF NOT EXISTS memories_expiry_idx ON memories (expires_at) \
         WHERE expires_at IS NOT NULL",
    )?;
    let unindexed: Vec<(String, String, String)> = tx
        .prepare("SELECT tenant_id, id, content FROM memories WHERE terms IS NULL")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    {
        let mut update =
            tx.prepare("UPDATE memories SET terms = ?3 WHERE tenant_id = ?1 AND id = ?2")?;
        for (tenant, id, content) in unindexed {
            update.execute(params![tenant, id, search::terms(&content).join(" ")])?;
        }
    }
    tx.commit()
}

fn conversation_of(v: &Visibility) -> Option<String> {
    v.conversation.as_ref().map(|c| c.as_str().to_owned())
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
        let (seen, at, dedup_scope) = (
            conversation_of(visibility),
            visibility.at,
            visibility.for_dedup(memory.scope),
        );
        let embedding = embedding.to_vec();
        let (recorded, pending) = (Arc::clone(&self.model), Arc::clone(&self.pending));
        self.with_conn(move |conn, indexes, width| {
            // IMMEDIATE takes the write lock first, so another process cannot slip the
            // same fact in between our check and our insert, or take the replaced memory.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Err(refused) = recorded.check(&tx)? {
                return Ok(Err(refused));
            }
            if let Some(id) = &memory.replaces {
                let visible = tx
                    .prepare_cached(&format!(
                        "SELECT 1 FROM memories WHERE tenant_id = ?1 AND {VISIBLE} AND id = ?4"
                    ))?
                    .exists(params![tenant, seen, at, id])?;
                if !visible {
                    return Ok(Err(StoreError::not_visible("replaces", id)));
                }
            }
            let before = Versions::read(&tx, &tenant)?;
            let slot = match current(&tx, indexes, &pending, &tenant, width, before, || Ok(())) {
                Ok(slot) => slot,
                Err(e) => return Ok(Err(e)),
            };
            let neighbours = slot
                .read_held(|index| index.nearest(&embedding, &dedup_scope, dedup::NEIGHBOURS))
                .unwrap_or_default();
            let similar = match dedup::judge(&memory, &neighbours, rule) {
                dedup::Verdict::Repeat(existing) => {
                    return Ok(Ok(Remembered::AlreadyKnown(Memory::clone(
                        &existing.memory,
                    ))));
                }
                dedup::Verdict::New { similar } => similar,
            };
            let terms = search::terms(&memory.content);
            let memory = memory.into_memory();
            insert(&tx, "INSERT", &tenant, &memory, &embedding, &terms)?;
            if let Some(id) = &memory.replaces {
                tx.execute(
                    "DELETE FROM memories WHERE tenant_id = ?1 AND id = ?2",
                    params![tenant, id],
                )?;
            }
            // The write lock is held: the only changes since `before` are this insert and
            // the delete of what it replaces.
            let after = Versions::read(&tx, &tenant)?;
            tx.commit()?;
            recorded.committed();
            indexes.apply(&tenant, &slot, before.memories, after.memories, |index| {
                if let Some(id) = &memory.replaces {
                    index.remove(id);
                }
                index.push(memory.clone(), &embedding, &terms)
            });
            Ok(Ok(Remembered::Stored(memory, similar)))
        })
        .await?
    }

    /// `search` of the tenant's index in `slot`, built first if it does not show the file.
    async fn search_slot(
        &self,
        tenant: &str,
        slot: &Arc<Slot<TenantIndex>>,
        asked: Asked,
    ) -> Result<Matches, StoreError> {
        // One hand-off when the index shows the file: the version is checked and the index
        // searched in the same blocking call (4 % more recalls/s at 10k memories than a
        // hand-off for each, BENCHMARKS.md, issue 15).
        let (parts, held, name) = (self.parts(), Arc::clone(slot), tenant.to_owned());
        let (asked, seen) = match blocking(move || parts.search(&name, &held, asked, false)).await?
        {
            Ok(matches) => return Ok(matches),
            Err(stale) => stale,
        };
        // One build of a tenant at a time: whoever waited for it finds it done, at the
        // version seen above or a newer one.
        let _turn = slot.writes.lock().await;
        if !slot.shows(seen) {
            self.build(tenant, slot).await?;
        }
        let (parts, held, name) = (self.parts(), Arc::clone(slot), tenant.to_owned());
        match blocking(move || parts.search(&name, &held, asked, true)).await? {
            Ok(matches) => Ok(matches),
            Err(_) => Err(Interrupted::Dropped.into()),
        }
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
        // This process's writes to the tenant come one at a time, after any build of its
        // index, which is read off the connection (`builds.rs`); within the transaction the
        // index is built again only if another process wrote since.
        let slot = self.indexes.slot(tenant.as_str());
        let _turn = slot.writes.lock().await;
        let built = match slot.holds_nothing() {
            true => self.build(tenant.as_str(), &slot).await,
            false => Ok(()),
        };
        let written = match built {
            Ok(()) => {
                self.write(tenant, visibility, memory, embedding, rule)
                    .await
            }
            Err(e) => Err(e),
        };
        self.indexes.release(tenant.as_str(), &slot);
        written
    }

    async fn search(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        query: &Query<'_>,
    ) -> Result<Matches, StoreError> {
        let asked = Asked {
            vector: query.vector.to_vec(),
            terms: query.terms.to_vec(),
            k: query.k,
            visibility: visibility.clone(),
        };
        let slot = self.indexes.slot(tenant.as_str());
        let answer = self.search_slot(tenant.as_str(), &slot, asked).await;
        if answer.is_err() {
            self.indexes.release(tenant.as_str(), &slot);
        }
        answer
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
                     access_count = access_count + 1, \
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
                            embedding: from_blob(row.get_ref(13)?.as_blob()?),
                            tenant: Tenant::new_unchecked(row.get(14)?),
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

    async fn expire(&self, at: i64, limit: usize) -> Result<usize, StoreError> {
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
            Ok(expired.len())
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use crate::memory::Scope;
    use crate::search::VectorHome;
    use crate::search::cache::Indexing;
    use crate::store::MemoryStore;
    use crate::store::suite::{self, T0, direction, note, seen_from, store_one, tenant};

    const IN_MEMORY: &Indexing = &Indexing::IN_MEMORY;

    /// A store in a new directory, whose indexes keep every exact vector in a mapped file.
    fn fresh() -> super::SqliteStore {
        let dir = tempfile::tempdir().unwrap();
        let mapped = Indexing {
            vectors: VectorHome::Files {
                dir: dir.path().to_owned(),
                chosen: true,
            },
            map_from: 0,
            ..Indexing::IN_MEMORY
        };
        let store = super::SqliteStore::open(
            &dir.path().join("nested/memory.db"),
            &suite::model(8),
            &mapped,
        )
        .unwrap();
        // Kept: the store's file and its vector files live in it.
        std::mem::forget(dir);
        store
    }

    /// The suite runs with every exact vector in a mapped file (`fresh`); the file is
    /// counted apart from the budget, the heap holds none of them, and a directory the
    /// operator named that cannot hold a file refuses the start by its variable.
    #[tokio::test]
    async fn exact_vectors_go_to_a_mapped_file_or_the_start_is_refused() {
        // One memory stored and found, exactly; what the store's indexes then hold.
        async fn one_found(store: &super::SqliteStore) -> crate::search::cache::Usage {
            let fact = note("one", T0, Scope::Project, None);
            store_one(store, "acme", fact, &direction(0, 0.0)).await;
            let query = crate::search::Query {
                vector: &direction(0, 0.0),
                terms: &[],
                k: 1,
            };
            let (acme, everyone) = (tenant("acme"), seen_from(None));
            let found = store.search(&acme, &everyone, &query).await.unwrap();
            assert_eq!(found.nearest[0].similarity, 1.0);
            store.index_usage().unwrap()
        }
        let mapped = one_found(&fresh()).await;
        assert!(mapped.mapped >= 8 * 4, "{mapped:?}");
        let dir = tempfile::tempdir().unwrap();
        let heap = super::SqliteStore::open(&dir.path().join("m.db"), &suite::model(8), IN_MEMORY);
        let on_heap = one_found(&heap.unwrap()).await;
        assert_eq!(on_heap.mapped, 0);
        // Eight values in a file: the index weighs only their 8-bit copy and the rest.
        assert!(mapped.bytes < on_heap.bytes, "{mapped:?} {on_heap:?}");

        let unusable = Indexing {
            vectors: VectorHome::Files {
                dir: "/nonexistent/vectors".into(),
                chosen: true,
            },
            ..Indexing::IN_MEMORY
        };
        let refused =
            super::SqliteStore::open(&dir.path().join("n.db"), &suite::model(8), &unusable)
                .err()
                .unwrap();
        assert!(
            refused.to_string().starts_with("INDEX_VECTORS_DIR"),
            "{refused}"
        );
    }

    #[tokio::test]
    async fn the_shared_suite() {
        suite::run(|| async { fresh() }).await;
        suite::run_keywords(|| async { fresh() }).await;
    }

    #[tokio::test]
    async fn memories_move_out_and_in_whole() {
        suite::run_portable(|| async { fresh() }).await;
    }

    #[tokio::test]
    async fn the_file_keeps_to_the_model_it_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        suite::run_model_record(|model| {
            let path = path.clone();
            async move { super::SqliteStore::open(&path, &model, IN_MEMORY) }
        })
        .await;
    }

    #[tokio::test]
    async fn the_file_is_reembedded_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        suite::run_reembed(
            |model| {
                let path = path.clone();
                async move { super::SqliteStore::open(&path, &model, IN_MEMORY) }
            },
            || {
                let path = path.clone();
                async move {
                    let run = super::reembed::Reembedder::open(&path).unwrap();
                    Box::new(run) as Box<dyn crate::store::reembed::Reembedding>
                }
            },
            true,
        )
        .await;
    }

    #[test]
    fn reopening_keeps_memories_and_refuses_another_width() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
            let m = note("kept", T0, Scope::Project, None);
            store_one(&store, "acme", m, &direction(0, 0.0)).await;
        });
        let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
        let listed = rt
            .block_on(store.list(&tenant("acme"), &seen_from(None), None, None, 5))
            .unwrap();
        assert_eq!(listed[0].content, "kept");
        let reopen = || {
            super::SqliteStore::open(&path, &suite::model(16), IN_MEMORY)
                .err()
                .unwrap()
                .to_string()
        };
        let err = reopen();
        assert!(err.contains("8d") && err.contains("16d"), "{err}");
        // A file from before models were recorded is still held to its vectors' width.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute("DELETE FROM store_meta", []).unwrap();
        let err = reopen();
        assert!(
            err.contains("8-dimensional") && err.contains("EMBEDDING_DIM is 16"),
            "{err}"
        );
    }

    /// Acme's five memories nearest to the first direction, as everyone sees them.
    async fn near(store: &super::SqliteStore) -> Vec<crate::memory::Hit> {
        let everyone = seen_from(None);
        suite::nearest(store, &tenant("acme"), &everyone, &direction(0, 0.0), 5)
            .await
            .unwrap()
    }

    async fn contents_near(store: &super::SqliteStore) -> Vec<String> {
        (near(store).await.into_iter())
            .map(|h| h.memory.content.clone())
            .collect()
    }

    async fn words(store: &super::SqliteStore, query: &str) -> usize {
        let terms = crate::search::query_terms(query);
        let found = suite::keyword_hits(
            store,
            &tenant("acme"),
            &seen_from(None),
            &terms,
            &direction(0, 0.0),
            5,
        )
        .await
        .unwrap();
        found.len()
    }

    /// Two processes sharing one file each keep an index in memory: a write by either is
    /// found, and a forget by either is gone, for both.
    #[tokio::test]
    async fn two_processes_sharing_a_file_see_each_others_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let (a, b) = (
            super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
            super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
        );
        store_one(
            &a,
            "acme",
            note("first", T0, Scope::Project, None),
            &direction(0, 0.0),
        )
        .await;
        assert_eq!(contents_near(&a).await, ["first"]);
        assert_eq!(contents_near(&b).await, ["first"]);
        let second = store_one(
            &b,
            "acme",
            note("second", T0 + 1, Scope::Project, None),
            &direction(0, 0.1),
        )
        .await;
        assert_eq!(contents_near(&a).await.len(), 2, "a sees b's write");
        assert!(
            a.delete(&tenant("acme"), &seen_from(None), &second.id)
                .await
                .unwrap()
        );
        assert_eq!(contents_near(&b).await, ["first"], "b sees a's forget");
        assert_eq!(words(&a, "second").await + words(&b, "second").await, 0);
        assert_eq!(words(&b, "first").await, 1);
    }

    async fn by_content(store: &super::SqliteStore) -> HashMap<String, Arc<crate::memory::Memory>> {
        let hits = near(store).await;
        (hits.into_iter())
            .map(|h| (h.memory.content.clone(), h.memory))
            .collect()
    }

    /// Another process's recalls change only counts: this process reads them again, and
    /// keeps its index (every memory it did not see used is the very same one).
    #[tokio::test]
    async fn another_process_counting_uses_does_not_rebuild_this_ones_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let (a, b) = (
            super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
            super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap(),
        );
        let (acme, everyone) = (tenant("acme"), seen_from(None));
        let used = store_one(
            &a,
            "acme",
            note("used", T0, Scope::Project, None),
            &direction(0, 0.0),
        )
        .await;
        store_one(
            &a,
            "acme",
            note("unused", T0 + 1, Scope::Project, None),
            &direction(1, 0.0),
        )
        .await;
        let before = by_content(&a).await;
        for at in 0..3 {
            b.record_access(&acme, &everyone, &[&used], T0 + 10 + at)
                .await
                .unwrap();
        }
        let after = by_content(&a).await;
        assert_eq!(
            (after["used"].access_count, after["used"].last_accessed_at),
            (3, Some(T0 + 12))
        );
        assert!(
            Arc::ptr_eq(&before["unused"], &after["unused"]),
            "the index was rebuilt for a change of counts"
        );
        // A's own count lands once, on top of B's; B reads it once A has written it.
        a.record_access(&acme, &everyone, &[&used], T0 + 20)
            .await
            .unwrap();
        assert_eq!(by_content(&a).await["used"].access_count, 4);
        a.flush().await.unwrap();
        assert_eq!(by_content(&b).await["used"].access_count, 4);
    }

    fn counts(memory: &crate::memory::Memory) -> (u64, Option<i64>) {
        (memory.access_count, memory.last_accessed_at)
    }

    /// A recall's uses wait in the process that counted them (written behind, `uses.rs`):
    /// its own searches and lists show them at once, another process once they are
    /// written, and another process's counts and writes meanwhile neither hide them nor
    /// count them twice.
    #[tokio::test]
    async fn uses_are_written_behind_and_add_up_across_processes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        // No timer writes while the test looks.
        let open = || {
            let hour = std::time::Duration::from_secs(3600);
            super::SqliteStore::open_writing_uses(&path, &suite::model(8), IN_MEMORY, hour)
        };
        let (a, b) = (open().unwrap(), open().unwrap());
        let (acme, everyone) = (tenant("acme"), seen_from(None));
        let used = store_one(
            &a,
            "acme",
            note("used", T0, Scope::Project, None),
            &direction(0, 0.0),
        )
        .await;
        // Both hold an index, so both count behind.
        by_content(&a).await;
        by_content(&b).await;
        a.record_access(&acme, &everyone, &[&used], T0 + 10)
            .await
            .unwrap();
        assert_eq!(counts(&by_content(&a).await["used"]), (1, Some(T0 + 10)));
        assert_eq!(
            counts(&by_content(&b).await["used"]),
            (0, None),
            "not yet written"
        );

        // B counts and writes while A's count waits: A reads B's and keeps its own.
        b.record_access(&acme, &everyone, &[&used], T0 + 20)
            .await
            .unwrap();
        b.flush().await.unwrap();
        assert_eq!(counts(&by_content(&a).await["used"]), (2, Some(T0 + 20)));

        // B stores a memory: A builds its index again from the file, its count still on top.
        store_one(
            &b,
            "acme",
            note("new", T0 + 1, Scope::Project, None),
            &direction(1, 0.0),
        )
        .await;
        a.record_access(&acme, &everyone, &[&used], T0 + 30)
            .await
            .unwrap();
        let rebuilt = by_content(&a).await;
        assert!(rebuilt.contains_key("new"));
        assert_eq!(counts(&rebuilt["used"]), (3, Some(T0 + 30)));

        // A lists: its counts are written first, and then they are the file's.
        let listed = a.list(&acme, &everyone, None, None, 5).await.unwrap();
        let listed = listed.iter().find(|m| m.id == used.id).unwrap();
        assert_eq!(counts(listed), (3, Some(T0 + 30)));
        assert_eq!(counts(&by_content(&b).await["used"]), (3, Some(T0 + 30)));
        assert_eq!(counts(&by_content(&a).await["used"]), (3, Some(T0 + 30)));
    }

    /// Waiting counts reach the file by themselves within about a second (`uses::EVERY`),
    /// and a process that dies before then loses at most those counts, never a memory.
    #[tokio::test]
    async fn waiting_uses_are_written_by_the_timer_and_a_crash_loses_only_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.db");
        let open = || super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
        let (a, b) = (open(), open());
        let (acme, everyone) = (tenant("acme"), seen_from(None));
        let used = store_one(
            &a,
            "acme",
            note("used", T0, Scope::Project, None),
            &direction(0, 0.0),
        )
        .await;
        by_content(&a).await;
        a.record_access(&acme, &everyone, &[&used], T0 + 10)
            .await
            .unwrap();
        let mut seen = 0;
        for _ in 0..100 {
            seen = by_content(&b).await["used"].access_count;
            if seen == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(seen, 1, "the timer never wrote the waiting count");

        // A process killed with a count waiting: no flush, no drop.
        a.record_access(&acme, &everyone, &[&used], T0 + 20)
            .await
            .unwrap();
        std::mem::forget(a);
        let reopened = open();
        let after = by_content(&reopened).await;
        assert_eq!(after.len(), 1, "the memory is kept");
        assert!(after["used"].access_count <= 2);
    }

    /// The triggers keep the names they were first created with: a file that has them is
    /// not given a second set.
    #[test]
    fn version_triggers_keep_their_names() {
        let sql = super::version_triggers();
        for name in [
            "memories_inserted_version",
            "memories_deleted_version",
            "memories_updated_version",
            "memory_uses_inserted_version",
            "memory_uses_updated_version",
            "memory_uses_deleted_version",
        ] {
            assert!(sql.contains(&format!("EXISTS {name} AFTER")), "{name}");
        }
        assert_eq!(sql.matches("CREATE TRIGGER").count(), 6);
    }

    /// Two processes opening a file from before keyword recall at the same moment both
    /// start: one adds the column, the other finds it.
    #[test]
    fn two_processes_opening_an_old_file_at_once_both_start() {
        for round in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(format!("old-{round}.db"));
            old_file(&path);
            let opened: Vec<_> = (0..2)
                .map(|_| {
                    let path = path.clone();
                    std::thread::spawn(move || {
                        super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).map(|_| ())
                    })
                })
                .collect();
            for opening in opened {
                let result = opening.join().unwrap();
                assert!(result.is_ok(), "{:?}", result.err().map(|e| e.to_string()));
            }
        }
    }

    /// Uses counted in the row (as older releases do) add to those counted now, a reopened
    /// file's index reads the same, and the uses leave with their memory.
    #[tokio::test]
    async fn counts_from_an_older_release_add_up_and_leave_with_the_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.db");
        let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
        let (acme, everyone) = (tenant("acme"), seen_from(None));
        let m = store_one(
            &store,
            "acme",
            note("use pnpm", T0, Scope::Project, None),
            &direction(0, 0.0),
        )
        .await;
        super::lock(&store.conn)
            .unwrap()
            .execute(
                "UPDATE memories SET access_count = access_count + 2, last_accessed_at = ?2 \
                 WHERE id = ?1",
                rusqlite::params![m.id, T0 + 50],
            )
            .unwrap();
        store
            .record_access(&acme, &everyone, &[&m], T0 + 10)
            .await
            .unwrap();
        store
            .record_access(&acme, &everyone, &[&m], T0 + 20)
            .await
            .unwrap();
        let listed = store.list(&acme, &everyone, None, None, 5).await.unwrap();
        assert_eq!(
            (listed[0].access_count, listed[0].last_accessed_at),
            (4, Some(T0 + 50))
        );
        let reopened = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
        let hits = suite::nearest(&reopened, &acme, &everyone, &direction(0, 0.0), 1)
            .await
            .unwrap();
        assert_eq!(
            (hits[0].memory.access_count, hits[0].memory.last_accessed_at),
            (4, Some(T0 + 50))
        );
        assert!(reopened.delete(&acme, &everyone, &m.id).await.unwrap());
        let uses: i64 = super::lock(&store.conn)
            .unwrap()
            .query_row("SELECT count(*) FROM memory_uses", [], |r| r.get(0))
            .unwrap();
        assert_eq!(uses, 0);
    }

    /// A file as the release before keyword recall left it, with one memory.
    fn old_file(path: &std::path::Path) {
        let conn = rusqlite::Connection::open(path).unwrap();
        // The previous release's table, exactly.
        conn.execute_batch(
            "CREATE TABLE memories (
                   tenant_id TEXT NOT NULL, id TEXT NOT NULL, content TEXT NOT NULL,
                   memory_type TEXT NOT NULL, category TEXT, tags TEXT NOT NULL DEFAULT '[]',
                   created_at INTEGER NOT NULL, scope TEXT NOT NULL DEFAULT 'project',
                   conversation TEXT, trust_base REAL NOT NULL DEFAULT 1,
                   embedding BLOB NOT NULL, access_count INTEGER NOT NULL DEFAULT 0,
                   last_accessed_at INTEGER, PRIMARY KEY (tenant_id, id)) WITHOUT ROWID;",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO memories (tenant_id, id, content, memory_type, created_at, embedding) \
                 VALUES ('acme', ?1, 'the cache is redis 7 on port 6380', 'project', ?2, ?3)",
            rusqlite::params![
                crate::memory::new_id(T0),
                T0,
                super::to_blob(&direction(0, 0.0))
            ],
        )
        .unwrap();
    }

    /// A file written before keyword recall existed gets its words at the next boot.
    #[tokio::test]
    async fn a_file_from_before_keyword_recall_is_indexed_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        old_file(&path);
        let store = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
        let found = suite::keyword_hits(
            &store,
            &tenant("acme"),
            &seen_from(None),
            &crate::search::query_terms("redis"),
            &direction(1, 0.0),
            5,
        )
        .await
        .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].hit.memory.content,
            "the cache is redis 7 on port 6380"
        );
        // Indexed once: opening again adds nothing twice.
        drop(store);
        let again = super::SqliteStore::open(&path, &suite::model(8), IN_MEMORY).unwrap();
        let stored = store_one(
            &again,
            "acme",
            note("redis backups run hourly", T0 + 1, Scope::Project, None),
            &direction(2, 0.0),
        )
        .await;
        assert!(
            again
                .delete(&tenant("acme"), &seen_from(None), &stored.id)
                .await
                .unwrap()
        );
        let after = suite::keyword_hits(
            &again,
            &tenant("acme"),
            &seen_from(None),
            &crate::search::query_terms("redis"),
            &direction(1, 0.0),
            5,
        )
        .await
        .unwrap();
        assert_eq!(
            after.len(),
            1,
            "the forgotten memory's words went with it: {after:?}"
        );
    }
}
