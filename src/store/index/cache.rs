//! The tenants' indexes a store holds in this process, within a memory budget: used ones
//! stay, and past the budget the least recently used are dropped, to be rebuilt from the
//! store when next needed. What each store keeps per tenant (`T`) and how it learns that
//! another process wrote is the store's own business.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The memory the indexes may hold together: about 150,000 memories at width 384. A tenant
/// larger than this is still indexed, alone.
pub const BUDGET_BYTES: usize = 512 << 20;

/// What a cached index weighs against the budget; 0 while it is not built.
pub trait Weigh {
    fn bytes(&self) -> usize;
}

pub struct Cache<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    tenants: HashMap<String, Held<T>>,
    /// The sum of the held entries' sizes, as last measured.
    total: usize,
    uses: u64,
}

struct Held<T> {
    entry: Arc<T>,
    used: u64,
    /// Measured when the entry was made or grew: weighing walks the whole index, so it is
    /// not redone for every tenant each time one is added. Writes in between are small.
    bytes: usize,
}

impl<T> Default for Cache<T> {
    fn default() -> Cache<T> {
        Cache {
            state: Mutex::new(State {
                tenants: HashMap::new(),
                total: 0,
                uses: 0,
            }),
        }
    }
}

impl<T: Weigh> Cache<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The tenant's entry, made by `make` if this process holds none; a new entry may push
    /// others out of the budget.
    pub fn get<E>(&self, tenant: &str, make: impl FnOnce() -> Result<T, E>) -> Result<Arc<T>, E> {
        let mut state = self.state();
        state.uses += 1;
        let now = state.uses;
        if let Some(held) = state.tenants.get_mut(tenant) {
            held.used = now;
            return Ok(Arc::clone(&held.entry));
        }
        let entry = Arc::new(make()?);
        let bytes = entry.bytes();
        state.total += bytes;
        state.tenants.insert(
            tenant.to_owned(),
            Held {
                entry: Arc::clone(&entry),
                used: now,
                bytes,
            },
        );
        evict(&mut state, tenant);
        Ok(entry)
    }

    /// The tenant's entry if this process holds one, for a write to update.
    pub fn held(&self, tenant: &str) -> Option<Arc<T>> {
        self.state()
            .tenants
            .get(tenant)
            .map(|held| Arc::clone(&held.entry))
    }

    /// Drops every entry (another process changed what they were built from).
    pub fn clear(&self) {
        let mut state = self.state();
        state.tenants.clear();
        state.total = 0;
    }

    /// Weighs `tenant`'s entry again after it was built or rebuilt, and keeps the budget.
    pub fn grown(&self, tenant: &str) {
        let mut state = self.state();
        let Some(held) = state.tenants.get_mut(tenant) else {
            return;
        };
        let (before, after) = (held.bytes, held.entry.bytes());
        held.bytes = after;
        state.total = state.total - before + after;
        evict(&mut state, tenant);
    }
}

/// Drops the least recently used entries, never `keep`, until the rest fit the budget.
fn evict<T>(state: &mut State<T>, keep: &str) {
    while state.total > BUDGET_BYTES {
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
            state.total -= held.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Sized(AtomicUsize);
    impl Weigh for Sized {
        fn bytes(&self) -> usize {
            self.0.load(Ordering::Relaxed)
        }
    }
    fn sized(bytes: usize) -> Result<Sized, ()> {
        Ok(Sized(AtomicUsize::new(bytes)))
    }

    #[test]
    fn the_least_recently_used_go_first_past_the_budget() {
        let cache: Cache<Sized> = Cache::default();
        let third = BUDGET_BYTES / 3;
        for tenant in ["a", "b", "c"] {
            cache.get(tenant, || sized(third)).unwrap();
        }
        cache.get("a", || sized(0)).unwrap();
        cache.get("d", || sized(third)).unwrap();
        assert!(cache.held("b").is_none(), "b was the least recently used");
        assert!(cache.held("a").is_some() && cache.held("c").is_some());
        // An entry built after it was made (PostgreSQL's) counts once weighed again.
        let e = cache.get("e", || sized(0)).unwrap();
        assert!(cache.held("c").is_some());
        e.0.store(third, Ordering::Relaxed);
        cache.grown("e");
        assert!(cache.held("c").is_none(), "c went when e grew");
        // One tenant larger than the budget is still held, alone.
        cache.get("huge", || sized(2 * BUDGET_BYTES)).unwrap();
        assert!(cache.held("huge").is_some() && cache.held("a").is_none());
        cache.clear();
        assert!(cache.held("huge").is_none());
    }
}
