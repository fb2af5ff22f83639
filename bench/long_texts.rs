//! Long memories (docs/embeddings.md#long-texts): a fact in the last paragraph of a long
//! memory, and one in its first, asked by meaning, with every long memory embedded in each
//! of these ways:
//!
//! - `first window`: only the words of its first window by the model's own tokenizer (what
//!   truncation at the model's window read, as the local models did before "Issue 61");
//! - `estimated windows`: windows cut at 90 % of the model's window by the estimate of
//!   tokens the remote embedders use (`mcp_memory::embed::window::cut`), pooled (a window
//!   the model's tokenizer still finds too long is read in windows by the embedder);
//! - `windows N%`: windows cut at N % of the model's window by the model's own tokenizer,
//!   prompt included, pooled; the embedder itself reads a long text one of these ways, and
//!   the benchmark checks that it does (`SHIPPED`).
//!
//! Two sets: bench/long_texts.json, written for this benchmark (16 long memories in Korean,
//! English and both mixed, 24 short ones on nearby subjects, 32 questions, `head` and
//! `tail`), and the tail questions of the calibration set (calibration/README.md: 32 long
//! memories, each asked among its own part's memories).
//!
//!     make models && cargo bench --features local --bench long_texts [-- MODEL_DIR ...]
//!
//! Without arguments: every model `make models` fetches. Writes (the models not run keep
//! their figures) bench/results/long_texts.json: recall@1 and recall@5 by meaning (cosine
//! over every memory of the set) per model, set, way, and part of the memory the fact is in,
//! also by the question's language, and the milliseconds each way took per long memory.

mod sets;

use std::collections::BTreeMap;
use std::time::Instant;

use mcp_memory::calibrate::set::{Asked, parts};
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

/// The shares of the window the model's own windows are cut at.
const SHARES: [usize; 4] = [100, 75, 50, 25];
/// The way the embedder reads a long text itself.
const SHIPPED: usize = 50;

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

/// A long text's vector in every way, in the order of `way_names`, and the time each took.
async fn ways(embedder: &LocalEmbedder, window: usize, text: &str) -> Vec<(Vec<f32>, f64)> {
    let mut out = Vec::new();
    let estimate = Window {
        tokens: window * 9 / 10,
        chars: usize::MAX,
    };
    let prompt = &embedder.prompts().document;
    let tokens = |p: &str| embedder.tokens(&format!("{prompt}{p}")).unwrap();
    let began = Instant::now();
    let first = window::cut_by(text, |p| tokens(p) <= window)[0];
    out.push((
        embedder.embed(first).await.unwrap(),
        began.elapsed().as_secs_f64(),
    ));
    let pieces = window::cut(text, estimate);
    let began = Instant::now();
    let vectors = embedder.embed_batch(&pieces).await.unwrap();
    let weights: Vec<usize> = pieces.iter().map(|p| window::tokens(p)).collect();
    out.push((
        window::pool(&vectors, &weights),
        began.elapsed().as_secs_f64(),
    ));
    for share in SHARES {
        let began = Instant::now();
        let most = window * share / 100;
        let pieces = window::cut_by(text, |p| tokens(p) <= most);
        let vectors = embedder.embed_batch(&pieces).await.unwrap();
        let weights: Vec<usize> = pieces.iter().map(|p| tokens(p)).collect();
        let pooled = if pieces.len() == 1 {
            vectors[0].clone()
        } else {
            window::pool(&vectors, &weights)
        };
        out.push((pooled, began.elapsed().as_secs_f64()));
        if share == SHIPPED {
            let read = embedder.embed(text).await.unwrap();
            let gap = read
                .iter()
                .zip(&out.last().unwrap().0)
                .map(|(a, b)| (a - b).abs());
            assert!(
                gap.fold(0f32, f32::max) < 1e-5,
                "the embedder reads as measured"
            );
        }
    }
    out
}

fn way_names() -> Vec<String> {
    let mut names = vec!["first window".to_owned(), "estimated windows".to_owned()];
    names.extend(SHARES.iter().map(|s| format!("windows {s}%")));
    names
}

