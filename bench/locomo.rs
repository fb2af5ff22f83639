//! Recall quality on LoCoMo (Maharana et al. 2024; development data, CC BY-NC 4.0, never
//! copied into the project): every dialog turn is stored through `remember` over MCP as
//! `[session date] speaker: text`, one tenant per conversation, and every question with
//! evidence is asked through `recall`. Reports recall@5, recall@10 and MRR of the evidence
//! turns, overall and per question category, for dense-only and hybrid recall with the
//! local MiniLM model, on SQLite and (when TEST_DATABASE_URL is set) PostgreSQL.
//!
//!     make model && scripts/with-postgres.sh cargo bench --features postgres --bench locomo
//!
//! Optional arguments: `-- DATA_FILE [MODE]` (default ../shared/data/locomo-dev.json and
//! `balanced`, the tool's default mode; every question asks for `limit` 10). A turn that dedup merged into an earlier memory counts as that memory.
//! Both servers of a backend share one store: the memories are written once and the two
//! recall modes differ only in RECALL_KEYWORD_WEIGHT. Prints one line per run and writes
//! bench/results/locomo.json.
//!
//! `LOCOMO_SWEEP=1` measures the popularity loop instead (SQLite, hybrid): the turns are
//! stored once, then every mode asks every question in a row on a copy of that store, once
//! as the server runs (each recall records its results' uses, which feed the ranking) and
//! once with every use cleared after each recall (as if nothing were recorded). Writes
//! bench/results/locomo-sweep.json.

mod postgres;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};

const K: usize = 10;

struct Server {
    url: String,
    client: reqwest::Client,
}

impl Server {
    /// The real router on 127.0.0.1:0 over the given store, with the local model;
    /// `keyword_weight` None leaves RECALL_KEYWORD_WEIGHT at its default.
    async fn start(database_url: &str, keyword_weight: Option<&str>) -> Server {
        let model = std::env::var("MCP_MEMORY_TEST_MODEL").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/.models/all-MiniLM-L6-v2").into()
        });
        // The floor `make run` uses for MiniLM.
        let mut env: HashMap<&str, String> = [
            ("DATABASE_URL", database_url.to_owned()),
            ("EMBEDDING_PROVIDER", "local".into()),
            ("EMBEDDING_MODEL", model),
            ("RECALL_MIN_SIMILARITY", "0.2".into()),
        ]
        .into_iter()
        .collect();
        if let Some(weight) = keyword_weight {
            env.insert("RECALL_KEYWORD_WEIGHT", weight.into());
        }
        let config = mcp_memory::config::Config::from_vars(|k| env.get(k).cloned()).unwrap();
        let app = Arc::new(mcp_memory::app::App::build(config).await.unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        tokio::spawn(async move {
            axum::serve(listener, mcp_memory::http::router(app))
                .await
                .unwrap()
        });
        Server {
            url,
            client: reqwest::Client::new(),
        }
    }

    async fn call(&self, tenant: &str, tool: &str, args: Value) -> String {
        let reply: Value = self
            .client
            .post(&self.url)
            .header("x-memory-tenant", tenant)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let text = reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(reply["result"]["isError"] != true, "{tool}: {text}");
        text
    }
}

/// The memory ids a tool answer shows, in order.
fn shown_ids(text: &str) -> Vec<String> {
    text.match_indices("[id:")
        .map(|(i, _)| text[i + 4..i + 30].to_owned())
        .collect()
}

fn stored_id(text: &str) -> String {
    match text.strip_prefix("[MEMORY] Stored as ") {
        Some(rest) => rest[..26].to_owned(),
        None => shown_ids(text).remove(0), // "Already known": the memory it merged into
    }
}

/// Every turn of one conversation, in session order, as (dia_id, content).
fn turns(conversation: &Value) -> Vec<(String, String)> {
    let c = conversation.as_object().unwrap();
    let mut sessions: Vec<(u32, &Value, &str)> = c
        .iter()
        .filter_map(|(k, v)| {
            let n = k.strip_prefix("session_")?.parse().ok()?;
            let date = c.get(&format!("session_{n}_date_time"))?.as_str()?;
            Some((n, v, date))
        })
        .filter(|(_, v, _)| v.is_array())
        .collect();
    sessions.sort_by_key(|(n, _, _)| *n);
    sessions
        .into_iter()
        .flat_map(|(_, turns, date)| {
            turns.as_array().unwrap().iter().map(move |t| {
                (
                    t["dia_id"].as_str().unwrap().to_owned(),
                    format!(
                        "[{date}] {}: {}",
                        t["speaker"].as_str().unwrap(),
                        t["text"].as_str().unwrap()
                    ),
                )
            })
        })
        .collect()
}

