//! The load benchmark: the real binary in its own process, driven over HTTP with MCP
//! `tools/call` requests from this one, on SQLite and (when TEST_DATABASE_URL is set)
//! PostgreSQL.
//!
//!     make bench        # = scripts/with-postgres.sh cargo bench --features postgres --bench load
//!
//! For each store and data shape (one tenant with 1k, 10k and 100k memories; 1,000 tenants
//! with 100 each) it runs a recall-heavy mix (90 % recall, 10 % remember) and a
//! remember-only mix at concurrency 1, 8 and 32, with a zero-latency embedder (`stub.rs`)
//! so the server is what is measured; then 10k memories at width 1536, and one end-to-end
//! run with the local model. Each run reports throughput, p50/p95/p99 latency, the
//! server's resident memory before and at peak, and its CPU time per request; each server
//! start reports the time to a healthy `/health`. The physical reference is the raw exact
//! scan (`scan.rs`) at the same size and width. After every run, each tenant's count must
//! equal what was seeded plus what the server said it stored, and its newest memories must
//! be listed: any error or lost write fails the benchmark.
//!
//! Then export and import of 100k memories (`portable.rs`), and resident memory against
//! tenants and memory sizes, with and without a small `INDEX_BUDGET_MB` (`resident.rs`).
//!
//! `LOAD_ONLY=1x1000000w384` (only when named) seeds a million memories in one tenant;
//! `LOAD_ONLY=stalled` (only when named, it waits a minute) measures resident memory with
//! 100 clients that never read their answers (`stalled.rs`).
//! `LOAD_QUICK=1` runs one second per run at concurrency 8 only (a smoke test of the bench);
//! `LOAD_ONLY=1x10000w384,model,resident` runs only the parts named (tenants x memories w width), and
//! `LOAD_CONCURRENCY=1,8` only those client counts; `LOAD_SECONDS=20` measures each run for
//! that long (for a profiler to attach); `LOAD_BINARY=/path/to/mcp-memory` runs another
//! build of the server (to compare two builds in alternating runs: the server starts with
//! only the environment the bench gives it). `LOAD_AUTH=oauth` makes the server take only
//! access tokens of a real authorization server and every call carry one (a gateway's, of
//! `oidc-provider`: `tests/support/oauth.rs`).
//! Results: bench/results/load.json, and a Markdown table on stdout.

mod corpus;
mod drive;
// The tests' authorization server (tests/auth/provider.sh), for `LOAD_AUTH=oauth`.
#[path = "../../tests/support/oauth.rs"]
#[allow(dead_code)] // the bench takes its tokens from it, never forges one
mod oauth;
mod portable;
#[path = "../postgres.rs"]
mod postgres;
mod resident;
mod scan;
mod seed;
mod server;
mod stalled;
mod stub;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use drive::{Mix, Outcome, percentile};
use server::Server;

#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

struct Shape {
    tenants: usize,
    per_tenant: usize,
    width: usize,
}

impl Shape {
    fn label(&self) -> String {
        if self.tenants == 1 {
            format!("1 tenant × {}", self.per_tenant)
        } else {
            format!("{} tenants × {}", self.tenants, self.per_tenant)
        }
    }
}

struct Plan {
    concurrency: Vec<usize>,
    warmup: Duration,
    duration: Duration,
}

struct Bench {
    client: reqwest::Client,
    /// `LOAD_AUTH=oauth`: the authorization server whose token every call carries.
    issuer: Option<oauth::Provider>,
    stub: stub::Stub,
    plan: Plan,
    postgres: Option<String>,
    scratch: tempfile::TempDir,
    results: Vec<Value>,
}

