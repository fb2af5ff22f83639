//! The tenants' indexes a store holds in this process, within a memory budget, each
//! labelled with the version of the store it shows. The store is the truth: an index is
//! built from it on first use, this process's own writes update it in place, and a search
//! that finds the store at another version than the label (another process wrote) builds
//! it again, or catches it up. Both stores speak one protocol for it (`Coherence`, run by
//! `search`); what "version" means is theirs: a per-tenant `memory_versions` row that
//! triggers bump, which SQLite reads under its connection's lock (and builds on a connection
//! of its own, `store/sqlite/builds.rs`) and PostgreSQL by a query. Builds take turns
//! (`BUILDS_AT_ONCE`). Past the budget the least recently used tenants are dropped, to be
//! rebuilt when next needed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use async_trait::async_trait;

use super::exact::{VectorFiles, VectorHome};

/// The memory the indexes may hold together unless `INDEX_BUDGET_MB` says otherwise: about
/// 150,000 memories at width 384. A tenant larger than the budget is still indexed, alone.
pub const BUDGET_BYTES: usize = 512 << 20;

/// How a store keeps its tenants' indexes: what they may weigh together on the heap
/// (`INDEX_BUDGET_MB`), and where a large tenant's exact vectors go (`INDEX_VECTORS_DIR`).
#[derive(Debug, Clone, PartialEq)]
pub struct Indexing {
    pub budget: usize,
    pub vectors: VectorHome,
    /// An index whose exact vectors reach this many bytes moves them to a file
    /// (`exact::FROM_BYTES`; tests map from the first vector).
    pub map_from: usize,
}

impl Indexing {
    /// The default budget, every vector on the heap.
    pub const IN_MEMORY: Indexing = Indexing {
        budget: BUDGET_BYTES,
        vectors: VectorHome::Memory,
        map_from: super::exact::FROM_BYTES,
    };
}

/// An index weighing more than this is searched on a blocking thread; a lighter one is searched
/// where the request runs. Below it a scan takes less than about 0.2 ms here, and handing it to
/// another thread cost more than that: 12 % fewer PostgreSQL recalls/s at 10k memories when every
/// scan was handed off (BENCHMARKS.md, "Issue 15: the architecture step, A/B against the build
/// before it").
pub const HAND_OFF_BYTES: usize = 32 << 20;

/// Indexes a process builds from its store at once. A build holds its whole index on the
/// heap before it is weighed against the budget and reads every row of its tenant, so a
/// restart into many first recalls builds two at a time (one per core here) while every
/// other call is served; the rest wait their turn (docs/operations.md, "Memory use").
pub const BUILDS_AT_ONCE: usize = 2;

/// What a cached index weighs against the budget, without walking it: it is weighed after
/// every write. An index that holds no memory is not kept.
pub trait Weigh {
    fn bytes(&self) -> usize;
    fn is_empty(&self) -> bool;
    /// What a search of it reads, which decides where the search runs (`HAND_OFF_BYTES`):
    /// more than `bytes` where part of the index is not on the heap.
    fn searched_bytes(&self) -> usize {
        self.bytes()
    }
}

/// A store's version of what a tenant's index is built from: any change to it, by anyone,
/// gives another version.
pub type Version = i64;

/// How a store that searches in this process (SQLite, PostgreSQL) tells whether a tenant's
/// index still shows what it holds, and builds one that does. `TenantCache::search` runs the
/// protocol: read the index if it shows the version now; otherwise, in the tenant's turn,
/// catch it up with the changes since its version where the store can tell them, or build
/// it in a build's turn; then read it.
#[async_trait]
pub trait Coherence: Send + Sync {
    type Index: Weigh + Send + Sync + 'static;
    type Error: Send + From<Interrupted>;
    /// What changed in a tenant between two versions, read from the store.
    type Changes: Send + 'static;

    /// The tenant's version as committed now.
    async fn version(&self, tenant: &str) -> Result<Version, Self::Error>;

