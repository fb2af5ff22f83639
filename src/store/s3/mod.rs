//! The AWS store (docs/stores.md#s3): memories in S3 Vectors, and in an ordinary state bucket
//! a recency index (for listing and counting) and usage counters that need no lock. Nothing
//! is updated in place, and nothing is called at boot: a missing bucket shows up as a tool
//! error on first use, never as a pod that will not start.
//!
//! Visibility is applied after each read, as the original did: recall's candidates are the
//! tenant's nearest, so other conversations' notes can take candidate slots (PostgreSQL and
//! SQLite filter first). Dedup is not atomic here: two identical concurrent writes can both
//! land, the cheap direction to fail in.

mod counters;
mod index;
mod objects;
pub mod reembed;
mod vectors;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3vectors::types::IndexMode;

use super::{
    After, Counts, Expired, Exported, Matches, MemoryStore, Portable, Remembered, StoreError,
    keep_nearest, write,
};
use crate::dedup;
use crate::embed::Fit;
use crate::log;
use crate::memory::{self, Hit, Memory, MemoryType, Model, NewMemory, Tenant, Visibility};
use crate::search::Query;
use counters::{Clock, Counters, Tally};
use index::Entry;
use objects::{Condition, Objects, S3Objects};
use vectors::Vectors;

/// Counting stops after this many index keys, and says its figures are lower bounds.
const STATS_SCAN_CAP: usize = 10_000;
/// A listing filtered by type or conversation reads index keys in pages this large...
const FILTERED_PAGE: usize = 1_000;
/// ...and looks at most this many of the newest keys, so a filter that matches nothing
/// never lists a whole tenant.
const LISTING_SCAN_CAP: usize = 10_000;
/// How often `remember` tries to remove the memory it replaces before it says so.
const REPLACE_TRIES: u64 = 3;
/// The longest shutdown waits for `remember`s still writing (each AWS call has its own
/// timeout, docs/operations.md#timeouts), before the final flush.
const WRITES_DRAIN: Duration = Duration::from_secs(45);
/// A sweep pass (`expire`) reads at most this many index keys, going on from where the last
/// pass stopped: about ten LIST calls.
const SWEEP_SCAN: usize = 10_000;
/// Deletions of memories a read found expired that may run at once; past that, the sweep
/// takes them.
const DISCARDS: usize = 4;

/// Where the memories are and how the counters behave.
#[derive(Debug, Clone)]
pub struct S3Settings {
    pub vector_bucket: String,
    pub vector_index: String,
    pub state_bucket: String,
    pub region: String,
    /// Path-style bucket addressing, for S3-compatible endpoints such as the emulator.
    pub force_path_style: bool,
    pub flush_every: Duration,
    pub compact_threshold: usize,
}

pub struct S3Store {
    vectors: Arc<Vectors>,
    objects: Arc<dyn Objects>,
    counters: Arc<Counters>,
    flusher: Flusher,
    /// Held (shared) by every `remember` writing, which finishes even if its request is
    /// dropped; shutdown takes it whole, so it waits for them.
    writes: Arc<tokio::sync::RwLock<()>>,
    state_bucket: String,
    /// `STATS_SCAN_CAP`, except in tests that need to reach it quickly.
    stats_scan_cap: usize,
    /// The index key the next sweep pass starts after; None: from the first tenant.
    sweep_from: std::sync::Mutex<Option<String>>,
    /// Index keys a sweep pass reads: `SWEEP_SCAN`, fewer in tests.
    sweep_scan: usize,
    discarding: Arc<tokio::sync::Semaphore>,
    /// The model this process embeds with, and whether the state bucket is known to
    /// record it for the vector index (`model_key`).
    model: Model,
    model_checked: std::sync::atomic::AtomicBool,
    /// The index was found made as the server needs it (`vectors::Layout::check`).
    index_checked: std::sync::atomic::AtomicBool,
    /// A search found no model recorded: later searches do not ask again.
    searched_unrecorded: std::sync::atomic::AtomicBool,
    model_key: String,
    /// Where the state bucket keeps the index's model calibration (`calibration_key`).
    calibration_key: String,
}