#[derive(Default, Clone)]
struct Tally {
    questions: usize,
    recall_5: f64,
    recall_10: f64,
    reciprocal_rank: f64,
}

impl Tally {
    fn add(&mut self, evidence: &HashSet<String>, found: &[String]) {
        let hits = |k: usize| {
            found
                .iter()
                .take(k)
                .filter(|id| evidence.contains(*id))
                .count()
        };
        self.questions += 1;
        self.recall_5 += hits(5) as f64 / evidence.len() as f64;
        self.recall_10 += hits(K) as f64 / evidence.len() as f64;
        if let Some(rank) = found.iter().take(K).position(|id| evidence.contains(id)) {
            self.reciprocal_rank += 1.0 / (rank + 1) as f64;
        }
    }

    fn json(&self) -> Value {
        let n = self.questions.max(1) as f64;
        json!({"questions": self.questions, "recall@5": round(self.recall_5 / n),
               "recall@10": round(self.recall_10 / n), "mrr": round(self.reciprocal_rank / n)})
    }
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Stores every turn through one server, then asks every question through it. Each recall
/// mode gets a store of its own: recall records accesses, which feed the ranking, so one
/// mode's questions must not shape the other's answers.
async fn run(
    backend: &str,
    database_url: &str,
    recall: &str,
    keyword_weight: Option<&str>,
    data: &[Value],
    mode: &str,
) -> Value {
    let server = Server::start(database_url, keyword_weight).await;
    let started = Instant::now();
    let (memory_of, stored) = ingest(&server, data).await;
    let ingest_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let (overall, by_category) = ask(&server, data, &memory_of, mode, None).await;
    let recall_s = started.elapsed().as_secs_f64();
    let o = overall.json();
    println!(
        "locomo {backend} {recall} ({mode}): recall@5 {} recall@10 {} MRR {} over {} questions \
         ({stored} turns stored in {ingest_s:.0} s; recalls took {recall_s:.0} s)",
        o["recall@5"], o["recall@10"], o["mrr"], o["questions"]
    );
    json!({
        "backend": backend, "recall": recall, "mode": mode, "overall": o,
        "by_category": by_category.iter().map(|(c, t)| (c.to_string(), t.json())).collect::<serde_json::Map<_, _>>(),
        "turns_stored": stored, "ingest_seconds": round(ingest_s), "recall_seconds": round(recall_s),
    })
}

/// Every turn through `remember`, one tenant per conversation: each conversation's turn
/// ids and the memory each became, and how many were stored.
async fn ingest(server: &Server, data: &[Value]) -> (Vec<HashMap<String, String>>, usize) {
    let mut memory_of: Vec<HashMap<String, String>> = Vec::new();
    let mut stored = 0;
    for sample in data {
        let tenant = format!("locomo-{}", sample["sample_id"].as_str().unwrap_or("x"));
        let mut ids = HashMap::new();
        for (dia_id, content) in turns(&sample["conversation"]) {
            let answer = server
                .call(&tenant, "remember", json!({"content": content}))
                .await;
            ids.insert(dia_id, stored_id(&answer));
            stored += 1;
        }
        memory_of.push(ids);
    }
    (memory_of, stored)
}

/// Every question through `recall`, in order; with `forget_uses`, the SQLite file whose
/// recorded uses are cleared after each one.
async fn ask(
    server: &Server,
    data: &[Value],
    memory_of: &[HashMap<String, String>],
    mode: &str,
    forget_uses: Option<&std::path::Path>,
) -> (Tally, BTreeMap<u64, Tally>) {
    let mut overall = Tally::default();
    let mut by_category: BTreeMap<u64, Tally> = BTreeMap::new();
    for (sample, ids) in data.iter().zip(memory_of) {
        let tenant = format!("locomo-{}", sample["sample_id"].as_str().unwrap_or("x"));
        for qa in sample["qa"].as_array().unwrap() {
            let evidence: HashSet<String> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| ids.get(e.as_str()?.trim()).cloned())
                .collect();
            if evidence.is_empty() {
                continue;
            }
            let question = qa["question"].as_str().unwrap_or_default();
            let answer = server
                .call(
                    &tenant,
                    "recall",
                    json!({"query": question, "limit": K, "mode": mode}),
                )
                .await;
            let found = shown_ids(&answer);
            overall.add(&evidence, &found);
            by_category
                .entry(qa["category"].as_u64().unwrap_or(0))
                .or_default()
                .add(&evidence, &found);
            if let Some(file) = forget_uses {
                // Another connection's change of counts: the server reads them again.
                rusqlite::Connection::open(file)
                    .unwrap()
                    .execute_batch(
                        "DELETE FROM memory_uses; UPDATE memories SET access_count = 0, \
                         last_accessed_at = NULL WHERE access_count > 0 OR last_accessed_at IS NOT NULL",
                    )
                    .unwrap();
            }
        }
    }
    (overall, by_category)
}