    /// `read` run on the slot's index if it shows the tenant's version now; `read` back
    /// otherwise. The version is asked first; a store that can check it and read in one
    /// step does so (SQLite, one blocking call: `store/sqlite/builds.rs`).
    async fn read_current<R, F>(
        &self,
        tenant: &str,
        slot: &Arc<Slot<Self::Index>>,
        read: F,
    ) -> Result<Result<R, F>, Self::Error>
    where
        R: Send + 'static,
        F: FnOnce(&Self::Index) -> R + Send + 'static,
    {
        let committed = self.version(tenant).await?;
        if !slot.shows(committed) {
            return Ok(Err(read));
        }
        let found = Arc::clone(slot);
        Ok(run(slot.heavy(), move || found.read_at(committed, read)).await?)
    }

    /// Builds the tenant's index as the store holds it now into `slot`
    /// (`TenantCache::install`), labelled with a version read before its rows, so the label
    /// is never newer than they are. The caller holds the tenant's turn and a build's.
    async fn build(
        &self,
        cache: &TenantCache<Self::Index>,
        tenant: &str,
        slot: &Arc<Slot<Self::Index>>,
    ) -> Result<(), Self::Error>;

    /// What changed in the tenant since `from`, and the version it brings an index to, when
    /// the store can still tell all of it; None sends the caller to `build`.
    async fn changes(
        &self,
        tenant: &str,
        from: Version,
    ) -> Result<Option<(Version, Self::Changes)>, Self::Error>;

    /// Applies `changes` to an index that showed the version they start from.
    fn catch_up(index: &mut Self::Index, changes: Self::Changes);

    /// `read` run on the index a build or a catch-up just brought up to date (or past it:
    /// a write may have moved it on since), None if it was dropped meanwhile.
    async fn read_built<R, F>(
        &self,
        tenant: &str,
        slot: &Arc<Slot<Self::Index>>,
        read: F,
    ) -> Result<Option<R>, Self::Error>
    where
        R: Send + 'static,
        F: FnOnce(&Self::Index) -> R + Send + 'static,
    {
        let _ = tenant;
        let found = Arc::clone(slot);
        Ok(run(slot.heavy(), move || found.read_held(read)).await?)
    }
}

/// What a cache holds against its budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    pub tenants: usize,
    pub bytes: usize,
    pub budget: usize,
    /// What they keep in mapped files besides (`exact.rs`): the page cache's, not the heap's.
    pub mapped: usize,
    /// Indexes built from the store since the process started.
    pub builds: u64,
    /// Indexes brought up to date with another process's writes instead.
    pub catch_ups: u64,
    /// Indexes being built now (`BUILDS_AT_ONCE` at most, waiting ones not counted).
    pub building: usize,
}

/// One tenant's place in the cache.
pub struct Slot<T> {
    /// Held by this process's writes to the tenant, and by a rebuild, one at a time.
    pub writes: Arc<tokio::sync::Mutex<()>>,
    /// None until built, and after a write this process could not apply.
    held: RwLock<Option<(Version, T)>>,
    /// What the index weighed when it was built.
    weight: std::sync::atomic::AtomicUsize,
    /// Whether a search of it is heavy (`HAND_OFF_BYTES`), as of its last change.
    heavy: std::sync::atomic::AtomicBool,
}

