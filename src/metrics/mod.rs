//! What `GET /metrics` tells Prometheus: tool calls by tool and outcome, latency histograms
//! of tools, embedding calls and store calls, requests in flight, and the build. Labels are
//! bounded: tools come from the catalogue (anything else is `unknown`), store calls from the
//! trait's operations. A tenant label is added to tool calls only when the operator opts in
//! (`METRICS_TENANT_LABEL=true`), since every tenant then becomes a series of its own.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::search::cache::Usage;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Ok,
    /// Refused: bad arguments, unknown tool, missing identity.
    Invalid,
    /// A dependency (store, embedder, knowledge base) failed.
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Invalid => "invalid",
            Outcome::Failed => "error",
        }
    }
}

#[derive(Default)]
struct Histogram {
    /// Per bucket, not cumulative; the last slot is +Inf.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, took: Duration) {
        let seconds = took.as_secs_f64();
        let slot = BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[slot] += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            cumulative += count;
            let _ = writeln!(out, "{name}_bucket{{{labels}le=\"{bound}\"}} {cumulative}");
        }
        cumulative += self.counts[BUCKETS.len()];
        let _ = writeln!(out, "{name}_bucket{{{labels}le=\"+Inf\"}} {cumulative}");
        let trimmed = labels.trim_end_matches(',');
        let braced = if trimmed.is_empty() {
            String::new()
        } else {
            format!("{{{trimmed}}}")
        };
        let _ = writeln!(out, "{name}_sum{braced} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braced} {cumulative}");
    }
}

#[derive(Default)]
struct Series {
    /// (tool, outcome, tenant when opted in) → calls.
    calls: BTreeMap<(String, Outcome, Option<String>), u64>,
    tools: BTreeMap<String, Histogram>,
    embeddings: Histogram,
    store: BTreeMap<&'static str, Histogram>,
}

pub struct Metrics {
    tenant_label: bool,
    /// The Cargo features this binary was built with, for `build_info`.
    features: String,
    series: Mutex<Series>,
    in_flight: AtomicI64,
    /// Uses a read found but could not count (`tools::ToolService::count_uses`).
    access_failures: AtomicU64,
    /// Memories the expiry sweep deleted (`store::sweep`).
    expired: AtomicU64,
    /// Connections with a request being read, run or answered (`http::serve`).
    connections: AtomicI64,
    /// Requests that came past `MCP_MAX_CONNECTIONS`.
    refused: AtomicU64,
    /// Connections waiting for a request (`http::idle`).
    waiting: AtomicI64,
    /// Waiting connections closed to make room for newer ones.
    waiting_closed: AtomicU64,
}

impl Metrics {
    pub fn new(tenant_label: bool, features: &[&str]) -> Metrics {
        Metrics {
            tenant_label,
            features: features.join(","),
            series: Mutex::default(),
            in_flight: AtomicI64::new(0),
            access_failures: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            connections: AtomicI64::new(0),
            refused: AtomicU64::new(0),
            waiting: AtomicI64::new(0),
            waiting_closed: AtomicU64::new(0),
        }
    }

