//! `mcp-memory reembed` on the SQLite file (`store/reembed.rs`): new vectors wait in
//! `reembedded` until one IMMEDIATE transaction puts them in place and records the model.
//! That transaction moves every tenant's version (the `memories` update trigger), so each
//! process sharing the file drops its indexes and checks the model before building one.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::rows::to_blob;
use super::schema::{NEW_VERSION, connect, recorded_model};
use super::{blocking, lock};
use crate::memory::Model;
use crate::store::reembed::{Pending, Plan, Reembedding, Switched, Unembedded, staged_for};
use crate::store::{StoreError, split_tenant_and_id, tenant_and_id};

const STAGING: &str = "
CREATE TABLE IF NOT EXISTS reembedded (
  tenant_id TEXT NOT NULL,
  id        TEXT NOT NULL,
  embedding BLOB NOT NULL,
  PRIMARY KEY (tenant_id, id)
) WITHOUT ROWID;
";

/// Memories of the file still without a staged vector, from `?1`/`?2` on.
const UNSTAGED: &str = "FROM memories m WHERE NOT EXISTS \
     (SELECT 1 FROM reembedded r WHERE r.tenant_id = m.tenant_id AND r.id = m.id)";

pub struct Reembedder {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
}

impl Reembedder {
    pub fn open(path: &Path) -> Result<Reembedder, StoreError> {
        let conn = connect(path)?;
        conn.execute_batch(STAGING)?;
        Ok(Reembedder {
            path: path.to_owned(),
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = Arc::clone(&self.conn);
        blocking(move || work(&mut *lock(&conn)?).map_err(StoreError::from)).await
    }
}

/// The model the vectors staged so far are of (`store_meta`'s `reembedding`).
fn staging(conn: &Connection) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT value FROM store_meta WHERE key = 'reembedding'",
        [],
        |r| r.get(0),
    )
    .optional()
}

/// How many memories have no staged vector.
fn unstaged(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row(&format!("SELECT count(*) {UNSTAGED}"), [], |r| r.get(0))
}

#[async_trait]
impl Reembedding for Reembedder {
    async fn begin(&self, to: &Model) -> Result<Plan, StoreError> {
        let target = staged_for(to);
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let earlier = staging(&tx)?;
            if earlier.as_deref() != Some(target.as_str()) {
                tx.execute("DELETE FROM reembedded", [])?;
                tx.execute(
                    "INSERT OR REPLACE INTO store_meta (key, value) VALUES ('reembedding', ?1)",
                    [&target],
                )?;
            }
            let total: i64 = tx.query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?;
            let pending = unstaged(&tx)?;
            let recorded = recorded_model(&tx)?;
            tx.commit()?;
            Ok(Plan {
                recorded,
                total: Some(total as u64),
                staged: (total - pending).max(0) as u64,
            })
        })
        .await
    }

    async fn pending(&self, from: Option<&str>, limit: usize) -> Result<Pending, StoreError> {
        let (tenant, id) = crate::store::Exported::after_tenant_and_id(from);
        let (tenant, id) = (tenant.to_owned(), id.to_owned());
        let memories = self
            .with_conn(move |conn| {
                conn.prepare_cached(&format!(
                    "SELECT m.tenant_id, m.id, m.content {UNSTAGED} \
                     AND (m.tenant_id, m.id) > (?1, ?2) ORDER BY m.tenant_id, m.id LIMIT ?3"
                ))?
                .query_map(params![tenant, id, limit as i64], |r| {
                    Ok(Unembedded {
                        key: tenant_and_id(&r.get::<_, String>(0)?, &r.get::<_, String>(1)?),
                        content: r.get(2)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        Ok(Pending::by_tenant_and_id(memories, limit))
    }

    async fn stage(&self, vectors: &[(String, Vec<f32>)]) -> Result<(), StoreError> {
        let vectors = vectors.to_vec();
        self.with_conn(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut put = tx.prepare_cached(
                    "INSERT OR REPLACE INTO reembedded (tenant_id, id, embedding) \
                     SELECT tenant_id, id, ?3 FROM memories WHERE tenant_id = ?1 AND id = ?2",
                )?;
                for (key, vector) in &vectors {
                    if let Some((tenant, id)) = split_tenant_and_id(key) {
                        put.execute(params![tenant, id, to_blob(vector)])?;
                    }
                }
            }
            tx.commit()
        })
        .await
    }

    async fn switch(&self, to: &Model) -> Result<Switched, StoreError> {
        let (target, to) = (staged_for(to), to.clone());
        let location = self.describe();
        self.with_conn(move |conn| {
            // The write lock first: no process writes between the check and the switch.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if staging(&tx)?.as_deref() != Some(target.as_str()) {
                return Ok(Err(StoreError::unavailable(
                    location,
                    "another re-embedding started since this one: run it again",
                )));
            }
            let behind = unstaged(&tx)?;
            if behind > 0 {
                return Ok(Ok(Switched::Behind(behind as u64)));
            }
            // The update trigger would move a tenant's version once per memory; without it
            // (dropped and made again within the transaction, so no other process ever
            // sees the table without it) each tenant moves once, and the switch holds the
            // write lock for less.
            tx.execute_batch(&format!(
                "DROP TRIGGER memories_updated_version; \
                 UPDATE memories SET embedding = (SELECT r.embedding FROM reembedded r \
                   WHERE r.tenant_id = memories.tenant_id AND r.id = memories.id); \
                 INSERT INTO memory_versions (tenant_id, memories) \
                   SELECT DISTINCT tenant_id, {NEW_VERSION} FROM memories WHERE true \
                   ON CONFLICT (tenant_id) DO UPDATE SET memories = memories + 1; \
                 {triggers} \
                 DELETE FROM reembedded; \
                 DELETE FROM store_meta WHERE key = 'reembedding';",
                triggers = super::schema::version_triggers()
            ))?;
            tx.execute(
                "INSERT OR REPLACE INTO store_meta (key, value) VALUES ('model', ?1), ('dimension', ?2)",
                params![to.name, to.dimension.to_string()],
            )?;
            tx.commit()?;
            Ok(Ok(Switched::Done))
        })
        .await?
    }

    fn describe(&self) -> String {
        format!("sqlite at {}", self.path.display())
    }
}