/// The state bucket, and a client of S3 Vectors (no network call).
async fn clients(settings: &S3Settings) -> (Arc<dyn Objects>, aws_sdk_s3vectors::Client) {
    let sdk = crate::aws::sdk_config(&settings.region).await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&sdk)
            .force_path_style(settings.force_path_style)
            .build(),
    );
    let objects: Arc<dyn Objects> = Arc::new(S3Objects::new(s3, &settings.state_bucket));
    (objects, aws_sdk_s3vectors::Client::new(&sdk))
}

/// What the state bucket records of an index's vectors.
#[derive(serde::Serialize, serde::Deserialize)]
struct RecordedModel {
    model: String,
    dimension: usize,
}

/// Where the state bucket records the model of the vectors of `index` in `vector_bucket`.
fn model_key(vector_bucket: &str, index: &str) -> String {
    format!("model/{vector_bucket}/{index}.json")
}

/// Where the state bucket keeps the fit `mcp-memory calibrate` recorded for the model of
/// `index`'s vectors, beside the model's record.
fn calibration_key(vector_bucket: &str, index: &str) -> String {
    format!("calibration/{vector_bucket}/{index}.json")
}

/// The model recorded under `key`, if any.
async fn recorded_model(objects: &dyn Objects, key: &str) -> Result<Option<Model>, StoreError> {
    let Some(found) = objects.get(key).await.map_err(state_failed)? else {
        return Ok(None);
    };
    let recorded = serde_json::from_slice::<RecordedModel>(&found.body)
        .map_err(|e| StoreError::unavailable("S3: the recorded model is unreadable", e))?;
    Ok(Some(Model {
        name: recorded.model,
        dimension: recorded.dimension,
    }))
}

/// Records `model` under `key` unless a model is recorded there already, and says which
/// one is (the first writer's, whoever it was).
async fn record_model(
    objects: &dyn Objects,
    key: &str,
    model: &Model,
) -> Result<Option<Model>, StoreError> {
    if let Some(recorded) = recorded_model(objects, key).await? {
        return Ok(Some(recorded));
    }
    let mine = RecordedModel {
        model: model.name.clone(),
        dimension: model.dimension,
    };
    let body = serde_json::to_vec(&mine).unwrap_or_default();
    match objects.put(key, body, Condition::IfAbsent).await {
        Ok(()) | Err(objects::ObjectError::Precondition) => recorded_model(objects, key).await,
        Err(e) => Err(state_failed(e)),
    }
}

impl S3Store {
    /// Builds the clients (no network call) and starts the counter flush timer; `model` is
    /// checked against the one recorded for the index at the first search or write.
    pub async fn open(settings: &S3Settings, model: &Model) -> S3Store {
        let (objects, vectors) = clients(settings).await;
        let clock: Clock = Arc::new(crate::memory::now_ms);
        let counters = Arc::new(Counters::new(
            Arc::clone(&objects),
            Counters::pod_id(),
            clock,
            settings.compact_threshold,
        ));
        S3Store {
            vectors: Arc::new(Vectors::new(
                vectors,
                &settings.vector_bucket,
                &settings.vector_index,
            )),
            objects,
            flusher: Flusher::start(Arc::clone(&counters), settings.flush_every),
            writes: Arc::default(),
            counters,
            state_bucket: settings.state_bucket.clone(),
            stats_scan_cap: STATS_SCAN_CAP,
            sweep_from: std::sync::Mutex::new(None),
            sweep_scan: SWEEP_SCAN,
            discarding: Arc::new(tokio::sync::Semaphore::new(DISCARDS)),
            model: model.clone(),
            model_checked: std::sync::atomic::AtomicBool::new(false),
            index_checked: std::sync::atomic::AtomicBool::new(false),
            searched_unrecorded: std::sync::atomic::AtomicBool::new(false),
            model_key: model_key(&settings.vector_bucket, &settings.vector_index),
            calibration_key: calibration_key(&settings.vector_bucket, &settings.vector_index),
        }
    }