#[tokio::main]
async fn main() {
    let quick = std::env::var("LOAD_QUICK").is_ok_and(|v| v == "1");
    let plan = if quick {
        Plan {
            concurrency: vec![8],
            warmup: Duration::from_millis(200),
            duration: Duration::from_secs(1),
        }
    } else {
        Plan {
            concurrency: vec![1, 8, 32],
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(4),
        }
    };
    let mut plan = plan;
    if let Some(seconds) = std::env::var("LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        plan.duration = Duration::from_secs(seconds);
    }
    if let Ok(list) = std::env::var("LOAD_CONCURRENCY") {
        plan.concurrency = list.split(',').filter_map(|c| c.parse().ok()).collect();
    }
    let scratch = tempfile::tempdir().unwrap();
    let issuer = match std::env::var("LOAD_AUTH").as_deref() {
        Ok("oauth") => {
            Some(oauth::Provider::start(&scratch.path().join("issuer-keys.json"), 0, false).await)
        }
        _ => None,
    };
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(issuer) = &issuer {
        let scopes = "memory:read memory:write memory:any-tenant";
        let bearer = format!("Bearer {}", issuer.token("gateway", scopes).await);
        headers.insert(reqwest::header::AUTHORIZATION, bearer.parse().unwrap());
    }
    let mut bench = Bench {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .default_headers(headers)
            .build()
            .unwrap(),
        issuer,
        stub: stub::start(),
        plan,
        postgres: std::env::var("TEST_DATABASE_URL").ok(),
        scratch,
        results: Vec::new(),
    };
    if bench.postgres.is_none() {
        eprintln!("TEST_DATABASE_URL is not set: PostgreSQL is skipped (use `make bench`)");
    }
    let mut backends = vec![Backend::Sqlite];
    if bench.postgres.is_some() {
        backends.push(Backend::Postgres);
    }

    let startup = bench.empty_starts(&backends).await;
    let reference = scan::references(&[
        (1_000, 384),
        (10_000, 384),
        (100_000, 384),
        (100, 384),
        (10_000, 1536),
    ]);
    println!("\n## Raw exact scan (the physical reference)\n");
    println!("| memories | width | scan ms |\n|---|---|---|");
    for r in &reference {
        println!("| {} | {} | {:.3} |", r.memories, r.width, r.millis);
    }

    for backend in &backends {
        let shapes = [
            Shape {
                tenants: 1,
                per_tenant: 1_000,
                width: 384,
            },
            Shape {
                tenants: 1,
                per_tenant: 10_000,
                width: 384,
            },
            Shape {
                tenants: 1,
                per_tenant: 100_000,
                width: 384,
            },
            Shape {
                tenants: 1_000,
                per_tenant: 100,
                width: 384,
            },
            Shape {
                tenants: 1,
                per_tenant: 10_000,
                width: 1536,
            },
            // A million in one tenant: only when named, it seeds for minutes.
            Shape {
                tenants: 1,
                per_tenant: 1_000_000,
                width: 384,
            },
        ];
        for shape in shapes.iter().filter(|s| {
            let name = format!("{}x{}w{}", s.tenants, s.per_tenant, s.width);
            if s.per_tenant >= 1_000_000 {
                named(&name)
            } else {
                wanted(&name)
            }
        }) {
            let concurrency = if shape.width == 384 {
                bench.plan.concurrency.clone()
            } else {
                vec![8]
            };
            bench
                .shape(*backend, shape, &concurrency, &reference, None)
                .await;
        }
    }
    if wanted("portable") {
        bench.portable(&backends).await;
    }
    if wanted("resident") {
        bench.resident(&backends).await;
    }
    if named("stalled") {
        bench.stalled().await;
    }
    if !wanted("model") {
    } else if let Some(model) = local_model() {
        let shape = Shape {
            tenants: 1,
            per_tenant: 1_000,
            width: 384,
        };
        let concurrency = bench
            .plan
            .concurrency
            .iter()
            .copied()
            .filter(|c| *c <= 8)
            .collect::<Vec<_>>();
        bench
            .shape(
                Backend::Sqlite,
                &shape,
                &concurrency,
                &reference,
                Some(&model),
            )
            .await;
    } else {
        eprintln!("no local model in .models/ (run `make models`): the end-to-end run is skipped");
    }

    let errors: u64 = bench
        .results
        .iter()
        .filter_map(|r| r["errors"].as_u64())
        .sum();
    let report = json!({
        "machine": machine(),
        "quick": quick,
        "startup": startup,
        "scan_reference": reference.iter().map(|r| json!({"memories": r.memories, "width": r.width, "ms": r.millis})).collect::<Vec<_>>(),
        "runs": bench.results,
    });
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/results/load.json");
    std::fs::write(path, serde_json::to_string_pretty(&report).unwrap() + "\n").unwrap();
    println!("\nwrote {path}");
    if errors > 0 {
        eprintln!("{errors} calls failed (see the errors column)");
        std::process::exit(1);
    }
}

/// `LOAD_ONLY=1x1000w384,model` runs only those shapes (tenants x memories w width).
fn wanted(shape: &str) -> bool {
    std::env::var("LOAD_ONLY").is_err() || named(shape)
}

