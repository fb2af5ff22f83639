//! Recall and remember on the multilingual set, for each local model: the memories of
//! bench/korean_recall.json (Korean, English and mixed project memories, written for this
//! benchmark) are stored through `remember`, then every question is asked, dense and
//! hybrid, at each model's own thresholds, and every pair of facts is written in a tenant of
//! its own.
//!
//! - recall@1 and recall@5 per kind of question: `<question's language>-><memory's>`
//!   (`ko->en` is a Korean question whose answer is an English memory), `-kw` where the
//!   question shares a word with its Korean fact;
//! - abstention: the share of unanswerable questions answered `no_confident_match` or
//!   `no_match`, and of answerable ones so answered (`abstained`), with recall@5 counting
//!   those as misses (`trusted@5`);
//! - the pairs: each `first` stored, then its `second`; a different fact must be stored
//!   (and name the first as similar), a near-verbatim repeat refused as already known.
//!
//!     make models && cargo bench --bench korean [-- MODEL_DIR ...]
//!
//! Without arguments: every model `make models` fetches. With `EMBEDDING_PROVIDER=openai`
//! and the endpoint's variables in the environment: that remote model instead, judged by the
//! fit recorded in the SQLite file `FIT_FROM` when given (BENCHMARKS.md, "Issue 62: prompts
//! for a remote model"). Writes bench/results/korean.json (a remote model's:
//! korean-openai.json, or korean-openai-prompted.json when it gets prompts).
//! `RECALL_SET=bench/instructions.json` asks the set of instructions and preferences
//! (issue 48, item 4) instead, the same way, and writes bench/results/instructions.json;
//! each kind of question (`instruction`, `preference`, ...) is tallied too.

mod mcp;
mod sets;

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use mcp::{RECALLS, Server, copy_store, shown_ids, stored_id};
use serde_json::{Value, json};

const TENANT: &str = "korean-team";

#[derive(Default)]
struct Tally {
    questions: usize,
    at1: usize,
    at5: usize,
    abstained: usize,
    trusted5: usize,
}

impl Tally {
    fn json(&self) -> Value {
        let share = |n: usize| (n as f64 / self.questions.max(1) as f64 * 1000.0).round() / 1000.0;
        json!({"questions": self.questions, "recall@1": share(self.at1), "recall@5": share(self.at5),
               "abstained": share(self.abstained), "trusted@5": share(self.trusted5)})
    }
}