    /// Once per process, before the first search or write: the index is read with GetIndex
    /// and refused unless it is made as the server needs it, so a wrong index is named
    /// before anything is written rather than by a failed write later. Until it passes,
    /// every use checks again.
    async fn check_index(&self) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        if self.index_checked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let layout = self.vectors.check(self.model.dimension).await?;
        if layout.mode.as_ref() != Some(&IndexMode::Enhanced) {
            // Harmless, as every query asks for ENHANCED; said once, for the operator.
            log::info("s3_index_classic", &log::Fields::default());
        }
        self.index_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Once per process: the index is checked (`check_index`), and the model recorded for
    /// it must be this process's. A write records it when none is (`record`); a search with
    /// none recorded checks again later.
    async fn check_model(&self, record: bool) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        self.check_index().await?;
        if self.model_checked.load(Ordering::Relaxed)
            || (!record && self.searched_unrecorded.load(Ordering::Relaxed))
        {
            return Ok(());
        }
        let stored = if record {
            record_model(&*self.objects, &self.model_key, &self.model).await?
        } else {
            recorded_model(&*self.objects, &self.model_key).await?
        };
        let Some(stored) = stored else {
            // Nothing recorded: searches look no more; the first write records it.
            self.searched_unrecorded.store(true, Ordering::Relaxed);
            return Ok(());
        };
        let location = self.vectors.location();
        StoreError::unless_same_model(&location, Some(stored), &self.model)?;
        self.model_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// The tenant's nearest memories that `visibility` may see, without usage counts.
    async fn nearest_visible(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        embedding: &[f32],
        k: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let found = (self.vectors)
            .query(tenant, embedding, k, visibility.at)
            .await?;
        Ok(found
            .into_iter()
            .filter_map(|(key, similarity, metadata)| {
                let memory = vectors::read(tenant, &key, &metadata)?;
                visibility
                    .can_see(&memory)
                    .then(|| Hit::new(memory, similarity))
            })
            .collect())
    }

    /// The memory `id` of the tenant, if `visibility` may see it; one found expired is
    /// deleted on the way.
    async fn visible_memory(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<Option<Memory>, StoreError> {
        let key = vectors::key(tenant, id);
        let found = self.vectors.get(std::slice::from_ref(&key)).await?;
        let memory = found
            .get(&key)
            .and_then(|metadata| vectors::read(tenant, &key, metadata));
        if let Some(expired) = memory
            .as_ref()
            .filter(|m| !visibility.sees_alive(m.expires_at))
        {
            self.discard(vec![key], index::key(tenant, expired).into_iter().collect());
        }
        Ok(memory.filter(|m| visibility.can_see(m)))
    }

    /// Deletes memories a read found expired, in the background: their vectors, then their
    /// index keys. When `DISCARDS` are already under way, or the store is shutting down,
    /// they are left to the sweep.
    fn discard(&self, vector_keys: Vec<String>, index_keys: Vec<String>) {
        if vector_keys.is_empty() {
            return;
        }
        let Ok(permit) = Arc::clone(&self.discarding).try_acquire_owned() else {
            return;
        };
        let Ok(writing) = Arc::clone(&self.writes).try_read_owned() else {
            return;
        };
        let (vectors, objects) = (Arc::clone(&self.vectors), Arc::clone(&self.objects));
        tokio::spawn(async move {
            let _held = (permit, writing);
            if let Err(e) = delete_expired(&vectors, &*objects, &vector_keys, &index_keys).await {
                log::error(
                    "expired_cleanup_failed",
                    &e.to_string(),
                    &log::Fields::default(),
                );
            }
        });
    }

    /// Index entries read from a listing: the ones still there at `at`; the expired ones
    /// are handed to `discard`.
    fn alive(&self, entries: impl IntoIterator<Item = Entry>, at: i64) -> Vec<Entry> {
        let (expired, alive): (Vec<Entry>, Vec<Entry>) =
            (entries.into_iter()).partition(|e| memory::expired(e.expires_at, at));
        let (vector_keys, index_keys) = keys_of(expired);
        self.discard(vector_keys, index_keys);
        alive
    }

    async fn usage(&self, tenant: &Tenant) -> Result<Tally, StoreError> {
        self.counters
            .load(tenant)
            .await
            .map_err(|e| StoreError::unavailable("the usage counters could not be read", e))
    }

    /// Index keys under the tenant's prefix, newest first, still there at `at` that `keep`
    /// accepts, until `limit` are found, the keys run out, or `LISTING_SCAN_CAP` keys have
    /// been read.
    async fn scan_index(
        &self,
        tenant: &Tenant,
        from: Option<&After>,
        page: usize,
        limit: usize,
        at: i64,
        keep: impl Fn(&Entry) -> bool,
    ) -> Result<Vec<Entry>, StoreError> {
        let prefix = index::prefix(tenant);
        let mut found = Vec::new();
        let mut after: Option<String> = from.map(|a| index::after(tenant, &a.id));
        let mut scanned = 0;
        while found.len() < limit && scanned < LISTING_SCAN_CAP {
            let page = page.min(LISTING_SCAN_CAP - scanned);
            let keys = self
                .objects
                .list(&prefix, after.as_deref(), page)
                .await
                .map_err(state_failed)?;
            scanned += keys.len();
            let entries = keys.iter().filter_map(|k| Entry::parse(k));
            found.extend(self.alive(entries, at).into_iter().filter(|e| keep(e)));
            if keys.len() < page {
                break;
            }
            after = keys.last().cloned();
        }
        found.truncate(limit);
        Ok(found)
    }
}

impl Drop for S3Store {
    fn drop(&mut self) {
        if let Some((task, _)) = lock(&self.flusher.0).take() {
            task.abort();
        }
    }
}

/// The flush timer; it lives on the runtime, so it never keeps the process alive.
struct Flusher(std::sync::Mutex<Option<(tokio::task::JoinHandle<()>, Arc<tokio::sync::Notify>)>>);

impl Flusher {
    fn start(counters: Arc<Counters>, every: Duration) -> Flusher {
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.tick().await;
            loop {
                // A flush under way is never cut short: the stop is seen between flushes.
                tokio::select! {
                    _ = ticks.tick() => {}
                    () = stopped.notified() => return,
                }
                if let Err(failures) = counters.flush().await {
                    log_flush_failures(&failures);
                }
            }
        });
        Flusher(std::sync::Mutex::new(Some((task, stop))))
    }

    /// Stops the timer and waits for a flush it has under way.
    async fn stop(&self) {
        let Some((task, stop)) = lock(&self.0).take() else {
            return;
        };
        stop.notify_one();
        let _ = task.await;
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

fn log_flush_failures(failures: &[counters::FlushFailed]) {
    for failed in failures {
        log::error(
            "stats_flush_failed",
            &failed.error.to_string(),
            &log::Fields {
                tenant: Some(&failed.tenant),
                ..Default::default()
            },
        );
    }
}

/// `remember`'s steps: the checks run as they come, the writes are kept for `commit`, which
/// runs them on one task of their own.
struct Landing<'a> {
    store: &'a S3Store,
    tenant: &'a Tenant,
    visibility: &'a Visibility,
    new: Option<NewObjects>,
    old: Option<Memory>,
}

