//! Graceful shutdown (docs/configuration.md#shutdown): on SIGTERM or SIGINT stop accepting, let in-flight
//! requests finish for up to 10 s, then flush the store once and exit 0.

use std::time::Duration;

/// How long in-flight requests get before the store is flushed anyway.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// Resolves on the first SIGTERM or SIGINT.
pub async fn signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
