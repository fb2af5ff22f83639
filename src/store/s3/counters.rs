//! Access counters without a lock (docs/stores.md#lock-free-counters). Each pod counts in memory, and every
//! flush writes its deltas to a shard object only it ever writes. Readers add the shards
//! above the merged file's watermark to the merged counts. A pod folds old shards into
//! the merged file with a compare-and-swap, so pods never wait for each other; a lost race
//! costs nothing but a retry by whoever reads next.
//!
//! Two choices beyond the original, both so that leftovers can never be counted or crowd
//! out live shards: shards are listed starting *after* the watermark (an absorbed shard a
//! dead pod failed to delete is never listed again), and an unreadable shard is skipped,
//! logged and never folded (docs/stores.md#lock-free-counters). Once the watermark passes it, it stays in the
//! bucket for the operator to inspect, ignored.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde_json::{Map, Value, json};

use super::index::ulid_time;
use super::objects::{Condition, ObjectError, Objects};
use crate::log;
use crate::memory::{Tenant, iso};

/// A pod's sense of the current time in ms; injected so tests can skew it.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// How long durable counts are served from memory.
const CACHE_MS: i64 = 60_000;
/// Shards younger than this are counted but not folded: a pod whose write is less late
/// than this, or whose clock is less far behind, still lands above the watermark.
const LAG_MS: i64 = 60_000;
/// Shards fetched at once while reading.
const READ_CONCURRENCY: usize = 16;
/// Shards one read lists; more wait until compaction catches up.
const SHARD_LISTING_CAP: usize = 1_000;

/// One memory's usage: how often it was used and when last (an ISO time).
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub access: u64,
    pub last_at: String,
}

/// Usage by memory id.
pub type Tally = HashMap<String, Usage>;

fn add(tally: &mut Tally, id: &str, usage: &Usage) {
    match tally.get_mut(id) {
        Some(total) => {
            total.access = crate::memory::add_uses(total.access, usage.access);
            if usage.last_at > total.last_at {
                total.last_at.clone_from(&usage.last_at);
            }
        }
        None => {
            tally.insert(id.to_owned(), usage.clone());
        }
    }
}

fn add_all(tally: &mut Tally, more: &Tally) {
    for (id, usage) in more {
        add(tally, id, usage);
    }
}

fn to_json(tally: &Tally) -> Value {
    Value::Object(
        tally
            .iter()
            .map(|(id, u)| (id.clone(), json!({"access": u.access, "lastAt": u.last_at})))
            .collect(),
    )
}

/// Entries with a numeric `access` and a `lastAt` that reads as a time; anything else is
/// dropped on its own, so one bad entry does not poison its neighbours.
fn from_json(value: &Map<String, Value>) -> Tally {
    value
        .iter()
        .filter_map(|(id, entry)| {
            let access = entry.get("access")?.as_f64().filter(|a| a.is_finite())?;
            let last_at = entry.get("lastAt")?.as_str()?;
            chrono::DateTime::parse_from_rfc3339(last_at).ok()?;
            Some((
                id.clone(),
                Usage {
                    access: (access.max(0.0).round() as u64).min(crate::memory::MAX_USES),
                    last_at: last_at.to_owned(),
                },
            ))
        })
        .collect()
}

fn merged_key(tenant: &str) -> String {
    format!("stats/{tenant}/merged.json")
}

fn shard_prefix(tenant: &str) -> String {
    format!("stats/{tenant}/shard/")
}