/// A new memory's vector and index key.
struct NewObjects {
    vector_key: String,
    index_key: String,
    metadata: serde_json::Value,
}

impl write::Steps for Landing<'_> {
    type Found = Memory;

    async fn visible(&mut self, id: &str) -> Result<Option<Memory>, StoreError> {
        (self.store)
            .visible_memory(self.tenant, self.visibility, id)
            .await
    }

    async fn neighbours(
        &mut self,
        seen: &Visibility,
        vector: &[f32],
    ) -> Result<Vec<Hit>, StoreError> {
        let k = dedup::NEIGHBOURS;
        self.store
            .nearest_visible(self.tenant, seen, vector, k)
            .await
    }

    /// Checks what S3 Vectors would refuse, so a refused memory writes nothing.
    async fn insert(&mut self, stored: &write::Stored, _: &[f32]) -> Result<(), StoreError> {
        let (tenant, memory) = (self.tenant, &stored.memory);
        let metadata = vectors::metadata(tenant, memory);
        vectors::check_budget(&metadata)?;
        let index_key = index::key(tenant, memory)
            .ok_or_else(|| StoreError::unavailable("S3", "the new memory's id is not a ULID"))?;
        self.new = Some(NewObjects {
            vector_key: vectors::key(tenant, &memory.id),
            index_key,
            metadata,
        });
        Ok(())
    }

    async fn delete(&mut self, old: Memory) -> Result<(), StoreError> {
        self.old = Some(old);
        Ok(())
    }

    async fn commit(self, _: write::Change<'_>, vector: &[f32]) -> Result<(), StoreError> {
        let store = self.store;
        let (vectors, objects) = (Arc::clone(&store.vectors), Arc::clone(&store.objects));
        let (tenant, vector, writing) = (
            self.tenant.clone(),
            vector.to_vec(),
            Arc::clone(&store.writes).read_owned().await,
        );
        let (new, old) = (self.new, self.old);
        // All the writes or none, whatever happens to the request: they run on their own
        // task, which a dropped request or a draining server does not stop.
        let landed = tokio::spawn(async move {
            let _writing = writing;
            land(&vectors, &*objects, &tenant, new, &vector, old).await
        });
        (landed.await).map_err(|e| StoreError::unavailable("S3 write task", e))?
    }
}

