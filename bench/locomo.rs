//! Recall quality on LoCoMo (Maharana et al. 2024; development data, CC BY-NC 4.0, never
//! copied into the project): every dialog turn is stored through `remember` over MCP as
//! `[session date] speaker: text`, one tenant per conversation, and every question with
//! evidence is asked through `recall`. Reports recall@5, recall@10 and MRR of the evidence
//! turns, overall and per question category, for dense-only and hybrid recall with the
//! local model (MCP_MEMORY_TEST_MODEL, else MiniLM), on SQLite and (when TEST_DATABASE_URL
//! is set) PostgreSQL.
//!
//!     make models && scripts/with-postgres.sh cargo bench --features postgres --bench locomo
//!
//! Optional arguments: `-- DATA_FILE [MODE]` (default ../shared/data/locomo-dev.json and
//! `balanced`, the tool's default mode; every question asks for `limit` 10). A turn that dedup merged into an earlier memory counts as that memory.
//! Both servers of a backend share one store: the memories are written once and the two
//! recall modes differ only in RECALL_KEYWORD_WEIGHT. Prints one line per run and writes
//! bench/results/locomo.json.
//!
//! `LOCOMO_MODELS=DIR:DIR...` compares models instead (SQLite, every mode, dense and
//! hybrid, each model at its own thresholds) and writes bench/results/locomo-models.json.
//!
//! `LOCOMO_SWEEP=1` measures the popularity loop instead (SQLite, hybrid): the turns are
//! stored once, then every mode asks every question in a row on a copy of that store, once
//! as the server runs (each recall records its results' uses, which feed the ranking) and
//! once with every use cleared after each recall (as if nothing were recorded). Writes
//! bench/results/locomo-sweep.json.

mod mcp;
mod postgres;
mod sets;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use mcp::{RECALLS, Server, copy_store, shown_ids, stored_id};
use serde_json::{Value, json};

const K: usize = 10;

/// The model directory the runs embed with: `MCP_MEMORY_TEST_MODEL`, else MiniLM from
/// `make models`.
fn default_model() -> std::path::PathBuf {
    std::env::var_os("MCP_MEMORY_TEST_MODEL")
        .map(Into::into)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/.models/all-MiniLM-L6-v2").into())
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
    (recall, weight): (&str, &[(&str, &str)]),
    data: &[Value],
    mode: &str,
) -> Value {
    let server = Server::start(database_url, &default_model(), weight).await;
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
        for (dia_id, content) in sets::locomo_turns(&sample["conversation"]) {
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
    let model = default_model();
    let server = Server::start(&format!("sqlite:{}", base.display()), &model, &[]).await;
    let (memory_of, stored) = ingest(&server, data).await;
    println!("locomo sweep: {stored} turns stored");
    let mut runs = Vec::new();
    for mode in ["precision", "balanced", "exploratory"] {
        for uses in ["recorded", "cleared"] {
            let copy = dir.path().join(format!("{mode}-{uses}.db"));
            copy_store(&base, &copy);
            let server = Server::start(&format!("sqlite:{}", copy.display()), &model, &[]).await;
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

/// Models side by side (`LOCOMO_MODELS=DIR:DIR...`, SQLite): each model stores every turn
/// once, at its own thresholds, then every mode asks every question, dense and hybrid,
/// each on a copy of that store.
async fn models(data: &[Value], dirs: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for model in dirs.split(':').filter(|d| !d.is_empty()) {
        let model = std::path::Path::new(model);
        let name = model.file_name().unwrap().to_string_lossy().into_owned();
        let base = dir.path().join(format!("{name}.db"));
        let server = Server::start(&format!("sqlite:{}", base.display()), model, &[]).await;
        let started = Instant::now();
        let (memory_of, stored) = ingest(&server, data).await;
        let ingest_s = started.elapsed().as_secs_f64();
        println!("locomo {name}: {stored} turns stored in {ingest_s:.0} s");
        for mode in ["precision", "balanced", "exploratory"] {
            for (recall, weight) in RECALLS {
                let copy = dir.path().join(format!("{name}-{mode}-{recall}.db"));
                copy_store(&base, &copy);
                let url = format!("sqlite:{}", copy.display());
                let server = Server::start(&url, model, weight).await;
                let started = Instant::now();
                let (overall, by_category) = ask(&server, data, &memory_of, mode, None).await;
                let o = overall.json();
                let categories: serde_json::Map<String, Value> = (by_category.iter())
                    .map(|(c, t)| (c.to_string(), t.json()))
                    .collect();
                println!(
                    "locomo {name} {recall} ({mode}): recall@5 {} recall@10 {} MRR {} ({:.0} s)",
                    o["recall@5"],
                    o["recall@10"],
                    o["mrr"],
                    started.elapsed().as_secs_f64()
                );
                runs.push(
                    json!({"model": name, "mode": mode, "recall": recall, "overall": o,
                           "by_category": categories, "ingest_seconds": round(ingest_s)}),
                );
            }
        }
    }
    json!({"runs": runs})
}

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
    if let Ok(dirs) = std::env::var("LOCOMO_MODELS") {
        let report = models(&data, &dirs).await;
        let out = format!(
            "{}/bench/results/locomo-models{}.json",
            env!("CARGO_MANIFEST_DIR"),
            mcp::precision().1
        );
        std::fs::write(&out, serde_json::to_string_pretty(&report).unwrap()).unwrap();
        println!("wrote {out}");
        return;
    }
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
    for recall in RECALLS {
        let file = dir.path().join(format!("locomo-{}.db", recall.0));
        let url = format!("sqlite:{}", file.display());
        results.push(run("sqlite", &url, recall, &data, &mode).await);
    }
    match std::env::var("TEST_DATABASE_URL") {
        Ok(server) => {
            for recall in RECALLS {
                let url = postgres::fresh_database(&server).await;
                results.push(run("postgres", &url, recall, &data, &mode).await);
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