/// The rank of `target` among `memories` for `asked`.
fn rank(asked: &[f32], memories: &[&Vec<f32>], target: usize) -> Option<usize> {
    let mut scored: Vec<(f32, usize)> = (memories.iter().enumerate())
        .map(|(i, m)| (cosine(asked, m), i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.iter().position(|&(_, i)| i == target)
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
    let names = way_names();

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
        let window = model_window(&name);
        let started = Instant::now();
        let mut seconds = vec![0.0; names.len()];
        let mut long_count = 0;

        // bench/long_texts.json
        let shorts: Vec<Vec<f32>> = {
            let texts: Vec<String> = short.iter().map(text).collect();
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            embedder.embed_batch(&refs).await.unwrap()
        };
        let mut by_way: Vec<Vec<Vec<f32>>> = vec![Vec::new(); names.len()];
        for memory in long {
            long_count += 1;
            for (i, (vector, took)) in ways(&embedder, window, &text(memory))
                .await
                .into_iter()
                .enumerate()
            {
                by_way[i].push(vector);
                seconds[i] += took;
            }
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
        let mut long_texts = BTreeMap::new();
        for (way, longs) in names.iter().zip(&by_way) {
            let memories: Vec<&Vec<f32>> = longs.iter().chain(&shorts).collect();
            let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
            for (q, vector) in questions.iter().zip(&asked) {
                let target = long
                    .iter()
                    .position(|m| m["id"] == q["memory"])
                    .expect("a question names a long memory");
                let rank = rank(vector, &memories, target);
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
                "{name} long_texts {way}: head {} tail {}",
                tallies["head"]["recall@5"], tallies["tail"]["recall@5"]
            );
            long_texts.insert(way.clone(), json!(tallies));
        }

        // The calibration set's tail questions, each part apart.
        let mut tails: Vec<Tally> = (0..names.len()).map(|_| Tally::default()).collect();
        for part in parts() {
            let mut vectors: Vec<Vec<Vec<f32>>> = vec![Vec::new(); names.len()];
            for memory in &part.memories {
                if embedder
                    .tokens(&format!("{}{}", embedder.prompts().document, memory.text))
                    .unwrap()
                    <= window
                {
                    let vector = embedder.embed(&memory.text).await.unwrap();
                    vectors.iter_mut().for_each(|v| v.push(vector.clone()));
                    continue;
                }
                long_count += 1;
                for (i, (vector, took)) in ways(&embedder, window, &memory.text)
                    .await
                    .into_iter()
                    .enumerate()
                {
                    vectors[i].push(vector);
                    seconds[i] += took;
                }
            }
            for q in part.questions.iter().filter(|q| q.kind == Asked::Tail) {
                let asked = embedder.embed_query(&q.text).await.unwrap();
                let target = part.memories.iter().position(|m| m.id == q.answer).unwrap();
                for (tally, memories) in tails.iter_mut().zip(&vectors) {
                    let memories: Vec<&Vec<f32>> = memories.iter().collect();
                    tally.add(rank(&asked, &memories, target));
                }
            }
        }
        let mut calibration = BTreeMap::new();
        for (way, tally) in names.iter().zip(&tails) {
            println!("{name} calibration tails {way}: {}", tally.json());
            calibration.insert(way.clone(), tally.json());
        }
        let ms: BTreeMap<&String, f64> = names
            .iter()
            .zip(&seconds)
            .map(|(n, s)| (n, (s * 1000.0 / long_count as f64).round()))
            .collect();
        results.insert(
            name.clone(),
            json!({"window_tokens": window, "shipped": format!("windows {SHIPPED}%"),
                   "long_memories": long_count,
                   "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                   "ms_per_long_memory": ms,
                   "long_texts": long_texts, "calibration_tails": calibration}),
        );
    }
    std::fs::write(&out, serde_json::to_string_pretty(&results).unwrap() + "\n").unwrap();
    println!("wrote {out}");
}