/// Whether `LOAD_ONLY` names `shape`.
fn named(shape: &str) -> bool {
    std::env::var("LOAD_ONLY").is_ok_and(|only| only.split(',').any(|s| s == shape))
}

fn local_model() -> Option<String> {
    let model = std::env::var("MCP_MEMORY_TEST_MODEL").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/.models/all-MiniLM-L6-v2").into()
    });
    std::path::Path::new(&model)
        .join("model.safetensors")
        .exists()
        .then_some(model)
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    json!({
        "cpu": cpu.lines().find_map(|l| l.strip_prefix("model name")).map(|m| m.trim_start_matches([' ', '\t', ':'])),
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    })
}

impl Bench {
    fn env(
        &self,
        database_url: &str,
        width: usize,
        model: Option<&str>,
    ) -> Vec<(&'static str, String)> {
        let mut env = match model {
            Some(model) => vec![
                ("DATABASE_URL", database_url.to_owned()),
                ("EMBEDDING_PROVIDER", "local".into()),
                ("EMBEDDING_MODEL", model.to_owned()),
                ("RECALL_MIN_SIMILARITY", "0.2".into()),
            ],
            None => vec![
                ("DATABASE_URL", database_url.to_owned()),
                ("EMBEDDING_PROVIDER", "openai".into()),
                ("EMBEDDING_BASE_URL", self.stub.base_url.clone()),
                ("EMBEDDING_API_KEY", "bench".into()),
                ("EMBEDDING_MODEL", format!("stub-{width}")),
                ("EMBEDDING_DIM", width.to_string()),
                ("RECALL_MIN_SIMILARITY", "0.2".into()),
            ],
        };
        if let Some(issuer) = &self.issuer {
            env.push(("OAUTH_ISSUER", issuer.issuer.clone()));
            env.push(("OAUTH_RESOURCE", oauth::RESOURCE.into()));
        }
        env
    }

    /// Writes `rows` straight into the store at `url`, as `seed.rs` does for each backend.
    async fn seed(
        backend: Backend,
        url: &str,
        rows: impl Iterator<Item = seed::Row>,
        width: usize,
    ) {
        match backend {
            Backend::Sqlite => seed::sqlite(
                std::path::Path::new(url.strip_prefix("sqlite:").unwrap()),
                rows,
                width,
            ),
            Backend::Postgres => seed::postgres(url, rows, width).await,
        }
    }

    async fn fresh_store(&self, backend: Backend, name: &str) -> String {
        match backend {
            Backend::Sqlite => format!(
                "sqlite:{}",
                self.scratch.path().join(format!("{name}.db")).display()
            ),
            Backend::Postgres => postgres::fresh_database(self.postgres.as_ref().unwrap()).await,
        }
    }

    /// Startup to healthy and idle memory on an empty store, five starts each.
    async fn empty_starts(&self, backends: &[Backend]) -> Vec<Value> {
        println!("## Startup on an empty store (stub embedder, 384)\n");
        println!("| store | startup ms (median of 5) | idle RSS MiB |\n|---|---|---|");
        let mut out = Vec::new();
        for backend in backends {
            let url = self.fresh_store(*backend, "empty").await;
            let mut starts = Vec::new();
            let mut rss = 0.0;
            for _ in 0..5 {
                let server = Server::start(&self.env(&url, 384, None), &self.client).await;
                starts.push(server.startup.as_secs_f64() * 1000.0);
                tokio::time::sleep(Duration::from_millis(300)).await;
                rss = server.rss_mib();
                server.stop();
            }
            starts.sort_by(f64::total_cmp);
            println!("| {} | {:.0} | {:.1} |", backend.name(), starts[2], rss);
            out.push(
                json!({"store": backend.name(), "startup_ms": starts[2], "idle_rss_mib": rss}),
            );
        }
        out
    }

