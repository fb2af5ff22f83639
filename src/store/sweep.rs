//! The expiry sweep. A memory is invisible from the instant it expires (`Visibility`), so
//! nothing waits for this; it only deletes what expired, a bounded batch per pass, so no
//! statement holds a table or a tenant for long and no round runs without end.

use std::sync::Arc;
use std::time::Duration;

use super::MemoryStore;
use crate::log;
use crate::memory::now_ms;
use crate::metrics::Metrics;

/// What one pass deletes at most.
pub const BATCH: usize = 500;
/// Passes per round at most: a round deletes up to `BATCH * PASSES` memories, and the rest
/// wait for the next round.
const PASSES: usize = 20;

/// The timer; it lives on the runtime, and `stop` lets a round under way finish.
pub struct Sweeper {
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    stop: Arc<tokio::sync::Notify>,
}

impl Sweeper {
    /// Runs a round every `every`, the first one `every` after the start.
    pub fn start(store: Arc<dyn MemoryStore>, metrics: Arc<Metrics>, every: Duration) -> Sweeper {
        let stop = Arc::new(tokio::sync::Notify::new());
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = stopped.notified() => return,
                }
                metrics.memories_expired(round(&*store).await);
            }
        });
        Sweeper {
            task: std::sync::Mutex::new(Some(task)),
            stop,
        }
    }

    /// Stops the timer, after the round under way if there is one.
    pub async fn stop(&self) {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
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

/// One round: passes until one finds less than a batch, or `PASSES` ran. Returns how many
/// memories it deleted; a failure is logged and ends the round.
pub async fn round(store: &dyn MemoryStore) -> u64 {
    let mut deleted = 0;
    for _ in 0..PASSES {
        match store.expire(now_ms(), BATCH).await {
            Ok(n) => {
                deleted += n as u64;
                if n < BATCH {
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
