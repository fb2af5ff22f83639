//! Counted uses, written behind. A recall counts its uses in the tenant's index at once and here,
//! and they reach the file (`memory_uses`) in one transaction for every recall of the last second:
//! a transaction per recall cost about a fifth of the recalls at 10k memories (BENCHMARKS.md,
//! "Issue 21, item 5: write-behind access counters (SQLite)"). Waiting counts are written by a
//! timer (`start`), before anything of this process reads counts from the file (listing, export),
//! at `flush` (shutdown) and when the store is dropped; a crash loses at most the last second of
//! counts, never a memory.
//!
//! While they wait, an index's counts are the file's plus those still waiting here: a
//! refresh or rebuild of the index from the file adds them back (`TenantIndex::count_waiting`),
//! so another process's write never hides this process's counts, nor counts them twice.
//! Lock order: the connection, then the waiting counts, then an index (`builds.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior, params};

use super::Indexes;
use super::index::{Counts, Versions};
use crate::log;

/// How long a counted use may wait before the timer writes it: the counts a crash can lose.
pub(super) const EVERY: Duration = Duration::from_secs(1);

/// Uses counted in this process and not yet in the file, by tenant, then memory id.
pub(super) type Waiting = HashMap<String, HashMap<String, Counts>>;

#[derive(Default)]
pub(super) struct Pending(Mutex<Waiting>);

impl Pending {
    pub fn lock(&self) -> MutexGuard<'_, Waiting> {
        // Plain counts: a panic elsewhere cannot leave one half-added.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Adds `uses` uses, the last at `last`, to `counts`, as the file adds them up.
pub(super) fn add(counts: &mut Counts, uses: u64, last: Option<i64>) {
    counts.0 = crate::memory::add_uses(counts.0, uses);
    counts.1 = counts.1.max(last);
}

/// Writes every waiting count to the file in one transaction. The indexes show them
/// already; each moves to the `uses` version the write made, when it showed the one
/// before. What could not be written waits for the next flush.
pub(super) fn flush(
    conn: &mut Connection,
    pending: &Pending,
    indexes: &Indexes,
) -> rusqlite::Result<()> {
    let waiting = std::mem::take(&mut *pending.lock());
    if waiting.is_empty() {
        return Ok(());
    }
    match write(conn, &waiting) {
        Ok(moved) => {
            // The connection is still held: no refresh can come between.
            for (tenant, before, after) in moved {
                if let Some(slot) = indexes.held(tenant) {
                    slot.read_held(|index| index.moved_uses(before.uses, after.uses));
                }
            }
            Ok(())
        }
        Err(e) => {
            let mut now = pending.lock();
            for (tenant, counted) in waiting {
                let into = now.entry(tenant).or_default();
                for (id, (uses, last)) in counted {
                    add(into.entry(id).or_default(), uses, last);
                }
            }
            Err(e)
        }
    }
}

/// One transaction for all of `waiting`; each tenant's versions before and after. A memory
/// deleted meanwhile (by anyone) gets no row: its uses went with it.
fn write<'w>(
    conn: &mut Connection,
    waiting: &'w Waiting,
) -> rusqlite::Result<Vec<(&'w str, Versions, Versions)>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut moved = Vec::with_capacity(waiting.len());
    for (tenant, counted) in waiting {
        let before = Versions::read(&tx, tenant)?;
        let mut count = tx.prepare_cached(
            "INSERT INTO memory_uses (tenant_id, id, access_count, last_accessed_at) \
             SELECT tenant_id, id, ?3, ?4 FROM memories WHERE tenant_id = ?1 AND id = ?2 \
             ON CONFLICT (tenant_id, id) DO UPDATE SET \
             access_count = min(min(access_count, 9007199254740992) + excluded.access_count, \
                                9007199254740992), \
             last_accessed_at = max(coalesce(last_accessed_at, excluded.last_accessed_at), \
                                    excluded.last_accessed_at)",
        )?;
        for (id, (uses, last)) in counted {
            let uses = i64::try_from(*uses).unwrap_or(i64::MAX);
            count.execute(params![tenant, id, uses, last])?;
        }
        moved.push((tenant.as_str(), before, Versions::read(&tx, tenant)?));
    }
    tx.commit()?;
    Ok(moved)
}

/// The timer: a thread that writes the waiting counts every `every`, and ends once the
/// store is gone. A thread rather than a task, so a store opened outside a runtime (the
/// command line's) counts the same.
pub(super) fn start(
    conn: &Arc<Mutex<Connection>>,
    pending: &Arc<Pending>,
    indexes: &Arc<Indexes>,
    every: Duration,
) {
    let (conn, pending, indexes) = (
        Arc::downgrade(conn),
        Arc::downgrade(pending),
        Arc::downgrade(indexes),
    );
    let timer = move || {
        loop {
            std::thread::sleep(every);
            let (Some(conn), Some(pending), Some(indexes)) =
                (conn.upgrade(), pending.upgrade(), indexes.upgrade())
            else {
                return;
            };
            if pending.lock().is_empty() {
                continue;
            }
            let Ok(mut conn) = conn.lock() else { return };
            if let Err(e) = flush(&mut conn, &pending, &indexes) {
                log::error(
                    "stats_flush_failed",
                    &e.to_string(),
                    &log::Fields::default(),
                );
            }
        }
    };
    // Without a thread the counts still reach the file, at the next read or flush.
    let _ = std::thread::Builder::new()
        .name("sqlite-uses".into())
        .spawn(timer);
}
