//! Concurrent searches of one index share passes over its vectors. A scan of a large tenant
//! is bound by memory bandwidth (bench/scan.rs): every core reading the same vectors for
//! its own query leaves each waiting on memory, while one pass that multiplies each block
//! with every waiting query (`scan::dot_all_shared`) reads the vectors once for all of them.
//!
//! Only a tenant whose vectors outgrow the processor's shared cache is scanned this way: one that
//! fits is read from the cache, and a shared pass only adds the cost of its blocks (at 10k
//! memories, 3.8 MB, it was up to 20 % slower per query; at 100k, 38 MB, over twice as fast with 4
//! or more queries sharing; BENCHMARKS.md, "Issue 21, item 7: concurrent recalls share passes over
//! a large tenant's vectors").
//!
//! No search waits to gather others: a pass takes every core no other pass (of any index)
//! is using, its rows cut between them (`scan::dot_all_shared_split`: one core alone draws
//! less of the memory's bandwidth than two), and a query that arrives while every core is
//! busy waits for the next free one, together with every other query that arrived
//! meanwhile. Whichever waiting search sees a core free runs that pass for all of them.
//! Alone, a search runs its own pass at once, on every idle core.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use super::scan;

/// Threads scanning in passes right now, of every index in the process: a pass takes only
/// the cores the others leave.
static SCANNING: AtomicUsize = AtomicUsize::new(0);

/// The size of 8-bit vectors from which searches share passes: past most servers' shared
/// cache (32 MiB on the machine measured), where a scan waits on memory.
const SHARED_FROM_BYTES: usize = 16 << 20;

#[derive(Default)]
pub struct Passes {
    state: Mutex<State>,
    /// Signalled when a pass is over, with its queries' dot products in `State::done`.
    over: Condvar,
}

#[derive(Default)]
struct State {
    tickets: u64,
    /// Queries waiting for a pass, by ticket.
    waiting: Vec<(u64, Vec<i16>)>,
    running: usize,
    /// Passes run so far.
    passes: u64,
    /// What each query's pass found, by ticket, until the query's search takes it; `None`
    /// when the pass panicked, so that search scans alone instead of waiting forever.
    done: HashMap<u64, Option<Vec<i32>>>,
}

