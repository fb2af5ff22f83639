//! The tenants' indexes a store holds in this process, within a memory budget: used ones
//! stay, and past the budget the least recently used are dropped, to be rebuilt from the
//! store when next needed. What each store keeps per tenant (`T`) and how it learns that
//! another process wrote is the store's own business.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The memory the indexes may hold together: about 250,000 memories at width 384. A tenant
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
    tenants: HashMap<String, (Arc<T>, u64)>,
    uses: u64,
}

impl<T> Default for Cache<T> {
    fn default() -> Cache<T> {
        Cache {
            state: Mutex::new(State {
                tenants: HashMap::new(),
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
        if let Some((entry, used)) = state.tenants.get_mut(tenant) {
            *used = now;
            return Ok(Arc::clone(entry));
        }
        let entry = Arc::new(make()?);
        state
            .tenants
            .insert(tenant.to_owned(), (Arc::clone(&entry), now));
        evict(&mut state, tenant);
        Ok(entry)
    }

    /// The tenant's entry if this process holds one, for a write to update.
    pub fn held(&self, tenant: &str) -> Option<Arc<T>> {
        self.state().tenants.get(tenant).map(|(e, _)| Arc::clone(e))
    }

    /// Drops every entry (another process changed what they were built from).
    pub fn clear(&self) {
        self.state().tenants.clear();
    }

    /// Keeps the budget after `tenant`'s entry grew (it was built or reloaded).
    pub fn grown(&self, tenant: &str) {
        evict(&mut self.state(), tenant);
    }
}

/// Drops the least recently used entries, never `keep`, until the rest fit the budget.
fn evict<T: Weigh>(state: &mut State<T>, keep: &str) {
    let mut total: usize = state.tenants.values().map(|(e, _)| e.bytes()).sum();
    while total > BUDGET_BYTES {
        let Some(oldest) = state
            .tenants
            .iter()
            .filter(|(t, _)| t.as_str() != keep)
            .min_by_key(|(_, (_, used))| *used)
            .map(|(t, _)| t.clone())
        else {
            return;
        };
        if let Some((entry, _)) = state.tenants.remove(&oldest) {
            total -= entry.bytes();
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
    }

    #[test]
    fn the_least_recently_used_go_first_past_the_budget() {
        let cache: Cache<Sized> = Cache::default();
        let third = BUDGET_BYTES / 3;
        for tenant in ["a", "b", "c"] {
            cache.get(tenant, || Ok::<_, ()>(Sized(third))).unwrap();
        }
        cache.get("a", || Ok::<_, ()>(Sized(0))).unwrap();
        cache.get("d", || Ok::<_, ()>(Sized(third))).unwrap();
        assert!(cache.held("b").is_none(), "b was the least recently used");
        assert!(cache.held("a").is_some() && cache.held("c").is_some());
        // One tenant larger than the budget is still held, alone.
        cache
            .get("huge", || Ok::<_, ()>(Sized(2 * BUDGET_BYTES)))
            .unwrap();
        assert!(cache.held("huge").is_some() && cache.held("a").is_none());
        cache.clear();
        assert!(cache.held("huge").is_none());
    }
}