    async fn shape(
        &mut self,
        backend: Backend,
        shape: &Shape,
        concurrency: &[usize],
        reference: &[scan::Reference],
        model: Option<&str>,
    ) {
        let name = format!(
            "{}x{}w{}{}",
            shape.tenants,
            shape.per_tenant,
            shape.width,
            if model.is_some() { "model" } else { "" }
        );
        let url = self.fresh_store(backend, &name).await;
        let tenants: Vec<String> = (0..shape.tenants).map(|t| format!("load-{t}")).collect();
        let began = std::time::Instant::now();
        let rows = seed::rows(&tenants, shape.per_tenant, shape.width);
        Bench::seed(backend, &url, rows, shape.width).await;
        let seeded = began.elapsed();
        let env = self.env(&url, shape.width, model);
        // The first boot indexes a seeded SQLite file's words; the one measured is the next.
        Server::start(&env, &self.client).await.stop();
        let server = Server::start(&env, &self.client).await;
        let idle_anon = server.anon_mib();
        // The first recall of a tenant builds its in-memory index from the store.
        let cold = std::time::Instant::now();
        drive::call(
            &self.client,
            &server.url,
            &tenants[0],
            "recall",
            json!({"query": corpus::Corpus::new().question(&mut corpus::Rng::new(3))}),
        )
        .await
        .expect("the first recall answers");
        let first_recall_ms = cold.elapsed().as_secs_f64() * 1000.0;
        // The build's peak shows whether it streams (no spike above what it then holds).
        let (built_rss, build_peak) = (server.rss_mib(), server.peak_rss_mib());
        // What a memory costs the index: the heap it grew (anonymous memory, which only an
        // out-of-memory kill gives back) and the vector files it mapped (page cache).
        let memories = (shape.tenants * shape.per_tenant) as f64;
        let heap_kib = (server.anon_mib() - idle_anon) * 1024.0 / memories;
        let gauge = |name| resident::gauge(&self.client, &server.url, name);
        let (index_bytes, mapped_bytes) = (
            gauge("mcp_memory_index_bytes").await,
            gauge("mcp_memory_index_mapped_bytes").await,
        );
        let index = json!({
            "rss_anon_kib_per_memory": heap_kib,
            "rss_file_mib": server.file_mib(),
            "gauge_kib_per_memory": index_bytes / 1024.0 / memories,
            "mapped_kib_per_memory": mapped_bytes / 1024.0 / memories,
        });
        let embedder = if model.is_some() {
            "local model"
        } else {
            "stub"
        };
        println!(
            "\n## {} · {} · width {} · {embedder}\n\nseeded in {:.1} s; startup to healthy {:.0} ms; first recall (builds the index) {first_recall_ms:.0} ms; idle RSS {:.1} MiB (peak so far {:.1} MiB)\n",
            backend.name(),
            shape.label(),
            shape.width,
            seeded.as_secs_f64(),
            server.startup.as_secs_f64() * 1000.0,
            built_rss,
            build_peak
        );
        println!(
            "index per memory: heap {heap_kib:.2} KiB (RssAnon grown), gauge {:.2} KiB, mapped {:.2} KiB; RssFile {:.1} MiB\n",
            index["gauge_kib_per_memory"].as_f64().unwrap_or(f64::NAN),
            index["mapped_kib_per_memory"].as_f64().unwrap_or(f64::NAN),
            server.file_mib()
        );
        println!(
            "| mix | clients | req/s | recall p50/p95/p99 ms | remember p50/p95/p99 ms | CPU ms/req | RSS MiB before → peak | recall p50 ÷ scan | errors |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        let scan_ms = reference
            .iter()
            .find(|r| r.memories == shape.per_tenant && r.width == shape.width)
            .map(|r| r.millis);
        let mut counts: HashMap<String, usize> = tenants
            .iter()
            .map(|t| (t.clone(), shape.per_tenant))
            .collect();
        let mut seed = 1;
        for mix in [Mix::RecallHeavy, Mix::RememberOnly] {
            for &c in concurrency {
                seed += 1;
                let before = server.rss_mib();
                let cpu_before = server.cpu_seconds();
                let peak = std::sync::Arc::new(std::sync::Mutex::new(before));
                let sampler = {
                    let (peak, pid_rss) =
                        (std::sync::Arc::clone(&peak), server_rss_reader(&server));
                    tokio::spawn(async move {
                        loop {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            let now = pid_rss();
                            let mut p = peak.lock().unwrap();
                            *p = p.max(now);
                        }
                    })
                };
                let load = drive::Load {
                    mix,
                    concurrency: c,
                    warmup: self.plan.warmup,
                    duration: self.plan.duration,
                    seed,
                };
                let mut outcome = drive::run(&self.client, &server.url, &tenants, &load).await;
                sampler.abort();
                let cpu = server.cpu_seconds() - cpu_before;
                let peak = *peak.lock().unwrap();
                verify(&self.client, &server.url, &outcome, &mut counts).await;
                let mut row = self.row(
                    backend,
                    shape,
                    embedder,
                    mix,
                    c,
                    &mut outcome,
                    cpu,
                    before,
                    peak,
                    scan_ms,
                );
                row["first_recall_ms"] = json!(first_recall_ms);
                row["build_peak_rss_mib"] = json!(build_peak);
                row["index"] = index.clone();
                self.results.push(row);
            }
        }
        server.stop();
    }

    #[allow(clippy::too_many_arguments)]
    fn row(
        &self,
        backend: Backend,
        shape: &Shape,
        embedder: &str,
        mix: Mix,
        c: usize,
        outcome: &mut Outcome,
        cpu: f64,
        before: f64,
        peak: f64,
        scan_ms: Option<f64>,
    ) -> Value {
        let requests = outcome.requests();
        // CPU time covers warm-up too: divide by every request the server answered.
        let answered = requests as f64 * (self.plan.warmup + self.plan.duration).as_secs_f64()
            / self.plan.duration.as_secs_f64();
        let mut stats = |tool: &str| {
            outcome.latencies.get_mut(tool).map(|l| {
                let p = [
                    percentile(l, 50.0),
                    percentile(l, 95.0),
                    percentile(l, 99.0),
                ];
                (p, l.len())
            })
        };
        let recall = stats("recall");
        let remember = stats("remember");
        let fmt = |s: &Option<([f64; 3], usize)>| match s {
            Some((p, _)) => format!("{:.2} / {:.2} / {:.2}", p[0], p[1], p[2]),
            None => "—".into(),
        };
        let throughput = requests as f64 / outcome.elapsed.as_secs_f64();
        let ratio = match (&recall, scan_ms) {
            (Some((p, _)), Some(scan)) if embedder == "stub" => format!("{:.1}×", p[0] / scan),
            _ => "—".into(),
        };
        let cpu_ms = cpu * 1000.0 / answered.max(1.0);
        println!(
            "| {} | {c} | {throughput:.0} | {} | {} | {cpu_ms:.2} | {before:.0} → {peak:.0} | {ratio} | {} |",
            mix.name(),
            fmt(&recall),
            fmt(&remember),
            outcome.errors.len()
        );
        json!({
            "store": backend.name(), "tenants": shape.tenants, "memories_per_tenant": shape.per_tenant,
            "width": shape.width, "embedder": embedder, "mix": mix.name(), "concurrency": c,
            "requests": requests, "throughput_per_s": throughput,
            "recall_ms": recall.map(|(p, n)| json!({"p50": p[0], "p95": p[1], "p99": p[2], "n": n})),
            "remember_ms": remember.map(|(p, n)| json!({"p50": p[0], "p95": p[1], "p99": p[2], "n": n})),
            "cpu_ms_per_request": cpu_ms, "rss_mib_before": before, "rss_mib_peak": peak,
            "scan_reference_ms": scan_ms, "errors": outcome.errors.len(),
        })
    }
}

fn server_rss_reader(server: &Server) -> impl Fn() -> f64 + Send + 'static {
    let path = format!("/proc/{}/status", server.pid());
    move || {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }
}