impl Passes {
    /// `query`'s dot product with every row of `rows` (`scan::dot_all`'s answer), from a pass
    /// shared with the searches waiting at the same time. Every caller of one `Passes` scans
    /// the same `rows`: the index that holds both lends them only while it cannot change.
    pub fn dots(&self, rows: &[i8], query: &[i16]) -> Vec<i32> {
        if rows.len() < SHARED_FROM_BYTES {
            let mut dots = Vec::new();
            scan::dot_all(rows, query, &mut dots);
            return dots;
        }
        let mut state = self.lock();
        let ticket = state.tickets;
        state.tickets += 1;
        state.waiting.push((ticket, query.to_vec()));
        loop {
            if let Some(done) = state.done.remove(&ticket) {
                drop(state);
                return done.unwrap_or_else(|| {
                    let mut dots = Vec::new();
                    scan::dot_all(rows, query, &mut dots);
                    dots
                });
            }
            if state.running < cores() && !state.waiting.is_empty() {
                let batch = std::mem::take(&mut state.waiting);
                // The cores no pass of any index is using, at least one.
                let idle = cores().saturating_sub(SCANNING.load(Ordering::Relaxed));
                let threads = idle.clamp(1, cores() - state.running);
                SCANNING.fetch_add(threads, Ordering::Relaxed);
                state.running += threads;
                state.passes += 1;
                drop(state);
                let mut pass = Pass {
                    passes: self,
                    tickets: batch.iter().map(|(ticket, _)| *ticket).collect(),
                    threads,
                };
                let queries: Vec<&[i16]> = batch.iter().map(|(_, q)| q.as_slice()).collect();
                let dots = scan::dot_all_shared_split(rows, &queries, threads);
                state = pass.finish(dots.into_iter().map(Some));
                continue;
            }
            // No timeout: the pass this query waits for is running on another thread, and
            // ends (or panics, which `Pass` reports) within one scan.
            state = self.over.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic cannot leave the state half-changed: every change is one statement.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A pass under way; dropped before `finish` (a panic), it tells its queries to scan alone.
struct Pass<'a> {
    passes: &'a Passes,
    tickets: Vec<u64>,
    /// The cores it runs on.
    threads: usize,
}

impl<'a> Pass<'a> {
    fn finish(&mut self, answers: impl Iterator<Item = Option<Vec<i32>>>) -> MutexGuard<'a, State> {
        let mut state = self.passes.lock();
        state.running -= self.threads;
        SCANNING.fetch_sub(self.threads, Ordering::Relaxed);
        let tickets = std::mem::take(&mut self.tickets);
        state.done.extend(tickets.into_iter().zip(answers));
        self.passes.over.notify_all();
        state
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if !self.tickets.is_empty() {
            let failed = std::iter::repeat_with(|| None);
            drop(self.finish(failed));
        }
    }
}

/// The cores this process may use, which the passes share out.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_searches_get_their_own_dot_products() {
        let width = 64;
        let rows: Vec<i8> = (0..SHARED_FROM_BYTES + 3 * width)
            .map(|i| (i * 7 % 255) as i8)
            .collect();
        let passes = Passes::default();
        std::thread::scope(|scope| {
            for t in 0..8 {
                let (rows, passes) = (&rows, &passes);
                scope.spawn(move || {
                    for round in 0..3 {
                        let query: Vec<i16> = (0..width)
                            .map(|i| ((i * 31 + t * 17 + round) % 2001) as i16 - 1000)
                            .collect();
                        let mut alone = Vec::new();
                        scan::dot_all(rows, &query, &mut alone);
                        assert_eq!(passes.dots(rows, &query), alone);
                    }
                });
            }
        });
        let state = passes.lock();
        assert_eq!(state.tickets, 8 * 3);
        assert!(state.waiting.is_empty() && state.done.is_empty());
        assert_eq!(state.running, 0);
    }

    #[test]
    fn queries_that_arrive_while_every_core_is_busy_share_the_next_pass() {
        let width = 384;
        let rows: Vec<i8> = (0..SHARED_FROM_BYTES).map(|i| (i % 251) as i8).collect();
        let passes = Passes::default();
        // Every core busy with a pass of its own.
        passes.lock().running = cores();
        let queries: Vec<Vec<i16>> = (0..3)
            .map(|q| {
                (0..width)
                    .map(|i| ((i * 13 + q * 101) % 997) as i16)
                    .collect()
            })
            .collect();
        std::thread::scope(|scope| {
            let asked: Vec<_> = (queries.iter())
                .map(|query| scope.spawn(|| passes.dots(&rows, query)))
                .collect();
            while passes.lock().waiting.len() < 3 {
                std::thread::yield_now();
            }
            // The busy passes end: one of the three runs the next pass for all of them.
            passes.lock().running = 0;
            passes.over.notify_all();
            for (query, asked) in queries.iter().zip(asked) {
                let mut alone = Vec::new();
                scan::dot_all(&rows, query, &mut alone);
                assert_eq!(asked.join().unwrap(), alone);
            }
        });
        assert_eq!(passes.lock().passes, 1);
    }

    #[test]
    fn a_small_index_is_scanned_alone() {
        let passes = Passes::default();
        passes.lock().running = cores();
        // Not queued behind the busy cores: it does not wait.
        assert_eq!(passes.dots(&[1, 2, 3, 4], &[1, 1]), [3, 7]);
        assert_eq!(passes.lock().tickets, 0);
    }

    #[test]
    fn a_pass_that_panics_leaves_its_queries_to_scan_alone() {
        let passes = Passes::default();
        passes.lock().waiting.push((7, vec![1]));
        let mut pass = Pass {
            passes: &passes,
            tickets: vec![7],
            threads: 2,
        };
        passes.lock().running += 2;
        SCANNING.fetch_add(2, Ordering::Relaxed);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = &mut pass;
            panic!("a bug in a kernel");
        }));
        assert!(unwound.is_err());
        let state = passes.lock();
        assert_eq!(state.running, 0);
        assert_eq!(state.done.get(&7), Some(&None));
    }
}