/// Writes the new memory (if any), then removes the old (if any).
async fn land(
    vectors: &Vectors,
    objects: &dyn Objects,
    tenant: &Tenant,
    new: Option<NewObjects>,
    vector: &[f32],
    old: Option<Memory>,
) -> Result<(), StoreError> {
    let Some(new) = new else {
        let Some(old) = old else {
            return Ok(());
        };
        let done = "an existing memory already says this";
        return remove_replaced(vectors, objects, tenant, &old, done).await;
    };
    // Vector first: an index key with no memory behind it would list as a gap.
    (vectors.put(&new.vector_key, vector, &new.metadata)).await?;
    let Err(e) = objects
        .put(&new.index_key, Vec::new(), Condition::Always)
        .await
    else {
        // New, then old: a retry of the removal is safe, and until it lands both are
        // visible, never neither.
        let Some(old) = old else {
            return Ok(());
        };
        let done = "the new memory was stored";
        return remove_replaced(vectors, objects, tenant, &old, done).await;
    };
    // Unlisted memories would still be recalled and counted as duplicates, so take the
    // vector back and let the agent retry the whole write.
    let failed = state_failed(e);
    match vectors.delete(&[new.vector_key]).await {
        Ok(()) => Err(failed),
        Err(undo) => {
            let fields = log::Fields {
                tenant: Some(tenant.as_str()),
                ..Default::default()
            };
            log::error("remember_undo_failed", &undo.to_string(), &fields);
            Err(StoreError::unavailable(
                "S3: the memory's vector was written but its index key was not, and the \
                 vector could not be taken back, so recall may find it while list_memories \
                 does not",
                failed,
            ))
        }
    }
}

/// Removes the memory a write replaces, tried `REPLACE_TRIES` times (a retry is safe); the
/// error says what was `done` and names the memory, for the agent to forget.
async fn remove_replaced(
    vectors: &Vectors,
    objects: &dyn Objects,
    tenant: &Tenant,
    old: &Memory,
    done: &str,
) -> Result<(), StoreError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match remove(vectors, objects, tenant, old).await {
            Ok(()) => return Ok(()),
            Err(_) if tries < REPLACE_TRIES => {
                tokio::time::sleep(Duration::from_millis(100 * tries)).await;
            }
            Err(e) => {
                let what = format!(
                    "S3: {done}, but the memory it replaces ({}) could not be removed; forget it \
                     to finish",
                    old.id
                );
                return Err(StoreError::unavailable(what, e));
            }
        }
    }
}

/// Deletes a memory: its vector, then its index key, best effort (a leftover key only
/// costs a listing slot and a count). Safe to repeat.
async fn remove(
    vectors: &Vectors,
    objects: &dyn Objects,
    tenant: &Tenant,
    memory: &Memory,
) -> Result<(), StoreError> {
    vectors.delete(&[vectors::key(tenant, &memory.id)]).await?;
    let cleaned = match index::key(tenant, memory) {
        Some(k) => objects.delete(&[k]).await.map_err(|e| e.to_string()),
        None => Err("the id is not a ULID, so its index key cannot be named".into()),
    };
    if let Err(message) = cleaned {
        log::error(
            "index_cleanup_failed",
            &message,
            &log::Fields {
                tenant: Some(tenant.as_str()),
                ..Default::default()
            },
        );
    }
    Ok(())
}

fn state_failed(e: objects::ObjectError) -> StoreError {
    match e {
        objects::ObjectError::Failed { operation, cause } => {
            StoreError::unavailable(format!("S3 {operation} failed"), cause)
        }
        precondition => StoreError::unavailable("S3", precondition),
    }
}