impl<T> Slot<T> {
    fn empty() -> Slot<T> {
        Slot {
            writes: Arc::new(tokio::sync::Mutex::new(())),
            held: RwLock::new(None),
            weight: std::sync::atomic::AtomicUsize::new(0),
            heavy: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// `read` run on the index if it shows exactly `version`; `read` back otherwise.
    /// Versions only grow, but a store restored from a backup can go back: an index from a
    /// newer past is stale too.
    pub fn read_at<R, F: FnOnce(&T) -> R>(&self, version: Version, read: F) -> Result<R, F> {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        match held.as_ref() {
            Some((at, index)) if *at == version => Ok(read(index)),
            _ => Err(read),
        }
    }

    /// `read` run on the index, whatever version it shows.
    pub fn read_held<R>(&self, read: impl FnOnce(&T) -> R) -> Option<R> {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        held.as_ref().map(|(_, index)| read(index))
    }

    /// Whether the index shows exactly `version`.
    pub fn shows(&self, version: Version) -> bool {
        self.read_at(version, |_| ()).is_ok()
    }

    /// The version the index shows, if the slot holds one.
    pub fn version(&self) -> Option<Version> {
        let held = self.held.read().unwrap_or_else(|e| e.into_inner());
        held.as_ref().map(|(at, _)| *at)
    }

    /// Applies this process's write, which moved the store from `from` to `to`, to an index
    /// showing `from`; any other index is dropped, to be rebuilt. Returns what the slot
    /// weighs now, or None if it holds nothing.
    fn apply(&self, from: Version, to: Version, change: impl FnOnce(&mut T)) -> Option<usize>
    where
        T: Weigh,
    {
        let mut held = self.held.write().unwrap_or_else(|e| e.into_inner());
        match held.as_mut() {
            Some((at, index)) if *at == from => {
                change(index);
                *at = to;
                self.note_heavy(index);
                weight(index)
            }
            _ => {
                *held = None;
                None
            }
        }
    }

    /// What the slot weighed when the cache last weighed it (the cache's total is the sum
    /// of these, so it changes only under the cache's lock).
    fn weight(&self) -> usize {
        self.weight.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn holds_nothing(&self) -> bool {
        self.held
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Whether a search of this index is CPU work to take off the async threads.
    pub fn heavy(&self) -> bool {
        self.heavy.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn note_heavy(&self, index: &T)
    where
        T: Weigh,
    {
        let heavy = index.searched_bytes() > HAND_OFF_BYTES;
        self.heavy
            .store(heavy, std::sync::atomic::Ordering::Relaxed);
    }
}

pub struct TenantCache<T> {
    state: Mutex<State<T>>,
    budget: usize,
    files: VectorFiles,
    builds: AtomicU64,
    catch_ups: AtomicU64,
    /// Turns to build (`BUILDS_AT_ONCE`), and how many are taken.
    turns: tokio::sync::Semaphore,
    building: AtomicUsize,
}

/// A build's turn (`TenantCache::building`), given back when dropped; a build that could
/// not wait for one (`TenantCache::building_out_of_turn`) is counted all the same.
pub struct Building<'a> {
    _turn: Option<tokio::sync::SemaphorePermit<'a>>,
    building: &'a AtomicUsize,
}

impl Drop for Building<'_> {
    fn drop(&mut self) {
        self.building.fetch_sub(1, Ordering::Relaxed);
    }
}

struct State<T> {
    tenants: HashMap<String, Held<T>>,
    /// The sum of the held slots' weights.
    total: usize,
    uses: u64,
}

struct Held<T> {
    slot: Arc<Slot<T>>,
    used: u64,
}

impl<T: Weigh + Send + Sync + 'static> TenantCache<T> {
    /// A cache whose indexes hold at most `budget` bytes together, every vector on the heap.
    #[cfg(test)]
    pub fn new(budget: usize) -> TenantCache<T> {
        TenantCache::with_files(budget, VectorFiles::heap())
    }

    /// The cache `indexing` describes; an error if the directory it chose for vectors
    /// cannot hold a file.
    pub fn open(indexing: &Indexing) -> std::io::Result<TenantCache<T>> {
        Ok(TenantCache::with_files(
            indexing.budget,
            VectorFiles::open(&indexing.vectors, indexing.map_from)?,
        ))
    }

    fn with_files(budget: usize, files: VectorFiles) -> TenantCache<T> {
        TenantCache {
            state: Mutex::new(State {
                tenants: HashMap::new(),
                total: 0,
                uses: 0,
            }),
            budget,
            files,
            builds: AtomicU64::new(0),
            catch_ups: AtomicU64::new(0),
            turns: tokio::sync::Semaphore::new(BUILDS_AT_ONCE),
            building: AtomicUsize::new(0),
        }
    }

    /// Waits for a turn to build an index from the store (`BUILDS_AT_ONCE`), held until the
    /// guard is dropped.
    pub async fn building(&self) -> Building<'_> {
        // The semaphore is never closed.
        let turn = self
            .turns
            .acquire()
            .await
            .expect("build turns are never closed");
        self.building.fetch_add(1, Ordering::Relaxed);
        Building {
            _turn: Some(turn),
            building: &self.building,
        }
    }

    /// Counts a build that cannot wait for a turn: a write holding the store's lock that
    /// finds another process wrote since its index was built (`current`). Rare, and waiting
    /// there could hold a turn's builder up behind the lock it holds.
    pub fn building_out_of_turn(&self) -> Building<'_> {
        self.building.fetch_add(1, Ordering::Relaxed);
        Building {
            _turn: None,
            building: &self.building,
        }
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the cache holds, for `/metrics`.
    pub fn usage(&self) -> Usage {
        let state = self.state();
        Usage {
            tenants: state.tenants.len(),
            bytes: state.total,
            budget: self.budget,
            mapped: self.files.mapped_bytes(),
            builds: self.builds.load(Ordering::Relaxed),
            catch_ups: self.catch_ups.load(Ordering::Relaxed),
            building: self.building.load(Ordering::Relaxed),
        }
    }

    /// Where the indexes built for this cache keep their exact vectors.
    pub fn files(&self) -> &VectorFiles {
        &self.files
    }

    /// The tenant's slot, empty if this process holds no index of it.
    pub fn slot(&self, tenant: &str) -> Arc<Slot<T>> {
        let mut state = self.state();
        state.uses += 1;
        let now = state.uses;
        // Looked up before it is inserted: a tenant's name is copied once, not per search.
        if let Some(held) = state.tenants.get_mut(tenant) {
            held.used = now;
            return Arc::clone(&held.slot);
        }
        let slot = Arc::new(Slot::empty());
        let held = Held {
            slot: Arc::clone(&slot),
            used: now,
        };
        state.tenants.insert(tenant.to_owned(), held);
        slot
    }

    /// The tenant's slot if this process holds one, for a write to update.
    pub fn held(&self, tenant: &str) -> Option<Arc<Slot<T>>> {
        self.state()
            .tenants
            .get(tenant)
            .map(|held| Arc::clone(&held.slot))
    }

    /// Puts a freshly built index of `tenant`, showing `version`, in `slot`, and weighs it.
    pub fn install(&self, tenant: &str, slot: &Slot<T>, version: Version, index: T) {
        let weight = weight(&index);
        slot.note_heavy(&index);
        *slot.held.write().unwrap_or_else(|e| e.into_inner()) = Some((version, index));
        self.builds.fetch_add(1, Ordering::Relaxed);
        self.weigh(tenant, slot, weight);
    }

    /// Applies another process's writes, which moved the store from `from` to `to`, as
    /// `apply` does this process's, on a blocking thread: like a build's rows, they may be
    /// many (as many as the store's log of changes holds). The caller holds the tenant's turn.
    pub async fn catch_up(
        &self,
        tenant: &str,
        slot: &Arc<Slot<T>>,
        from: Version,
        to: Version,
        change: impl FnOnce(&mut T) + Send + 'static,
    ) -> Result<(), Interrupted> {
        self.catch_ups.fetch_add(1, Ordering::Relaxed);
        let held = Arc::clone(slot);
        let weight = tokio::task::spawn_blocking(move || held.apply(from, to, change)).await?;
        self.weigh(tenant, slot, weight);
        Ok(())
    }

    /// Applies this process's write to `tenant`, which moved the store from `from` to `to`,
    /// to the slot's index if it shows `from` (any other is dropped, to be rebuilt), and
    /// weighs it again.
    pub fn apply(
        &self,
        tenant: &str,
        slot: &Slot<T>,
        from: Version,
        to: Version,
        change: impl FnOnce(&mut T),
    ) {
        let weight = slot.apply(from, to, change);
        self.weigh(tenant, slot, weight);
    }

    /// Lets go of a slot a call took and built nothing in (a write that changed nothing, a
    /// build that failed), so a tenant that holds nothing leaves no entry behind.
    pub fn release(&self, tenant: &str, slot: &Slot<T>) {
        if slot.holds_nothing() {
            self.weigh(tenant, slot, None);
        }
    }

    /// Counts `slot` at `weight` and keeps the budget, which may push other tenants out; a
    /// slot that holds nothing (None) leaves. Writes to one tenant come one at a time, so
    /// the slot is weighed in the order it changed.
    fn weigh(&self, tenant: &str, slot: &Slot<T>, weight: Option<usize>) {
        let mut state = self.state();
        let kept = weight.is_some();
        let weight = weight.unwrap_or(0);
        let before = slot
            .weight
            .swap(weight, std::sync::atomic::Ordering::Relaxed);
        // A slot evicted meanwhile counts no more.
        if !(state.tenants.get(tenant)).is_some_and(|held| std::ptr::eq(&*held.slot, slot)) {
            return;
        }
        state.total = state.total - before + weight;
        if !kept {
            state.tenants.remove(tenant);
        }
        evict(&mut state, tenant, self.budget);
    }

    /// The tenant's slot showing `version`, the store's version now: built with `load` first
    /// if this process holds none, or one of another version. For a write that holds the
    /// store's lock and finds that another process wrote since its index was built (SQLite's
    /// `remember`): the build cannot wait for a turn there, and is rare.
    pub fn current<E>(
        &self,
        tenant: &str,
        version: Version,
        load: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<Slot<T>>, E> {
        let slot = self.slot(tenant);
        if !slot.shows(version) {
            let _building = self.building_out_of_turn();
            match load() {
                Ok(index) => self.install(tenant, &slot, version, index),
                Err(e) => {
                    self.release(tenant, &slot);
                    return Err(e);
                }
            }
        }
        Ok(slot)
    }

    /// Runs `read` on the tenant's index as `source` holds it now, off the async threads
    /// when the index is heavy (`HAND_OFF_BYTES`); the index is built first if this process
    /// holds none, or one of another version.
    pub async fn search<C, R>(
        &self,
        source: &C,
        tenant: &str,
        read: impl FnOnce(&T) -> R + Send + 'static,
    ) -> Result<R, C::Error>
    where
        C: Coherence<Index = T>,
        R: Send + 'static,
    {
        let slot = self.slot(tenant);
        let answer = self.search_slot(source, tenant, &slot, read).await;
        if answer.is_err() {
            self.release(tenant, &slot);
        }
        answer
    }

    async fn search_slot<C, R>(
        &self,
        source: &C,
        tenant: &str,
        slot: &Arc<Slot<T>>,
        read: impl FnOnce(&T) -> R + Send + 'static,
    ) -> Result<R, C::Error>
    where
        C: Coherence<Index = T>,
        R: Send + 'static,
    {
        let read = match source.read_current(tenant, slot, read).await? {
            Ok(answer) => return Ok(answer),
            Err(read) => read,
        };
        // One catch-up or build of a tenant at a time (its writes wait for a build too), and
        // whoever waited for it may find it done. What it brings the index to is as new as
        // the version read here, or newer.
        let _turn = slot.writes.lock().await;
        let now = source.version(tenant).await?;
        if !slot.shows(now) {
            // Another process's writes since the index's version: read only what they changed, when
            // the store can still say it (BENCHMARKS.md, "Issue 21, item 4: no rebuild after
            // another replica's write (PostgreSQL)").
            let changes = match slot.version().filter(|from| *from < now) {
                Some(from) => (source.changes(tenant, from).await?).map(|c| (from, c)),
                None => None,
            };
            match changes {
                Some((from, (to, changes))) => {
                    let change = move |index: &mut T| C::catch_up(index, changes);
                    self.catch_up(tenant, slot, from, to, change).await?;
                }
                None => {
                    let _building = self.building().await;
                    source.build(self, tenant, slot).await?;
                }
            }
        }
        // Only a write that could not be applied empties a slot: the index just checked or
        // built is there unless such a write came in between.
        let read = source.read_built(tenant, slot, read).await?;
        Ok(read.ok_or(Interrupted::Dropped)?)
    }
}

/// Why a search of a cached index did not finish.
#[derive(Debug, thiserror::Error)]
pub enum Interrupted {
    #[error("the search task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("the tenant's index was dropped while it was read")]
    Dropped,
}

/// What `index` weighs, or None if it holds no memory.
fn weight<T: Weigh>(index: &T) -> Option<usize> {
    (!index.is_empty()).then(|| index.bytes())
}

/// `work` on a blocking thread when it is `heavy`, here otherwise.
pub async fn run<R: Send + 'static>(
    heavy: bool,
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, Interrupted> {
    if heavy {
        Ok(tokio::task::spawn_blocking(work).await?)
    } else {
        Ok(work())
    }
}

/// Drops the least recently used entries, never `keep`, until the rest fit `budget`.
fn evict<T>(state: &mut State<T>, keep: &str, budget: usize) {
    while state.total > budget {
        let Some(oldest) = state
            .tenants
            .iter()
            .filter(|(t, _)| t.as_str() != keep)
            .min_by_key(|(_, held)| held.used)
            .map(|(t, _)| t.clone())
        else {
            return;
        };
        if let Some(held) = state.tenants.remove(&oldest) {
            state.total -= held.slot.weight();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sized(usize);
    impl Weigh for Sized {
        fn bytes(&self) -> usize {
            self.0
        }
        fn is_empty(&self) -> bool {
            self.0 == 0
        }
    }

    const BUDGET: usize = 900;

    fn built(cache: &TenantCache<Sized>, tenant: &str, bytes: usize) {
        let slot = cache.slot(tenant);
        cache.install(tenant, &slot, 1, Sized(bytes));
    }

    /// A store whose version is a counter and whose log of changes starts at `log_from`:
    /// an index built at version v weighs 10 * v + 1, and each change since adds one.
    struct Counter {
        version: std::sync::atomic::AtomicI64,
        log_from: std::sync::atomic::AtomicI64,
        builds: AtomicUsize,
    }

    #[async_trait]
    impl Coherence for Counter {
        type Index = Sized;
        type Error = Interrupted;
        type Changes = usize;

        async fn version(&self, _: &str) -> Result<Version, Interrupted> {
            Ok(self.version.load(Ordering::Relaxed))
        }

        async fn build(
            &self,
            cache: &TenantCache<Sized>,
            tenant: &str,
            slot: &Arc<Slot<Sized>>,
        ) -> Result<(), Interrupted> {
            self.builds.fetch_add(1, Ordering::Relaxed);
            let version = self.version.load(Ordering::Relaxed);
            cache.install(tenant, slot, version, Sized(10 * version as usize + 1));
            Ok(())
        }

        async fn changes(
            &self,
            _: &str,
            from: Version,
        ) -> Result<Option<(Version, usize)>, Interrupted> {
            let now = self.version.load(Ordering::Relaxed);
            Ok((from >= self.log_from.load(Ordering::Relaxed))
                .then(|| (now, (now - from) as usize)))
        }

        fn catch_up(index: &mut Sized, changes: usize) {
            index.0 += changes;
        }
    }

    #[tokio::test]
    async fn a_search_reads_a_current_index_catches_up_a_stale_one_and_builds_when_it_must() {
        let cache: TenantCache<Sized> = TenantCache::new(usize::MAX);
        let store = Counter {
            version: 1.into(),
            log_from: 0.into(),
            builds: AtomicUsize::new(0),
        };
        let weight = |s: &Sized| s.0;
        assert_eq!(cache.search(&store, "a", weight).await.unwrap(), 11);
        assert_eq!(cache.search(&store, "a", weight).await.unwrap(), 11);
        assert_eq!(store.builds.load(Ordering::Relaxed), 1, "built once");
        // Another process wrote twice: the log still holds both changes.
        store.version.store(3, Ordering::Relaxed);
        assert_eq!(cache.search(&store, "a", weight).await.unwrap(), 13);
        assert_eq!((cache.usage().builds, cache.usage().catch_ups), (1, 1));
        // The log was trimmed past the index's version: it is built again.
        store.log_from.store(4, Ordering::Relaxed);
        store.version.store(5, Ordering::Relaxed);
        assert_eq!(cache.search(&store, "a", weight).await.unwrap(), 51);
        assert_eq!(store.builds.load(Ordering::Relaxed), 2);
        // A store restored from a backup went back: the newer index is stale too.
        store.version.store(2, Ordering::Relaxed);
        assert_eq!(cache.search(&store, "a", weight).await.unwrap(), 21);
        assert_eq!(
            cache.usage().building,
            0,
            "every build's turn was given back"
        );
    }

    #[test]
    fn the_least_recently_used_go_first_past_the_budget() {
        let cache: TenantCache<Sized> = TenantCache::new(BUDGET);
        let third = BUDGET / 3;
        for tenant in ["a", "b", "c"] {
            built(&cache, tenant, third);
        }
        cache.slot("a");
        built(&cache, "d", third);
        assert!(cache.held("b").is_none(), "b was the least recently used");
        assert!(cache.held("a").is_some() && cache.held("c").is_some());
        // A slot weighs nothing until its index is built, then counts in full.
        cache.slot("e");
        assert!(cache.held("c").is_some());
        built(&cache, "e", third);
        assert!(cache.held("c").is_none(), "c went when e was built");
        // One tenant larger than the budget is still held, alone.
        built(&cache, "huge", 2 * BUDGET);
        assert!(cache.held("huge").is_some() && cache.held("a").is_none());
        assert_eq!(cache.usage().tenants, 1);
    }

    #[test]
    fn writes_are_weighed_so_an_index_that_grows_pushes_others_out() {
        let cache: TenantCache<Sized> = TenantCache::new(BUDGET);
        built(&cache, "old", BUDGET / 2);
        // Built while nearly empty, then grown by this process's writes one at a time.
        built(&cache, "growing", 1);
        let slot = cache.held("growing").unwrap();
        for version in 1..9 {
            cache.apply("growing", &slot, version, version + 1, |s| s.0 += 50);
        }
        assert_eq!(
            cache.usage().bytes,
            BUDGET / 2 + 401,
            "every write was weighed"
        );
        assert!(cache.held("old").is_some());
        cache.apply("growing", &slot, 9, 10, |s| s.0 += 50);
        assert!(
            cache.held("old").is_none(),
            "the grown index pushed the old one out"
        );
        assert_eq!(cache.usage().bytes, 451);
        // A write the index cannot take (it shows another version) drops it, and its weight.
        cache.apply("growing", &slot, 3, 4, |s| s.0 += 1);
        assert!(cache.held("growing").is_none());
        assert_eq!((cache.usage().bytes, cache.usage().tenants), (0, 0));
    }

    #[test]
    fn a_tenant_that_holds_nothing_leaves_no_entry() {
        let cache: TenantCache<Sized> = TenantCache::new(BUDGET);
        for n in 0..1000 {
            let tenant = format!("flood-{n}");
            // A search finds nothing to index; a write takes a slot and changes nothing.
            built(&cache, &tenant, 0);
            let slot = cache.slot(&tenant);
            cache.release(&tenant, &slot);
            let failed: Result<_, ()> = cache.current(&tenant, 1, || Err(()));
            assert!(failed.is_err());
        }
        assert_eq!(cache.usage().tenants, 0);
        // Forgetting a tenant's last memory lets it go too; release keeps a built index.
        built(&cache, "a", 10);
        let slot = cache.held("a").unwrap();
        cache.release("a", &slot);
        assert!(
            cache.held("a").is_some(),
            "release keeps an index that holds something"
        );
        cache.apply("a", &slot, 1, 2, |s| s.0 = 0);
        assert_eq!((cache.usage().bytes, cache.usage().tenants), (0, 0));
    }

    #[test]
    fn an_index_is_read_only_at_its_version_and_writes_move_it_on() {
        let cache: TenantCache<Sized> = TenantCache::new(usize::MAX);
        let slot = cache.slot("a");
        assert!(slot.read_held(|s| s.0).is_none());
        cache.install("a", &slot, 3, Sized(HAND_OFF_BYTES + 1));
        assert!(
            slot.heavy(),
            "a large index is searched on a blocking thread"
        );
        cache.install("a", &slot, 3, Sized(1));
        assert!(!slot.heavy());
        assert_eq!(slot.read_at(3, |s| s.0).ok(), Some(1));
        assert!(slot.read_at(4, |s| s.0).is_err());
        assert!(
            slot.read_at(2, |s| s.0).is_err(),
            "a restored store goes back"
        );
        cache.apply("a", &slot, 3, 4, |s| s.0 = 2);
        assert_eq!(slot.read_at(4, |s| s.0).ok(), Some(2));
        // A write from a version the index does not show drops it.
        cache.apply("a", &slot, 7, 8, |s| s.0 = 9);
        assert!(slot.read_held(|s| s.0).is_none());
    }
}