/// No lost writes: every tenant written to counts exactly what was seeded plus what the
/// server said it stored, and its newest memories are the ones stored last. Failed calls
/// are reported with the run (and fail the benchmark at the end).
async fn verify(
    client: &reqwest::Client,
    url: &str,
    outcome: &Outcome,
    counts: &mut HashMap<String, usize>,
) {
    if let Some(error) = outcome.errors.first() {
        eprintln!("{} failed calls, the first: {error}", outcome.errors.len());
    }
    for (tenant, ids) in &outcome.stored {
        let count = counts.get_mut(tenant).unwrap();
        *count += ids.len();
        let stats = drive::call(client, url, tenant, "memory_stats", json!({}))
            .await
            .unwrap();
        let expected = format!("[MEMORY] {count} memories for this project");
        assert!(
            stats.starts_with(&expected),
            "lost writes in {tenant}: expected {count}, got {stats}"
        );
        let listed = drive::call(client, url, tenant, "list_memories", json!({"limit": 50}))
            .await
            .unwrap();
        let newest: Vec<&String> = {
            let mut sorted: Vec<&String> = ids.iter().collect();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            sorted.into_iter().take(50).collect()
        };
        // Ids are ULIDs of their creation time, the listing's order; seeded memories are
        // all older than the run.
        for id in newest {
            assert!(
                listed.contains(id.as_str()),
                "{id}, stored in {tenant}, is not listed"
            );
        }
    }
}