/// The popularity loop (`LOCOMO_SWEEP=1`): every mode, uses recorded and cleared, each on a
/// copy of one ingested store.
async fn sweep(data: &[Value]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.db");
    let server = Server::start(&format!("sqlite:{}", base.display()), None).await;
    let (memory_of, stored) = ingest(&server, data).await;
    println!("locomo sweep: {stored} turns stored");
    let mut runs = Vec::new();
    for mode in ["precision", "balanced", "exploratory"] {
        for uses in ["recorded", "cleared"] {
            let copy = dir.path().join(format!("{mode}-{uses}.db"));
            rusqlite::Connection::open(&base)
                .unwrap()
                .execute("VACUUM INTO ?1", [copy.display().to_string()])
                .unwrap();
            let server = Server::start(&format!("sqlite:{}", copy.display()), None).await;
            let cleared = (uses == "cleared").then_some(copy.as_path());
            let (overall, _) = ask(&server, data, &memory_of, mode, cleared).await;
            let o = overall.json();
            println!(
                "locomo sweep hybrid {mode}, uses {uses}: recall@5 {} recall@10 {} MRR {} over {} questions",
                o["recall@5"], o["recall@10"], o["mrr"], o["questions"]
            );
            runs.push(json!({"mode": mode, "uses": uses, "overall": o}));
        }
    }
    json!({"runs": runs})
}

/// The two recall modes: vector-only, and hybrid at the default weight.
const RECALLS: [(&str, Option<&str>); 2] = [("dense", Some("0")), ("hybrid", None)];

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let path = args.first().cloned().unwrap_or_else(|| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/data/locomo-dev.json"
        )
        .into()
    });
    let mode = args.get(1).cloned().unwrap_or_else(|| "balanced".into());
    let data: Vec<Value> = serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}")),
    )
    .unwrap();
    if std::env::var("LOCOMO_SWEEP").is_ok_and(|v| v == "1") {
        let report = sweep(&data).await;
        let out = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/bench/results/locomo-sweep.json"
        );
        std::fs::write(out, serde_json::to_string_pretty(&report).unwrap()).unwrap();
        println!("wrote {out}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for (recall, weight) in RECALLS {
        let file = dir.path().join(format!("locomo-{recall}.db"));
        let url = format!("sqlite:{}", file.display());
        results.push(run("sqlite", &url, recall, weight, &data, &mode).await);
    }
    match std::env::var("TEST_DATABASE_URL") {
        Ok(server) => {
            for (recall, weight) in RECALLS {
                let url = postgres::fresh_database(&server).await;
                results.push(run("postgres", &url, recall, weight, &data, &mode).await);
            }
        }
        Err(_) => println!(
            "locomo postgres: skipped (no TEST_DATABASE_URL; run through scripts/with-postgres.sh)"
        ),
    }
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/results/locomo.json");
    std::fs::write(
        out,
        serde_json::to_string_pretty(&json!({"data": path, "k": K, "runs": results})).unwrap(),
    )
    .unwrap();
    println!("wrote {out}");
}