fn file_name(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

/// The first 26 characters of a shard's file name are the ULID of its flush.
fn shard_time(name: &str) -> Option<i64> {
    name.get(..26).and_then(ulid_time).map(|ms| ms as i64)
}

/// A tenant's flush that failed; its deltas are lost (never replayed, by design).
#[derive(Debug)]
pub struct FlushFailed {
    pub tenant: String,
    pub error: ObjectError,
}

/// What one read of the durable counts found.
pub struct Reading {
    pub tally: Tally,
    /// Set when enough old shards have piled up to be worth folding.
    pub compaction: Option<Compaction>,
    /// What the tally holds of this pod's own shards: every one up to the watermark (in the
    /// merged file), and those listed above it.
    pub seen: Seen,
}

/// Which of this pod's shards a reading holds.
#[derive(Default)]
pub struct Seen {
    watermark: String,
    listed: HashSet<String>,
}

impl Seen {
    fn holds(&self, key: &str) -> bool {
        self.listed.contains(key) || file_name(key) <= self.watermark.as_str()
    }
}

/// Durable counts as one reading found them, served from memory for a minute.
struct Durable {
    /// When the reading began: a shard written after this may be missing from it.
    at: i64,
    tally: Arc<Tally>,
    seen: Seen,
}

/// Uses this pod wrote to a shard (or is writing) in the last minute. A cached reading
/// that does not hold the shard does not count them yet, so they are added to it: a pod's
/// own counts never vanish between its flush and its next durable read.
struct Written {
    key: String,
    at: i64,
    tally: Tally,
}

/// A fold of old shards into the merged file, planned from one read.
pub struct Compaction {
    tenant: String,
    merged: Tally,
    /// The merged file's version that was read; `None` when there was none.
    etag: Option<String>,
    absorbable: Vec<(String, Tally)>,
}

/// How a compaction ended.
#[derive(Debug, PartialEq)]
pub enum Compacted {
    /// The merged file now holds this many more shards.
    Folded(usize),
    /// Another pod changed the merged file first; nothing was deleted.
    Lost,
}

pub struct Counters {
    objects: Arc<dyn Objects>,
    pod: String,
    clock: Clock,
    compact_threshold: usize,
    pending: Mutex<HashMap<String, Tally>>,
    durable: Mutex<HashMap<String, Arc<Durable>>>,
    written: Mutex<HashMap<String, Vec<Written>>>,
    compacting: Mutex<HashSet<String>>,
}

impl Counters {
    pub fn new(
        objects: Arc<dyn Objects>,
        pod: String,
        clock: Clock,
        compact_threshold: usize,
    ) -> Self {
        Counters {
            objects,
            pod,
            clock,
            compact_threshold,
            pending: Mutex::default(),
            durable: Mutex::default(),
            written: Mutex::default(),
            compacting: Mutex::default(),
        }
    }

    /// `<host>-<8 random hex>`: new at every boot, so a restarted pod never reuses a
    /// shard name.
    pub fn pod_id() -> String {
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().replace(['/', '#'], "-"))
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "pod".into());
        format!("{host}-{:08x}", crate::memory::rand_u128() as u32)
    }

    /// Counts one use in this pod's memory; no I/O.
    pub fn record(&self, tenant: &Tenant, id: &str, at_ms: i64) {
        self.record_uses(tenant, id, 1, at_ms);
    }

    /// `uses` uses at once, the last at `at_ms`: an imported memory's count.
    pub fn record_uses(&self, tenant: &Tenant, id: &str, uses: u64, at_ms: i64) {
        let usage = Usage {
            access: uses,
            last_at: iso(at_ms),
        };
        let mut pending = lock(&self.pending);
        add(
            pending.entry(tenant.as_str().to_owned()).or_default(),
            id,
            &usage,
        );
    }

    /// Writes each tenant's pending deltas to a new shard, every tenant whatever the others
    /// do. The deltas leave `pending` before the write, so a failed write loses them rather
    /// than risking a double count; each failure is returned.
    pub async fn flush(&self) -> Result<(), Vec<FlushFailed>> {
        self.forget_old_writes((self.clock)());
        let tenants: Vec<String> = lock(&self.pending).keys().cloned().collect();
        let mut failures = Vec::new();
        for tenant in tenants {
            let Some(deltas) = lock(&self.pending).remove(&tenant) else {
                continue;
            };
            if deltas.is_empty() {
                continue;
            }
            let now = (self.clock)();
            let key = format!(
                "{}{}-{}.json",
                shard_prefix(&tenant),
                crate::memory::new_id(now),
                self.pod
            );
            let body = to_json(&deltas).to_string().into_bytes();
            // Counted as written from before the write: a reading that lists the shard
            // while it lands holds it, and one that does not gets it from here.
            lock(&self.written)
                .entry(tenant.clone())
                .or_default()
                .push(Written {
                    key: key.clone(),
                    at: now,
                    tally: deltas,
                });
            if let Err(error) = self.objects.put(&key, body, Condition::Always).await {
                if let Some(list) = lock(&self.written).get_mut(&tenant) {
                    list.retain(|w| w.key != key);
                }
                failures.push(FlushFailed { tenant, error });
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures)
        }
    }

    /// What a flush wrote is kept for a minute, the longest a reading that may lack it is
    /// served; older entries, and tenants left with none, go (once per flush).
    fn forget_old_writes(&self, now: i64) {
        lock(&self.written).retain(|_, list| {
            list.retain(|w| now - w.at < CACHE_MS);
            !list.is_empty()
        });
    }

    /// The tenant's usage: durable counts (cached for a minute), plus what this pod wrote
    /// that they do not hold yet, plus its pending uses, so a pod sees its own recalls at
    /// once and never loses sight of them. May start a compaction in the background; never
    /// waits for one.
    pub async fn load(self: &Arc<Self>, tenant: &Tenant) -> Result<Tally, ObjectError> {
        let now = (self.clock)();
        let cached = lock(&self.durable)
            .get(tenant.as_str())
            .filter(|durable| now - durable.at < CACHE_MS)
            .map(Arc::clone);
        let durable = match cached {
            Some(durable) => durable,
            None => {
                let reading = self.read(tenant).await?;
                let durable = Arc::new(Durable {
                    at: now,
                    tally: Arc::new(reading.tally),
                    seen: reading.seen,
                });
                let mut cache = lock(&self.durable);
                // Expired tallies are never served again: dropping them here bounds the cache
                // by the tenants read in the last minute, however many names callers make up.
                cache.retain(|_, cached| now - cached.at < CACHE_MS);
                cache.insert(tenant.as_str().to_owned(), Arc::clone(&durable));
                drop(cache);
                if let Some(plan) = reading.compaction {
                    self.compact_in_background(plan);
                }
                durable
            }
        };
        let mut tally = (*durable.tally).clone();
        if let Some(written) = lock(&self.written).get(tenant.as_str()) {
            for w in written.iter().filter(|w| !durable.seen.holds(&w.key)) {
                add_all(&mut tally, &w.tally);
            }
        }
        if let Some(pending) = lock(&self.pending).get(tenant.as_str()) {
            add_all(&mut tally, pending);
        }
        Ok(tally)
    }

    /// Reads the durable counts: the merged file plus every readable shard above its
    /// watermark, and plans a compaction when more than the threshold are old enough.
    pub async fn read(&self, tenant: &Tenant) -> Result<Reading, ObjectError> {
        let tenant = tenant.as_str();
        let (merged, watermark, etag) = match self.objects.get(&merged_key(tenant)).await? {
            None => (Tally::new(), String::new(), None),
            Some(object) => {
                let parsed: Option<Value> = serde_json::from_slice(&object.body).ok();
                let counts = parsed
                    .as_ref()
                    .and_then(|v| v.get("counts"))
                    .and_then(Value::as_object)
                    .map(from_json)
                    .unwrap_or_default();
                let watermark = parsed
                    .as_ref()
                    .and_then(|v| v.get("watermark"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                (counts, watermark, Some(object.etag))
            }
        };
        let prefix = shard_prefix(tenant);
        let start_after = format!("{prefix}{watermark}");
        let keys = self
            .objects
            .list(&prefix, Some(&start_after), SHARD_LISTING_CAP)
            .await?;
        let shards: Vec<(String, Option<Tally>)> = stream::iter(keys)
            .map(|key| async move {
                let object = self.objects.get(&key).await?;
                Ok::<_, ObjectError>(object.map(|o| {
                    let tally = serde_json::from_slice::<Value>(&o.body)
                        .ok()
                        .and_then(|v| v.as_object().map(from_json));
                    (key, tally)
                }))
            })
            .buffered(READ_CONCURRENCY)
            .try_filter_map(|shard| async move { Ok(shard) })
            .try_collect()
            .await?;

        let mut tally = merged.clone();
        let old_enough = (self.clock)() - LAG_MS;
        let mut absorbable = Vec::new();
        let own = format!("-{}.json", self.pod);
        let seen = Seen {
            listed: (shards.iter())
                .filter(|(key, _)| key.ends_with(&own))
                .map(|(key, _)| key.clone())
                .collect(),
            watermark: watermark.clone(),
        };
        for (key, shard) in shards {
            let Some(shard) = shard else {
                log::error(
                    "stats_shard_unreadable",
                    &format!("{} is not a JSON object; it is skipped", file_name(&key)),
                    &log::Fields {
                        tenant: Some(tenant),
                        ..Default::default()
                    },
                );
                continue;
            };
            add_all(&mut tally, &shard);
            if shard_time(file_name(&key)).is_some_and(|t| t <= old_enough) {
                absorbable.push((key, shard));
            }
        }
        let compaction = (absorbable.len() > self.compact_threshold).then(|| Compaction {
            tenant: tenant.to_owned(),
            merged,
            etag,
            absorbable,
        });
        Ok(Reading {
            tally,
            compaction,
            seen,
        })
    }

    /// Folds the planned shards into the merged file if nobody changed it since it was
    /// read, then deletes them (garbage collection only: the watermark already hides them).
    pub async fn compact(&self, plan: Compaction) -> Result<Compacted, ObjectError> {
        let mut counts = plan.merged;
        for (_, shard) in &plan.absorbable {
            add_all(&mut counts, shard);
        }
        // Listing order is name order, so the last absorbable shard has the greatest name.
        let watermark = plan
            .absorbable
            .iter()
            .map(|(key, _)| file_name(key))
            .max()
            .unwrap_or_default()
            .to_owned();
        let body = json!({"counts": to_json(&counts), "watermark": watermark})
            .to_string()
            .into_bytes();
        let condition = match &plan.etag {
            Some(etag) => Condition::IfMatch(etag),
            None => Condition::IfAbsent,
        };
        match self
            .objects
            .put(&merged_key(&plan.tenant), body, condition)
            .await
        {
            Ok(()) => {}
            Err(ObjectError::Precondition) => return Ok(Compacted::Lost),
            Err(e) => return Err(e),
        }
        let absorbed: Vec<String> = plan.absorbable.into_iter().map(|(key, _)| key).collect();
        if let Err(e) = self.objects.delete(&absorbed).await {
            log::error(
                "stats_shard_cleanup_failed",
                &e.to_string(),
                &log::Fields {
                    tenant: Some(&plan.tenant),
                    ..Default::default()
                },
            );
        }
        Ok(Compacted::Folded(absorbed.len()))
    }

    /// One compaction per tenant per pod at a time, off the caller's latency path.
    fn compact_in_background(self: &Arc<Self>, plan: Compaction) {
        if !lock(&self.compacting).insert(plan.tenant.clone()) {
            return;
        }
        let counters = Arc::clone(self);
        tokio::spawn(async move {
            let tenant = plan.tenant.clone();
            if let Err(e) = counters.compact(plan).await {
                log::error(
                    "stats_compaction_failed",
                    &e.to_string(),
                    &log::Fields {
                        tenant: Some(&tenant),
                        ..Default::default()
                    },
                );
            }
            lock(&counters.compacting).remove(&tenant);
        });
    }
}

/// A poisoned lock only means another thread panicked mid-update of plain counters;
/// carrying on with what is there beats taking the server down.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
