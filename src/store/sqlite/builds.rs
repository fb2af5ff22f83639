//! Building a tenant's index without the connection every other call waits on. The rows
//! are read on a connection of the build's own, in one read transaction, which WAL lets run
//! while others write, so the index shows exactly the versions that transaction saw. Only
//! putting it in place takes the connection, for as long as adding this process's waiting
//! counts takes: no flush of them runs meanwhile (`uses.rs`), so none is lost or counted
//! twice. Builds take turns (`TenantCache::building`), one build of a tenant at a time (its
//! slot's `writes`); a write waits for that turn only when this process holds no index of
//! the tenant, and builds it first.
//!
//! Lock order, kept by every path of the store: the connection, then the waiting counts
//! (`Pending`), then an index's slot, then a memory in it. A build holds none of them while
//! it reads.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};

use super::index::{self, TenantIndex, Versions};
use super::schema::{BUSY_TIMEOUT, Recorded};
use super::uses::Pending;
use super::{Indexes, blocking, lock};
use crate::search::cache::{BUILDS_AT_ONCE, Coherence, Interrupted, Slot, Version};
use crate::store::StoreError;

/// The connections builds read on: opened read-only when a build needs one, kept for the
/// next (at most one per turn).
pub(super) struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    pub fn new(path: &Path) -> Readers {
        Readers {
            path: path.to_owned(),
            idle: Mutex::new(Vec::new()),
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // A list of connections: a panic elsewhere cannot leave it half-changed.
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self) -> rusqlite::Result<Connection> {
        if let Some(conn) = self.idle().pop() {
            return Ok(conn);
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        Ok(conn)
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle();
        if idle.len() < BUILDS_AT_ONCE {
            idle.push(conn);
        }
    }
}

/// What the tenant cache reads of the store (`Coherence`), for a blocking thread.
#[derive(Clone)]
pub(super) struct Parts {
    pub conn: Arc<Mutex<Connection>>,
    pub readers: Arc<Readers>,
    pub indexes: Arc<Indexes>,
    pub pending: Arc<Pending>,
    pub width: usize,
    pub model: Arc<Recorded>,
}

/// Checking the version and searching take one hand-off when the index shows the file (4 %
/// more recalls/s at 10k memories than a hand-off for each, BENCHMARKS.md, "Issue 15: the
/// architecture step, A/B against the build before it"). The file keeps no log of changes:
/// another process's write to a tenant builds its index again.
#[async_trait]
impl Coherence for Parts {
    type Index = TenantIndex;
    type Error = StoreError;
    type Changes = ();

    async fn version(&self, tenant: &str) -> Result<Version, StoreError> {
        let (parts, tenant) = (self.clone(), tenant.to_owned());
        blocking(move || Ok(Versions::read(&*lock(&parts.conn)?, &tenant)?.memories)).await
    }

    async fn read_current<R, F>(
        &self,
        tenant: &str,
        slot: &Arc<Slot<TenantIndex>>,
        read: F,
    ) -> Result<Result<R, F>, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&TenantIndex) -> R + Send + 'static,
    {
        let (parts, slot, tenant) = (self.clone(), Arc::clone(slot), tenant.to_owned());
        blocking(move || {
            {
                let conn = lock(&parts.conn)?;
                let now = Versions::read(&conn, &tenant)?;
                if !slot.shows(now.memories) {
                    return Ok(Err(read));
                }
                parts.refresh_uses(&conn, &tenant, &slot, now.uses)?;
            }
            // The connection is held only to check the versions, not while the index is
            // searched, so searches run in parallel.
            let answer = slot.read_held(read).ok_or(Interrupted::Dropped)?;
            Ok(Ok(answer))
        })
        .await
    }

    async fn build(
        &self,
        _cache: &Indexes,
        tenant: &str,
        slot: &Arc<Slot<TenantIndex>>,
    ) -> Result<(), StoreError> {
        let (parts, slot, tenant) = (self.clone(), Arc::clone(slot), tenant.to_owned());
        blocking(move || parts.build_here(&tenant, &slot)).await
    }

    async fn changes(&self, _: &str, _: Version) -> Result<Option<(Version, ())>, StoreError> {
        Ok(None)
    }

    fn catch_up(_: &mut TenantIndex, (): ()) {}

    async fn read_built<R, F>(
        &self,
        tenant: &str,
        slot: &Arc<Slot<TenantIndex>>,
        read: F,
    ) -> Result<Option<R>, StoreError>
    where
        R: Send + 'static,
        F: FnOnce(&TenantIndex) -> R + Send + 'static,
    {
        let (parts, slot, tenant) = (self.clone(), Arc::clone(slot), tenant.to_owned());
        blocking(move || {
            {
                let conn = lock(&parts.conn)?;
                let now = Versions::read(&conn, &tenant)?;
                parts.refresh_uses(&conn, &tenant, &slot, now.uses)?;
            }
            Ok(slot.read_held(read))
        })
        .await
    }
}

impl Parts {
    /// Reads the counts again if another process counted uses since the index's.
    fn refresh_uses(
        &self,
        conn: &Connection,
        tenant: &str,
        slot: &Slot<TenantIndex>,
        now: Version,
    ) -> Result<(), StoreError> {
        if slot
            .read_held(|index| index.uses())
            .is_none_or(|uses| uses == now)
        {
            return Ok(());
        }
        let counted = index::counted_uses(conn, tenant)?;
        let waiting = self.pending.lock();
        slot.read_held(|index| index.set_uses(&counted, waiting.get(tenant), now));
        Ok(())
    }

    /// Builds the tenant's index into `slot` as the file holds it now, on this (blocking)
    /// thread. The caller holds the tenant's turn and a build's.
    fn build_here(&self, tenant: &str, slot: &Slot<TenantIndex>) -> Result<(), StoreError> {
        let (versions, index) = self.read(tenant)?;
        let _conn = lock(&self.conn)?;
        let waiting = self.pending.lock();
        index.count_waiting(waiting.get(tenant));
        self.indexes.install(tenant, slot, versions.memories, index);
        Ok(())
    }

    /// The tenant's index as one read transaction sees the file, and the versions it shows;
    /// refused if the file now holds another model's vectors (a re-embedding switched it).
    fn read(&self, tenant: &str) -> Result<(Versions, TenantIndex), StoreError> {
        let mut conn = self.readers.take()?;
        let read = (|| -> rusqlite::Result<Result<(Versions, TenantIndex), StoreError>> {
            let tx = conn.transaction()?;
            // The first read starts the transaction's snapshot: the rows below are the
            // ones of these versions.
            let versions = Versions::read(&tx, tenant)?;
            if let Err(refused) = self.model.still_ours(&tx)? {
                return Ok(Err(refused));
            }
            let files = self.indexes.files();
            let index = TenantIndex::load(&tx, tenant, self.width, versions.uses, files)?;
            Ok(Ok((versions, index)))
        })();
        self.readers.give_back(conn);
        read?
    }
}
