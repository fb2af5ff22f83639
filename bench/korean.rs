//! Korean recall through `recall`, for each local model: the facts of
//! bench/korean_recall.json (Korean project memories, written for this benchmark) are stored
//! through `remember`, then every question (Korean in other words, Korean sharing a word,
//! English about a Korean fact) is asked, dense and hybrid, at each model's own thresholds.
//! Reports recall@1 and recall@5 (the fact among the first 1 or 5 results) per kind.
//!
//!     make models && cargo bench --bench korean [-- MODEL_DIR ...]
//!
//! Without arguments: every model `make models` fetches. Writes bench/results/korean.json.

mod mcp;

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
}

impl Tally {
    fn json(&self) -> Value {
        let share = |n: usize| (n as f64 / self.questions.max(1) as f64 * 1000.0).round() / 1000.0;
        json!({"questions": self.questions, "recall@1": share(self.at1), "recall@5": share(self.at5)})
    }
}

#[tokio::main]
async fn main() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut dirs: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if dirs.is_empty() {
        dirs = [
            "multilingual-e5-small",
            "all-MiniLM-L6-v2",
            "all-mpnet-base-v2",
        ]
        .map(|m| format!("{root}/.models/{m}"))
        .to_vec();
    }
    let set: Value =
        serde_json::from_slice(&std::fs::read(format!("{root}/bench/korean_recall.json")).unwrap())
            .unwrap();
    let facts = set["facts"].as_array().unwrap();
    let questions = set["questions"].as_array().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for dir in &dirs {
        let model = std::path::Path::new(dir);
        let name = model.file_name().unwrap().to_string_lossy().into_owned();
        let base = scratch.path().join(format!("{name}.db"));
        let server = Server::start(&format!("sqlite:{}", base.display()), model, &[]).await;
        let mut memory_of = HashMap::new();
        for fact in facts {
            let answer = server
                .call(TENANT, "remember", json!({"content": fact["text"]}))
                .await;
            memory_of.insert(fact["id"].as_str().unwrap(), stored_id(&answer));
        }
        for (recall, weight) in RECALLS {
            let copy = scratch.path().join(format!("{name}-{recall}.db"));
            copy_store(&base, &copy);
            let server = Server::start(&format!("sqlite:{}", copy.display()), model, weight).await;
            let started = Instant::now();
            let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
            for q in questions {
                let answer = server
                    .call(TENANT, "recall", json!({"query": q["text"], "limit": 5}))
                    .await;
                let shown = shown_ids(&answer);
                let want = &memory_of[q["answer"].as_str().unwrap()];
                let rank = shown.iter().position(|id| id == want);
                for key in [
                    "all".to_owned(),
                    format!(
                        "{}-{}",
                        q["lang"].as_str().unwrap(),
                        q["kind"].as_str().unwrap()
                    ),
                ] {
                    let t = tallies.entry(key).or_default();
                    t.questions += 1;
                    t.at1 += usize::from(rank == Some(0));
                    t.at5 += usize::from(rank.is_some());
                }
            }
            let line: Vec<String> = tallies
                .iter()
                .map(|(k, t)| {
                    let j = t.json();
                    format!("{k} {}/{}", j["recall@1"], j["recall@5"])
                })
                .collect();
            println!(
                "korean {name} {recall}: recall@1/@5 {} ({:.1} s)",
                line.join(", "),
                started.elapsed().as_secs_f64()
            );
            runs.push(json!({
                "model": name, "recall": recall,
                "by_kind": tallies.iter().map(|(k, t)| (k.clone(), t.json())).collect::<serde_json::Map<_, _>>(),
            }));
        }
    }
    let out = format!("{root}/bench/results/korean.json");
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&json!({"runs": runs})).unwrap(),
    )
    .unwrap();
    println!("wrote {out}");
}