/// Fills a memory's usage from the counters.
fn with_usage(mut memory: Memory, tally: &Tally) -> Memory {
    if let Some(usage) = tally.get(&memory.id) {
        memory.access_count = usage.access;
        memory.last_accessed_at = chrono::DateTime::parse_from_rfc3339(&usage.last_at)
            .ok()
            .map(|t| t.timestamp_millis());
    }
    memory
}

/// Each entry's memory as its vector keys and its index keys, to delete.
fn keys_of(entries: Vec<Entry>) -> (Vec<String>, Vec<String>) {
    let vector_keys = entries.iter().map(vector_key_of).collect();
    (vector_keys, entries.into_iter().map(|e| e.key).collect())
}

/// The vector key of the memory an index entry lists.
fn vector_key_of(entry: &Entry) -> String {
    // The tenant was checked when the memory was written, and keys are made only from it.
    vectors::key(&Tenant::new_unchecked(entry.tenant.clone()), &entry.id)
}

/// Deletes expired memories' vectors, then their index keys (a key left behind only costs
/// a listing slot, and the next pass finds it again). Safe to repeat.
async fn delete_expired(
    vectors: &Vectors,
    objects: &dyn Objects,
    vector_keys: &[String],
    index_keys: &[String],
) -> Result<(), StoreError> {
    vectors.delete(vector_keys).await?;
    objects.delete(index_keys).await.map_err(state_failed)
}

fn digest_of(visibility: &Visibility) -> Option<String> {
    visibility.conversation.as_ref().map(index::digest)
}

#[async_trait]
impl MemoryStore for S3Store {
    async fn remember(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        memory: NewMemory,
        embedding: &[f32],
        rule: dedup::Rule,
    ) -> Result<Remembered, StoreError> {
        self.check_model(true).await?;
        let steps = Landing {
            store: self,
            tenant,
            visibility,
            new: None,
            old: None,
        };
        write::remember(steps, visibility, memory, embedding, rule).await
    }

