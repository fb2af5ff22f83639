//! Resident memory against the number of tenants and the size of their memories, with the
//! default index budget and a small one (`LOAD_ONLY=resident`). Every tenant is recalled
//! once, in order, so each builds its index; then the server's resident memory is read
//! with the cache's own account of what it holds (`/metrics`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::server::Server;
use crate::{Backend, Bench, drive, seed};

struct Case {
    tenants: usize,
    per_tenant: usize,
    /// Each memory's content padded to this many bytes; 0 keeps the corpus's (~150).
    content_bytes: usize,
    budget_mb: Option<usize>,
}

const CASES: [Case; 4] = [
    Case {
        tenants: 1_000,
        per_tenant: 100,
        content_bytes: 0,
        budget_mb: None,
    },
    Case {
        tenants: 1_000,
        per_tenant: 100,
        content_bytes: 0,
        budget_mb: Some(64),
    },
    Case {
        tenants: 40,
        per_tenant: 100,
        content_bytes: 30_000,
        budget_mb: None,
    },
    Case {
        tenants: 40,
        per_tenant: 100,
        content_bytes: 30_000,
        budget_mb: Some(64),
    },
];

/// A gauge of `/metrics`.
pub async fn gauge(client: &reqwest::Client, url: &str, name: &str) -> f64 {
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(f64::NAN)
}

impl Bench {
    pub async fn resident(&mut self, backends: &[Backend]) {
        println!(
            "\n## Resident memory against tenants (stub embedder, 384; every tenant recalled once)\n"
        );
        println!(
            "| store | tenants × memories | content | INDEX_BUDGET_MB | idle RSS MiB | RSS after MiB | index MiB (gauge) | tenants held |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for backend in backends {
            for case in &CASES {
                let row = self.resident_case(*backend, case).await;
                self.results.push(row);
            }
        }
    }

    async fn resident_case(&mut self, backend: Backend, case: &Case) -> Value {
        let name = format!(
            "resident{}x{}c{}",
            case.tenants, case.per_tenant, case.content_bytes
        );
        let url = self.fresh_store(backend, &name).await;
        let tenants: Vec<String> = (0..case.tenants).map(|t| format!("load-{t}")).collect();
        let rows = seed::rows(&tenants, case.per_tenant, 384).map(|mut row| {
            while row.content.len() < case.content_bytes {
                row.content
                    .push_str(" and more of the same note to make it long");
            }
            row
        });
        Bench::seed(backend, &url, rows, 384).await;
        let mut env = self.env(&url, 384, None);
        if let Some(mb) = case.budget_mb {
            env.push(("INDEX_BUDGET_MB", mb.to_string()));
        }
        // The first boot indexes a seeded SQLite file's words; the one measured is the next.
        Server::start(&env, &self.client).await.stop();
        let server = Server::start(&env, &self.client).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = server.rss_mib();
        for tenant in &tenants {
            drive::call(
                &self.client,
                &server.url,
                tenant,
                "recall",
                json!({"query": "deploy pipeline"}),
            )
            .await
            .expect("every recall answers");
        }
        let after = server.rss_mib();
        let index =
            gauge(&self.client, &server.url, "mcp_memory_index_bytes").await / (1u64 << 20) as f64;
        let held = gauge(&self.client, &server.url, "mcp_memory_index_tenants").await;
        server.stop();
        let content = if case.content_bytes == 0 {
            "~150 B".to_owned()
        } else {
            format!("{} KB", case.content_bytes / 1000)
        };
        let budget = case
            .budget_mb
            .map_or("512 (default)".to_owned(), |mb| mb.to_string());
        println!(
            "| {} | {} × {} | {content} | {budget} | {idle:.0} | {after:.0} | {index:.0} | {held:.0} |",
            backend.name(),
            case.tenants,
            case.per_tenant
        );
        json!({
            "resident": true, "store": backend.name(), "tenants": case.tenants,
            "memories_per_tenant": case.per_tenant, "content_bytes": case.content_bytes,
            "index_budget_mb": case.budget_mb.unwrap_or(512), "idle_rss_mib": idle,
            "rss_mib_after": after, "index_mib": index, "tenants_held": held,
        })
    }
}
