//! The expiry sweep. A memory is invisible from the instant it expires (`Visibility`), so
//! nothing waits for this; it only deletes what expired, a bounded batch per pass, so no
//! statement holds a table or a tenant for long, no round runs without end, and a round
//! reads to the end of the store (on S3, from where the last round stopped: up to ten million
//! index keys a round, so every key at least every second round).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::MemoryStore;
use crate::log;
use crate::memory::now_ms;
use crate::metrics::Metrics;

/// What one pass deletes at most.
pub const BATCH: usize = 500;
/// Full passes per round at most: a round deletes up to `BATCH * FULL_PASSES` memories, and
/// the rest wait for the next round.
const FULL_PASSES: usize = 20;
/// Passes per round at most, whatever they delete. An S3 pass reads one stretch of index
/// keys (10,000), so a round covers ten million keys, a whole bucket of any size this server
/// is made for; a round on the other stores ends at its first pass that is not full.
const PASSES: usize = 1_000;

/// The timer; it lives on the runtime, and `stop` lets the pass under way finish.
pub struct Sweeper {
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    stop: Arc<tokio::sync::Notify>,
    stopping: Arc<AtomicBool>,
}

impl Sweeper {
    /// Runs a round every `every`, the first one `every` after the start.
    pub fn start(store: Arc<dyn MemoryStore>, metrics: Arc<Metrics>, every: Duration) -> Sweeper {
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopping = Arc::new(AtomicBool::new(false));
        let (stopped, halted) = (Arc::clone(&stop), Arc::clone(&stopping));
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = stopped.notified() => return,
                }
                round(&*store, &metrics, &halted).await;
            }
        });
        Sweeper {
            task: std::sync::Mutex::new(Some(task)),
            stop,
            stopping,
        }
    }

    /// Stops the timer, after the pass under way if there is one.
    pub async fn stop(&self) {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            self.stopping.store(true, Ordering::Relaxed);
            self.stop.notify_one();
            let _ = task.await;
        }
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }
}

/// One round: passes until one says there is no more, `FULL_PASSES` deleted a full batch,
/// `PASSES` ran, or `stopping` is set. Each pass's deletions are counted in `metrics` as it
/// ends; a failure is logged and ends the round. Returns how many memories it deleted.
pub async fn round(store: &dyn MemoryStore, metrics: &Metrics, stopping: &AtomicBool) -> u64 {
    let (mut deleted, mut full) = (0, 0);
    for _ in 0..PASSES {
        if stopping.load(Ordering::Relaxed) {
            break;
        }
        match store.expire(now_ms(), BATCH).await {
            Ok(pass) => {
                deleted += pass.deleted as u64;
                metrics.memories_expired(pass.deleted as u64);
                full += usize::from(pass.deleted >= BATCH);
                if !pass.more || full >= FULL_PASSES {
                    break;
                }
            }
            Err(e) => {
                log::error(
                    "expiry_sweep_failed",
                    &e.to_string(),
                    &log::Fields::default(),
                );
                break;
            }
        }
    }
    deleted
}