    fn series(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One tool call; `tool` must be a catalogue name or `unknown`.
    pub fn tool_call(&self, tool: &str, tenant: Option<&str>, outcome: Outcome, took: Duration) {
        let tenant = tenant.filter(|_| self.tenant_label).map(str::to_owned);
        let mut series = self.series();
        *series
            .calls
            .entry((tool.to_owned(), outcome, tenant))
            .or_default() += 1;
        series
            .tools
            .entry(tool.to_owned())
            .or_default()
            .observe(took);
    }

    pub fn embedding(&self, took: Duration) {
        self.series().embeddings.observe(took);
    }

    pub fn store_call(&self, operation: &'static str, took: Duration) {
        self.series()
            .store
            .entry(operation)
            .or_default()
            .observe(took);
    }

    /// A read's answer whose uses could not be counted.
    pub fn access_record_failed(&self) {
        self.access_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Memories the expiry sweep deleted in one round.
    pub fn memories_expired(&self, n: u64) {
        self.expired.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a request as in flight until the guard is dropped.
    pub fn in_flight(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }

    /// Counts a connection as served (a request of its being read, run or answered) until
    /// the guard is dropped.
    pub fn connection(self: &Arc<Self>) -> Connection {
        self.connections.fetch_add(1, Ordering::Relaxed);
        Connection(Arc::clone(self))
    }

    /// A request that came past `MCP_MAX_CONNECTIONS`.
    pub fn connection_refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// How many connections wait for a request now, and how many of them were just closed to
    /// make room.
    pub fn connections_waiting(&self, now: usize, closed: bool) {
        self.waiting.store(now as i64, Ordering::Relaxed);
        if closed {
            self.waiting_closed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The Prometheus text exposition format, version 0.0.4; `indexes` is what the store's
    /// tenant indexes hold now, when it keeps them.
    pub fn render(&self, indexes: Option<Usage>) -> String {
        let series = self.series();
        let mut out = String::new();
        if let Some(usage) = indexes {
            for (name, kind, help, value) in [
                (
                    "index_tenants",
                    "gauge",
                    "Tenants whose search index this process holds.",
                    usage.tenants as u64,
                ),
                (
                    "index_bytes",
                    "gauge",
                    "What the held search indexes weigh, roughly, in bytes.",
                    usage.bytes as u64,
                ),
                (
                    "index_mapped_bytes",
                    "gauge",
                    "What they keep in mapped files besides (large tenants' exact vectors, INDEX_VECTORS_DIR): page cache the kernel may reclaim, not heap.",
                    usage.mapped as u64,
                ),
                (
                    "index_budget_bytes",
                    "gauge",
                    "What they may weigh together (INDEX_BUDGET_MB).",
                    usage.budget as u64,
                ),
                (
                    "index_builds_total",
                    "counter",
                    "Tenant indexes built from the store.",
                    usage.builds,
                ),
                (
                    "index_builds_running",
                    "gauge",
                    "Tenant indexes being built from the store now (at most two at once; others wait).",
                    usage.building as u64,
                ),
                (
                    "index_catch_ups_total",
                    "counter",
                    "Tenant indexes brought up to date with another process's writes instead of built.",
                    usage.catch_ups,
                ),
            ] {
                let _ = writeln!(
                    out,
                    "# HELP mcp_memory_{name} {help}\n# TYPE mcp_memory_{name} {kind}\nmcp_memory_{name} {value}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP mcp_memory_build_info The running build.\n# TYPE mcp_memory_build_info gauge\n\
             mcp_memory_build_info{{version=\"{}\",features=\"{}\"}} 1",
            crate::SERVER_VERSION,
            self.features
        );
        let _ = writeln!(
            out,
            "# HELP mcp_memory_requests_in_flight MCP requests being answered.\n\
             # TYPE mcp_memory_requests_in_flight gauge\nmcp_memory_requests_in_flight {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP mcp_memory_connections_open HTTP connections with a request being read, \
             run or answered (at most MCP_MAX_CONNECTIONS).\n\
             # TYPE mcp_memory_connections_open gauge\nmcp_memory_connections_open {}",
            self.connections.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP mcp_memory_connections_refused_total HTTP requests that came past \
             MCP_MAX_CONNECTIONS (answered 503, or only a probe or scrape).\n\
             # TYPE mcp_memory_connections_refused_total counter\n\
             mcp_memory_connections_refused_total {}",
            self.refused.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP mcp_memory_connections_waiting HTTP connections waiting for a request, new \
             or kept alive (at most MCP_MAX_IDLE_CONNECTIONS).\n\
             # TYPE mcp_memory_connections_waiting gauge\nmcp_memory_connections_waiting {}",
            self.waiting.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP mcp_memory_connections_waiting_closed_total Waiting connections closed to \
             make room for newer ones past MCP_MAX_IDLE_CONNECTIONS.\n\
             # TYPE mcp_memory_connections_waiting_closed_total counter\n\
             mcp_memory_connections_waiting_closed_total {}",
            self.waiting_closed.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP mcp_memory_access_record_failures_total Answers whose uses could not be \
             counted.\n# TYPE mcp_memory_access_record_failures_total counter\n\
             mcp_memory_access_record_failures_total {}",
            self.access_failures.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP mcp_memory_memories_expired_total Expired memories the sweep deleted.\n\
             # TYPE mcp_memory_memories_expired_total counter\n\
             mcp_memory_memories_expired_total {}",
            self.expired.load(Ordering::Relaxed)
        );
        out.push_str(
            "# HELP mcp_memory_tool_calls_total Tool calls by tool and outcome (ok, invalid, error).\n\
             # TYPE mcp_memory_tool_calls_total counter\n",
        );
        for ((tool, outcome, tenant), n) in &series.calls {
            let tenant = tenant
                .as_deref()
                .map(|t| format!(",tenant=\"{}\"", escape(t)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "mcp_memory_tool_calls_total{{tool=\"{tool}\",outcome=\"{}\"{tenant}}} {n}",
                outcome.as_str()
            );
        }
        out.push_str(
            "# HELP mcp_memory_tool_duration_seconds Time to answer a tool call.\n\
             # TYPE mcp_memory_tool_duration_seconds histogram\n",
        );
        for (tool, histogram) in &series.tools {
            histogram.render(
                &mut out,
                "mcp_memory_tool_duration_seconds",
                &format!("tool=\"{tool}\","),
            );
        }
        out.push_str(
            "# HELP mcp_memory_embedding_duration_seconds Time to embed one text.\n\
             # TYPE mcp_memory_embedding_duration_seconds histogram\n",
        );
        series
            .embeddings
            .render(&mut out, "mcp_memory_embedding_duration_seconds", "");
        out.push_str(
            "# HELP mcp_memory_store_duration_seconds Time of one store operation.\n\
             # TYPE mcp_memory_store_duration_seconds histogram\n",
        );
        for (operation, histogram) in &series.store {
            histogram.render(
                &mut out,
                "mcp_memory_store_duration_seconds",
                &format!("operation=\"{operation}\","),
            );
        }
        out
    }
}

pub struct InFlight<'a>(&'a Metrics);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection being served, counted until dropped.
pub struct Connection(Arc<Metrics>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A label value as the exposition format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_tenants_appear_only_when_asked() {
        let metrics = Metrics::new(false, &["sqlite"]);
        metrics.tool_call(
            "recall",
            Some("acme"),
            Outcome::Ok,
            Duration::from_millis(3),
        );
        metrics.tool_call("recall", Some("acme"), Outcome::Ok, Duration::from_secs(20));
        metrics.tool_call("forget", None, Outcome::Invalid, Duration::from_millis(1));
        let text = metrics.render(None);
        assert!(text.contains("mcp_memory_tool_calls_total{tool=\"recall\",outcome=\"ok\"} 2"));
        assert!(
            text.contains("mcp_memory_tool_calls_total{tool=\"forget\",outcome=\"invalid\"} 1")
        );
        assert!(
            text.contains(
                "mcp_memory_tool_duration_seconds_bucket{tool=\"recall\",le=\"0.0025\"} 0"
            )
        );
        assert!(
            text.contains(
                "mcp_memory_tool_duration_seconds_bucket{tool=\"recall\",le=\"0.005\"} 1"
            )
        );
        assert!(
            text.contains("mcp_memory_tool_duration_seconds_bucket{tool=\"recall\",le=\"+Inf\"} 2")
        );
        assert!(text.contains("mcp_memory_tool_duration_seconds_count{tool=\"recall\"} 2"));
        assert!(!text.contains("acme"));

        let labelled = Metrics::new(true, &[]);
        labelled.tool_call("recall", Some("a\"b"), Outcome::Failed, Duration::ZERO);
        assert!(labelled.render(None).contains(
            "mcp_memory_tool_calls_total{tool=\"recall\",outcome=\"error\",tenant=\"a\\\"b\"} 1"
        ));
    }

    #[test]
    fn requests_in_flight_go_back_down() {
        let metrics = Metrics::new(false, &[]);
        let guard = metrics.in_flight();
        assert!(
            metrics
                .render(None)
                .contains("mcp_memory_requests_in_flight 1")
        );
        drop(guard);
        assert!(
            metrics
                .render(None)
                .contains("mcp_memory_requests_in_flight 0")
        );
    }
}
