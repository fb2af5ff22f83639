//! Long memories (docs/embeddings.md#long-texts): a fact in the last paragraph of a long
//! memory, and one in its first, asked by meaning, with every long memory embedded two
//! ways: as the local models do (truncated at the model's window) and in windows pooled
//! into one vector (`mcp_memory::embed::window`, what the remote embedders do). The set is
//! bench/long_texts.json, written for this benchmark: 16 long memories (Korean, English and
//! both mixed), 24 short ones on nearby subjects, 32 questions.
//!
//!     make models && cargo bench --features local --bench long_texts [-- MODEL_DIR ...]
//!
//! Without arguments: every model `make models` fetches. Writes (the models not run keep
//! their figures)
//! bench/results/long_texts.json: recall@1 and recall@5 by meaning (cosine over every
//! memory of the set) per model, way, and part of the memory the fact is in (`head`,
//! `tail`), also by the question's language, and how many windows the long texts made.

mod sets;

use std::collections::BTreeMap;
use std::time::Instant;

use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;
use mcp_memory::embed::window::{self, Window};
use serde_json::{Value, json};

/// The windows each model reads, prompt and special tokens included (docs/models.md).
fn model_window(name: &str) -> usize {
    match name {
        "all-MiniLM-L6-v2" => 256,
        "all-mpnet-base-v2" => 384,
        "embeddinggemma-300m" => 2048,
        _ => 512,
    }
}

#[derive(Default)]
struct Tally {
    asked: usize,
    at1: usize,
    at5: usize,
}

impl Tally {
    fn add(&mut self, rank: Option<usize>) {
        self.asked += 1;
        self.at1 += usize::from(rank == Some(0));
        self.at5 += usize::from(rank.is_some_and(|r| r < 5));
    }

    fn json(&self) -> Value {
        let share = |n: usize| (n as f64 / self.asked.max(1) as f64 * 1000.0).round() / 1000.0;
        json!({"questions": self.asked, "recall@1": share(self.at1), "recall@5": share(self.at5)})
    }
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[tokio::main]
async fn main() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dirs = sets::model_dirs(root);
    let set: Value =
        serde_json::from_slice(&std::fs::read(format!("{root}/bench/long_texts.json")).unwrap())
            .unwrap();
    let long = set["long"].as_array().unwrap();
    let short = set["short"].as_array().unwrap();
    let questions = set["questions"].as_array().unwrap();
    let text = |m: &Value| m["text"].as_str().unwrap().to_owned();

    let out = format!("{root}/bench/results/long_texts.json");
    // Models not run this time keep their figures.
    let mut results: BTreeMap<String, Value> = std::fs::read(&out)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    for dir in &dirs {
        let path = std::path::Path::new(dir);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !path.exists() {
            eprintln!("{name}: not fetched, skipped");
            continue;
        }
        let embedder = LocalEmbedder::load(path, None).unwrap();
        // Windows that fit the model's window by its own tokenizer too: the count here
        // makes about as many tokens as the models' in Korean and more in English.
        let window = Window {
            tokens: model_window(&name) * 9 / 10,
            chars: usize::MAX,
        };
        let started = Instant::now();
        let shorts: Vec<Vec<f32>> = {
            let texts: Vec<String> = short.iter().map(text).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            embedder.embed_batch(&refs).await.unwrap()
        };
        let mut truncated = Vec::new();
        let mut pooled = Vec::new();
        let mut windows = 0;
        let (mut truncating, mut windowing) = (0.0, 0.0);
        for memory in long {
            let whole = text(memory);
            let began = Instant::now();
            truncated.push(embedder.embed(&whole).await.unwrap());
            truncating += began.elapsed().as_secs_f64();
            let began = Instant::now();
            let pieces = window::cut(&whole, window);
            windows += pieces.len();
            let vectors = embedder.embed_batch(&pieces).await.unwrap();
            let weights: Vec<usize> = pieces.iter().map(|p| window::tokens(p)).collect();
            pooled.push(window::pool(&vectors, &weights));
            windowing += began.elapsed().as_secs_f64();
        }
        let mut asked = Vec::new();
        for q in questions {
            asked.push(
                embedder
                    .embed_query(q["question"].as_str().unwrap())
                    .await
                    .unwrap(),
            );
        }
        let seconds = started.elapsed().as_secs_f64();

        let mut by_way = BTreeMap::new();
        for (way, longs) in [("truncated", &truncated), ("windows", &pooled)] {
            let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
            for (q, vector) in questions.iter().zip(&asked) {
                let target = long
                    .iter()
                    .position(|m| m["id"] == q["memory"])
                    .expect("a question names a long memory");
                let mut scored: Vec<(f32, usize)> = longs
                    .iter()
                    .chain(&shorts)
                    .enumerate()
                    .map(|(i, m)| (cosine(vector, m), i))
                    .collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0));
                let rank = scored.iter().position(|&(_, i)| i == target);
                let part = q["part"].as_str().unwrap();
                let lang = q["lang"].as_str().unwrap();
                let memory_lang = long[target]["lang"].as_str().unwrap();
                for key in [
                    part.to_owned(),
                    format!("{part} {lang}->{memory_lang}"),
                    "all".to_owned(),
                ] {
                    tallies.entry(key).or_default().add(rank);
                }
            }
            let tallies: BTreeMap<String, Value> =
                tallies.into_iter().map(|(k, t)| (k, t.json())).collect();
            println!(
                "{name} {way}: head {} tail {}",
                tallies["head"]["recall@5"], tallies["tail"]["recall@5"]
            );
            by_way.insert(way, json!(tallies));
        }
        results.insert(
            name.clone(),
            json!({"window_tokens": window.tokens, "windows": windows, "long_memories": long.len(),
                   "seconds": (seconds * 10.0).round() / 10.0,
                   "ms_per_long_memory": {
                       "truncated": (truncating * 1000.0 / long.len() as f64).round(),
                       "windows": (windowing * 1000.0 / long.len() as f64).round()},
                   "ways": by_way}),
        );
    }
    std::fs::write(&out, serde_json::to_string_pretty(&results).unwrap() + "\n").unwrap();
    println!("wrote {out}");
}