    /// By meaning only: S3 Vectors has no text index, so `query.terms` find nothing.
    async fn search(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        query: &Query<'_>,
    ) -> Result<Matches, StoreError> {
        self.check_model(false).await?;
        let hits = self
            .nearest_visible(tenant, visibility, query.vector, query.k)
            .await?;
        if hits.is_empty() {
            // Nothing to rank: no counts read, and none kept for a tenant that holds nothing.
            return Ok(Matches::default());
        }
        let tally = self.usage(tenant).await?;
        let hits = hits
            .into_iter()
            .map(|h| Hit::new(with_usage(Memory::clone(&h.memory), &tally), h.similarity))
            .collect();
        Ok(Matches {
            nearest: keep_nearest(hits, query.k),
            by_words: Vec::new(),
            idf: Vec::new(),
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
        let digest = digest_of(visibility);
        // Unfiltered, every key counts, so a page of `limit` is exactly enough.
        let page = if memory_type.is_none() && digest.is_none() {
            limit.max(1)
        } else {
            FILTERED_PAGE
        };
        let entries = self
            .scan_index(tenant, after, page, limit, visibility.at, |e| {
                e.visible_to(digest.as_deref())
                    && memory_type.is_none_or(|t| e.memory_type == t.as_str())
            })
            .await?;
        let keys: Vec<String> = entries
            .iter()
            .map(|e| vectors::key(tenant, &e.id))
            .collect();
        let bodies = self.vectors.get(&keys).await?;
        let tally = if bodies.is_empty() {
            Tally::new()
        } else {
            self.usage(tenant).await?
        };
        // Index order is newest first; the body, not the key, decides visibility.
        Ok(keys
            .iter()
            .filter_map(|key| vectors::read(tenant, key, bodies.get(key)?))
            .filter(|m| visibility.can_see(m))
            .map(|m| with_usage(m, &tally))
            .collect())
    }

    async fn get(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<Option<Memory>, StoreError> {
        let Some(memory) = self.visible_memory(tenant, visibility, id).await? else {
            return Ok(None);
        };
        // Whole, as `list` gives it: its uses counted by every pod with it.
        let tally = self.usage(tenant).await?;
        Ok(Some(with_usage(memory, &tally)))
    }

    async fn delete(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        id: &str,
    ) -> Result<bool, StoreError> {
        let Some(memory) = self.visible_memory(tenant, visibility, id).await? else {
            return Ok(false);
        };
        remove(&self.vectors, &*self.objects, tenant, &memory).await?;
        Ok(true)
    }

    async fn calibration(&self) -> Result<Option<Fit>, StoreError> {
        // One read of the state bucket, no check of the index: the reader takes the fit only
        // if it names its model, and servers read it at start, when S3 makes no other call.
        let found = self.objects.get(&self.calibration_key).await;
        let Some(found) = found.map_err(state_failed)? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&found.body);
        super::read_fit(&self.vectors.location(), &text).map(Some)
    }

    async fn record_calibration(&self, fit: &Fit) -> Result<(), StoreError> {
        self.check_model(false).await?;
        let body = super::fit_text(fit).into_bytes();
        (self
            .objects
            .put(&self.calibration_key, body, Condition::Always))
        .await
        .map_err(state_failed)
    }

    async fn count_by_type(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
    ) -> Result<Counts, StoreError> {
        let keys = self
            .objects
            .list(&index::prefix(tenant), None, self.stats_scan_cap)
            .await
            .map_err(state_failed)?;
        let digest = digest_of(visibility);
        let entries = keys.iter().filter_map(|k| Entry::parse(k));
        let visible: Vec<Entry> = (self.alive(entries, visibility.at).into_iter())
            .filter(|e| e.visible_to(digest.as_deref()))
            .collect();
        let mut counts = Counts::from_tallies(
            visible
                .iter()
                .filter_map(|e| MemoryType::parse(&e.memory_type).map(|t| (t, 1))),
        );
        // A type this version does not know still counts towards the total.
        counts.total = visible.len() as u64;
        counts.scan_cap = (keys.len() >= self.stats_scan_cap).then_some(self.stats_scan_cap);
        Ok(counts)
    }

    async fn record_access(
        &self,
        tenant: &Tenant,
        visibility: &Visibility,
        used: &[&Memory],
        at: i64,
    ) -> Result<(), StoreError> {
        for memory in used.iter().filter(|m| visibility.can_see(m)) {
            self.counters.record(tenant, &memory.id, at);
        }
        Ok(())
    }

    /// In index-key order (tenant, then newest first); the cursor is the last key listed.
    async fn export(
        &self,
        only: &[Tenant],
        at: i64,
        from: Option<&str>,
        limit: usize,
    ) -> Result<Exported, StoreError> {
        let mut prefixes: Vec<String> = if only.is_empty() {
            vec![index::ALL.to_owned()]
        } else {
            only.iter().map(index::prefix).collect()
        };
        prefixes.sort();
        prefixes.dedup();
        let mut keys = Vec::new();
        for prefix in prefixes {
            let after = match from {
                Some(last) if last.starts_with(&prefix) => Some(last),
                // The last page ended in a later tenant.
                Some(last) if last > prefix.as_str() => continue,
                _ => None,
            };
            let listed = (self.objects)
                .list(&prefix, after, limit - keys.len())
                .await
                .map_err(state_failed)?;
            keys.extend(listed);
            if keys.len() >= limit {
                break;
            }
        }
        let next = (keys.len() >= limit)
            .then(|| keys.last().cloned())
            .flatten();
        let entries: Vec<Entry> = (keys.iter().filter_map(|k| Entry::parse(k)))
            .filter(|e| !memory::expired(e.expires_at, at))
            .collect();
        let vector_keys: Vec<String> = entries.iter().map(vector_key_of).collect();
        let mut bodies = self.vectors.get_whole(&vector_keys).await?;
        let mut tallies: HashMap<String, Tally> = HashMap::new();
        let mut memories = Vec::with_capacity(entries.len());
        for (entry, key) in entries.iter().zip(&vector_keys) {
            let tenant = Tenant::new_unchecked(entry.tenant.clone());
            let Some((metadata, embedding)) = bodies.remove(key) else {
                continue;
            };
            let Some(memory) = vectors::read(&tenant, key, &metadata) else {
                continue;
            };
            if !tallies.contains_key(&entry.tenant) {
                tallies.insert(entry.tenant.clone(), self.usage(&tenant).await?);
            }
            let memory = with_usage(memory, &tallies[&entry.tenant]);
            memories.push(Portable {
                tenant,
                memory,
                embedding,
            });
        }
        Ok(Exported { memories, next })
    }

    /// Each memory not already in the index: its vector, its index key, and its uses as
    /// this pod's counts (written by the flush that ends the import). A run cut short
    /// between a memory's write and that flush loses its uses, never doubles them. A memory
    /// whose vector is there gets its index key again (a run cut short between the two),
    /// and is counted as held.
    async fn import(&self, memories: &[Portable]) -> Result<usize, StoreError> {
        self.check_model(true).await?;
        let keys: Vec<String> = (memories.iter())
            .map(|p| vectors::key(&p.tenant, &p.memory.id))
            .collect();
        let present = self.vectors.get(&keys).await?;
        let mut written = 0;
        for (p, key) in memories.iter().zip(&keys) {
            let index_key = index::key(&p.tenant, &p.memory).ok_or_else(|| {
                StoreError::unavailable("S3", format!("{} is not a ULID", p.memory.id))
            })?;
            let held = present.contains_key(key);
            if !held {
                let metadata = vectors::metadata(&p.tenant, &p.memory);
                vectors::check_budget(&metadata)?;
                self.vectors.put(key, &p.embedding, &metadata).await?;
            }
            (self.objects)
                .put(&index_key, Vec::new(), Condition::Always)
                .await
                .map_err(state_failed)?;
            if held {
                continue;
            }
            if p.memory.access_count > 0 {
                let last = p.memory.last_accessed_at.unwrap_or(p.memory.created_at);
                (self.counters).record_uses(&p.tenant, &p.memory.id, p.memory.access_count, last);
            }
            written += 1;
        }
        Ok(written)
    }

    /// One stretch of `SWEEP_SCAN` index keys, across tenants, from where the last pass
    /// stopped: the expired memories among them (up to `limit`) are deleted. There is more
    /// while keys come after the stretch, so a round (`sweep::round`) goes on to the end.
    async fn expire(&self, at: i64, limit: usize) -> Result<Expired, StoreError> {
        let from = lock(&self.sweep_from).clone();
        let keys = (self.objects)
            .list(index::ALL, from.as_deref(), self.sweep_scan)
            .await
            .map_err(state_failed)?;
        let mut expired: Vec<Entry> = (keys.iter().filter_map(|k| Entry::parse(k)))
            .filter(|e| memory::expired(e.expires_at, at))
            .collect();
        // The next pass goes on after the last key this one dealt with, and from the first
        // tenant again once the keys ran out.
        let next = if expired.len() > limit {
            expired.truncate(limit);
            expired.last().map(|e| e.key.clone())
        } else if keys.len() < self.sweep_scan {
            None
        } else {
            keys.last().cloned()
        };
        let (vector_keys, index_keys) = keys_of(expired);
        delete_expired(&self.vectors, &*self.objects, &vector_keys, &index_keys).await?;
        let more = next.is_some();
        *lock(&self.sweep_from) = next;
        Ok(Expired {
            deleted: index_keys.len(),
            more,
        })
    }

    /// At shutdown: stops the flush timer, waits for `remember`s still writing, then
    /// writes every tenant's pending counts, each failure logged apart.
    async fn flush(&self) -> Result<(), StoreError> {
        self.flusher.stop().await;
        if tokio::time::timeout(WRITES_DRAIN, self.writes.write())
            .await
            .is_err()
        {
            log::error(
                "remember_drain_timed_out",
                "memories still being written at shutdown were left to finish on their own",
                &log::Fields::default(),
            );
        }
        let Err(failures) = self.counters.flush().await else {
            return Ok(());
        };
        log_flush_failures(&failures);
        let tenants = failures.len();
        let first = failures.into_iter().next().map(|f| f.error);
        Err(StoreError::unavailable(
            format!("the usage counters of {tenants} tenant(s) could not be written"),
            first.map_or_else(|| "unknown".to_owned(), |e| e.to_string()),
        ))
    }

    fn describe(&self) -> String {
        format!(
            "S3 Vectors {} with state in s3://{}",
            self.vectors.describe(),
            self.state_bucket
        )
    }

    fn exact_counts(&self) -> bool {
        false
    }

    fn width_fixed_by_index(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
