//! The file's layout: the schema and its version triggers, opening a file (WAL, its
//! pragmas, an older release's file brought up to date), and the model the file records.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior, params};

use crate::memory::Model;
use crate::search;
use crate::store::StoreError;

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
  author           TEXT,
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
-- process, an older release, an operator). A tenant's versions only grow, past the
-- removal of its row with its last memory too (`version_triggers`).
CREATE TABLE IF NOT EXISTS memory_versions (
  tenant_id TEXT PRIMARY KEY,
  memories  INTEGER NOT NULL DEFAULT 0,
  uses      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
-- The highest version a tenant's row had when its last memory went (`NEW_VERSION`).
CREATE TABLE IF NOT EXISTS memory_version_floor (
  id    INTEGER PRIMARY KEY CHECK (id = 0),
  floor INTEGER NOT NULL
);
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

/// Where a tenant's new version row starts: past every version a tenant whose last memory
/// went ever had (`memory_version_floor`), so an index labelled in a tenant's past never
/// matches its present.
pub(super) const NEW_VERSION: &str =
    "(SELECT coalesce(max(floor), 0) FROM memory_version_floor) + 1";

/// `VERSIONED` as SQL, made again with the schema at every open (a file keeps its
/// triggers' names, and gets their bodies of this release). A tenant's version row goes
/// with its last memory, its log of uses with it, so a flood of short-lived tenants leaves
/// nothing behind; the floor keeps what that row had reached.
pub(super) fn version_triggers() -> String {
    let mut sql = String::new();
    for (event, table, rows, version) in VERSIONED {
        let done = match event {
            "INSERT" => "inserted",
            "DELETE" => "deleted",
            _ => "updated",
        };
        let name = format!("{table}_{done}_version");
        sql.push_str(&format!(
            "DROP TRIGGER IF EXISTS {name};\n\
             CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN\n"
        ));
        for row in rows {
            sql.push_str(&match (table, event) {
                // A memory's uses go after it, when its tenant's row may be gone already:
                // they move a row that is there, and make none.
                ("memory_uses", "DELETE") => format!(
                    "  UPDATE memory_versions SET {version} = {version} + 1 \
                     WHERE tenant_id = {row}.tenant_id;\n"
                ),
                ("memories", _) => format!(
                    "  INSERT INTO memory_versions (tenant_id, memories) \
                     VALUES ({row}.tenant_id, {NEW_VERSION})\n\
                     ON CONFLICT (tenant_id) DO UPDATE SET {version} = {version} + 1;\n"
                ),
                _ => format!(
                    "  INSERT INTO memory_versions (tenant_id, memories, uses) \
                     VALUES ({row}.tenant_id, {NEW_VERSION}, 1)\n\
                     ON CONFLICT (tenant_id) DO UPDATE SET {version} = {version} + 1;\n"
                ),
            });
        }
        if (table, event) == ("memories", "DELETE") {
            sql.push_str(
                "  INSERT INTO memory_version_floor (id, floor) \
                 SELECT 0, memories FROM memory_versions WHERE tenant_id = OLD.tenant_id \
                 AND NOT EXISTS (SELECT 1 FROM memories WHERE tenant_id = OLD.tenant_id)\n\
                 ON CONFLICT (id) DO UPDATE SET floor = max(floor, excluded.floor);\n\
                 DELETE FROM memory_versions WHERE tenant_id = OLD.tenant_id \
                 AND NOT EXISTS (SELECT 1 FROM memories WHERE tenant_id = OLD.tenant_id);\n",
            );
        }
        sql.push_str("END;\n");
    }
    sql
}

/// How long a statement waits for another process's lock on the file.
pub(super) const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens (creating if missing) the file, its schema up to date.
pub(super) fn connect(path: &Path) -> Result<Connection, StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::unavailable(format!("cannot create {}", dir.display()), e))?;
    }
    let mut conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    into_wal(&conn)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Searches never read rows, but every recall updates a few: 16 MiB of page cache
    // (the default is 2 MiB) keeps those pages in memory instead of re-reading them.
    conn.pragma_update(None, "cache_size", -16_384)?;
    // Under the write lock, so processes opening a new file at once create it once.
    let schema = format!("BEGIN IMMEDIATE;{SCHEMA}{}COMMIT;", version_triggers());
    conn.execute_batch(&schema)?;
    upgrade(&mut conn)?;
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

/// Brings a file an older release wrote up to date: the columns it lacks (`terms` came
/// with keyword recall, `replaces` with corrections, `expires_at` with expiry, `author` with
/// credentials), the index
/// the expiry sweep reads, and every memory's terms.
fn upgrade(conn: &mut Connection) -> rusqlite::Result<()> {
    // Checked under the write lock: two processes opening an old file at once must not
    // both add a column.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for (column, kind) in [
        ("terms", "TEXT"),
        ("replaces", "TEXT"),
        ("expires_at", "INTEGER"),
        ("author", "TEXT"),
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

/// This process's model, recorded in the file by its first write (`store_meta`).
pub(super) struct Recorded {
    pub(super) model: Model,
    pub(super) location: String,
    pub(super) done: std::sync::atomic::AtomicBool,
}

impl Recorded {
    /// Within a write transaction: records the model unless the file has one, and refuses
    /// the write if the file holds another (a process of another model wrote first, or
    /// `mcp-memory reembed` switched the file to another since this process opened it).
    pub(super) fn check(&self, tx: &Connection) -> rusqlite::Result<Result<(), StoreError>> {
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
    pub(super) fn still_ours(&self, conn: &Connection) -> rusqlite::Result<Result<(), StoreError>> {
        let recorded = recorded_model(conn)?;
        Ok(StoreError::unless_same_model(
            &self.location,
            recorded,
            &self.model,
        ))
    }

    /// After the write committed.
    pub(super) fn committed(&self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The model the file's vectors come from, as its first write recorded it.
pub(super) fn recorded_model(conn: &Connection) -> rusqlite::Result<Option<Model>> {
    // One statement for both: every write of a vector reads them.
    let rows: Vec<(String, String)> = conn
        .prepare_cached("SELECT key, value FROM store_meta WHERE key IN ('model', 'dimension')")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(Model::recorded(&rows))
}