#[tokio::main]
async fn main() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dirs = sets::model_dirs(root);
    let path = std::env::var("RECALL_SET").unwrap_or_else(|_| "bench/korean_recall.json".into());
    let path = std::path::Path::new(root).join(path);
    let set: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let results = match path.file_stem().unwrap().to_str().unwrap() {
        "korean_recall" => "korean".to_owned(),
        other => other.to_owned(),
    };
    // A set may be asked among another's facts too (`"among"`: its file in bench/), so that
    // its answers compete with a fuller tenant's memories.
    let mut facts = set["facts"].as_array().unwrap().clone();
    if let Some(other) = set["among"].as_str() {
        let other: Value =
            serde_json::from_slice(&std::fs::read(format!("{root}/bench/{other}")).unwrap())
                .unwrap();
        facts.extend(other["facts"].as_array().unwrap().iter().cloned());
    }
    let show_misses = std::env::var("SHOW_MISSES").is_ok_and(|v| v == "1");
    let questions = set["questions"].as_array().unwrap();
    let pairs = set["pairs"].as_array().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    let mut pair_runs = Vec::new();
    for dir in &dirs {
        let model = std::path::Path::new(dir);
        let name = model.file_name().unwrap().to_string_lossy().into_owned();
        let base = scratch.path().join(format!("{name}.db"));
        // A store `mcp-memory calibrate` recorded its fit in: the model judged by that fit.
        if let Ok(fitted) = std::env::var("FIT_FROM") {
            copy_store(std::path::Path::new(&fitted), &base);
        }
        let server = Server::start(&format!("sqlite:{}", base.display()), model, &[]).await;
        let mut memory_of = HashMap::new();
        for fact in &facts {
            let answer = server
                .call(TENANT, "remember", json!({"content": fact["text"]}))
                .await;
            memory_of.insert(fact["id"].as_str().unwrap(), stored_id(&answer));
        }
        pair_runs.push(write_pairs(&server, &name, pairs).await);
        drop(server);
        for (recall, weight) in RECALLS {
            let copy = scratch.path().join(format!("{name}-{recall}.db"));
            copy_store(&base, &copy);
            let server = Server::start(&format!("sqlite:{}", copy.display()), model, weight).await;
            let started = Instant::now();
            let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
            for q in questions {
                let (text, data) = server
                    .answer(TENANT, "recall", json!({"query": q["text"], "limit": 5}))
                    .await;
                let abstained = matches!(
                    data["confidence"].as_str(),
                    Some("no_confident_match" | "no_match")
                );
                let shown = shown_ids(&text);
                let rank = q["answer"]
                    .as_str()
                    .and_then(|fact| shown.iter().position(|id| *id == memory_of[fact]));
                let answerable = if q["answer"].is_null() {
                    "unanswerable"
                } else {
                    "answerable"
                };
                if show_misses && !q["answer"].is_null() && rank != Some(0) {
                    let first = text.split("\n1. ").nth(1).unwrap_or_default();
                    let first: String = first
                        .lines()
                        .nth(1)
                        .unwrap_or_default()
                        .chars()
                        .take(80)
                        .collect();
                    println!(
                        "  {name} {recall}: {} at {rank:?}; first: {first}",
                        q["text"]
                    );
                }
                let kind = format!("kind:{}", q["kind"].as_str().unwrap());
                for key in [answerable.to_owned(), sets::kind_of_question(q), kind] {
                    let t = tallies.entry(key).or_default();
                    t.questions += 1;
                    t.at1 += usize::from(rank == Some(0));
                    t.at5 += usize::from(rank.is_some());
                    t.abstained += usize::from(abstained);
                    t.trusted5 += usize::from(rank.is_some() && !abstained);
                }
            }
            let line: Vec<String> = tallies
                .iter()
                .map(|(k, t)| {
                    let j = t.json();
                    if k.starts_with("unanswerable") {
                        format!("{k} abstained {}", j["abstained"])
                    } else {
                        format!(
                            "{k} {}/{} ({})",
                            j["recall@1"], j["recall@5"], j["abstained"]
                        )
                    }
                })
                .collect();
            println!(
                "korean {name} {recall}: recall@1/@5 (abstained) {} ({:.1} s)",
                line.join(", "),
                started.elapsed().as_secs_f64()
            );
            runs.push(json!({
                "model": name, "recall": recall,
                "by_kind": tallies.iter().map(|(k, t)| (k.clone(), t.json())).collect::<serde_json::Map<_, _>>(),
            }));
        }
    }
    // A remote model's results beside the local models', not over them.
    let remote = match sets::remote() {
        true => format!("-{}", runs[0]["model"].as_str().unwrap()),
        false => String::new(),
    };
    let out = format!(
        "{root}/bench/results/{results}{remote}{}.json",
        mcp::precision().1
    );
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&json!({"runs": runs, "pairs": pair_runs})).unwrap(),
    )
    .unwrap();
    println!("wrote {out}");
}

/// Each pair in a tenant of its own: `first`, then `second`. Returns what became of each
/// second, by kind of pair and language.
async fn write_pairs(server: &Server, model: &str, pairs: &[Value]) -> Value {
    let mut outcomes: BTreeMap<String, BTreeMap<&str, usize>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for pair in pairs {
        let tenant = format!("pair-{}", pair["id"].as_str().unwrap());
        let (_, first) = server
            .answer(&tenant, "remember", json!({"content": pair["first"]}))
            .await;
        let (_, second) = server
            .answer(&tenant, "remember", json!({"content": pair["second"]}))
            .await;
        let named =
            (second["similar"].as_array().into_iter().flatten()).any(|s| s["id"] == first["id"]);
        let outcome = match (second["outcome"].as_str().unwrap(), named) {
            ("already_known", _) => "merged",
            (_, true) => "stored, named similar",
            _ => "stored",
        };
        let kind = pair["kind"].as_str().unwrap();
        let right = if kind == "repeat" {
            outcome == "merged"
        } else {
            outcome != "merged"
        };
        if !right {
            wrong.push(pair["id"].clone());
        }
        for key in [
            kind.to_owned(),
            format!("{kind}-{}", pair["lang"].as_str().unwrap()),
        ] {
            *outcomes.entry(key).or_default().entry(outcome).or_default() += 1;
        }
    }
    println!("pairs {model}: {outcomes:?}, wrong: {wrong:?}");
    json!({"model": model, "outcomes": outcomes, "wrong": wrong})
}
