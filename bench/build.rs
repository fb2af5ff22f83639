//! Building a tenant's search index (`search::SearchIndex::push`) from long Korean memories,
//! which are indexed by syllable pairs and so bring many distinct terms each: the time per
//! memory at each length should grow with the length, not with its square. Then the load
//! benchmark's kind of tenant: 100,000 short memories of 12–20 words from a 4,000-word
//! vocabulary drawn by a Zipf law (`bench/load/corpus.rs`), the build a first recall waits for.
//!
//!     cargo bench --bench build
//!
//! Prints a Markdown table and writes bench/results/build.json.

use std::time::Instant;

use mcp_memory::memory::Scope;
use mcp_memory::search::{Entry, SearchIndex, VectorFiles, terms};
use serde_json::json;

const MEMORIES: usize = 100;
const WIDTH: usize = 384;

/// A Korean text of `chars` syllables in words of four, different for each `seed`.
fn korean(seed: usize, chars: usize) -> String {
    let mut state = seed as u64 * 0x9e37_79b9_7f4a_7c15 + 1;
    let mut text = String::new();
    for i in 0..chars {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.push(char::from_u32(0xAC00 + (state % 11_172) as u32).unwrap());
        if i % 4 == 3 {
            text.push(' ');
        }
    }
    text
}

/// `count` memories as the load benchmark writes them: 12–20 words of a Zipf vocabulary.
fn short(count: usize) -> Vec<Vec<String>> {
    const VOCABULARY: usize = 4_000;
    // The Zipf law's cumulative weights, 1/rank.
    let mut cumulative = Vec::with_capacity(VOCABULARY);
    let mut sum = 0.0;
    for rank in 1..=VOCABULARY {
        sum += 1.0 / rank as f64;
        cumulative.push(sum);
    }
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    (0..count)
        .map(|i| {
            let words = 12 + (next() % 9) as usize;
            let mut text = format!("unique{i}");
            for _ in 0..words {
                let at = (next() % 1_000_000) as f64 / 1_000_000.0 * sum;
                let rank = cumulative.partition_point(|c| *c < at);
                text.push_str(&format!(" word{rank}"));
            }
            terms(&text)
        })
        .collect()
}

/// The median of 5 builds of the index of `memories`, in milliseconds.
fn build(memories: &[Vec<String>]) -> f64 {
    let vector = vec![0.05f32; WIDTH];
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let started = Instant::now();
            let mut index = SearchIndex::new(WIDTH, &VectorFiles::heap());
            for (i, terms) in memories.iter().enumerate() {
                let id = format!("m{i:05}");
                let entry = Entry {
                    id: &id,
                    scope: Scope::Project,
                    conversation: None,
                    expires_at: None,
                };
                index.push(entry, &vector, terms);
            }
            std::hint::black_box(&index);
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn main() {
    println!(
        "| syllables per memory | terms per memory | build of {MEMORIES} (ms) | µs per term |"
    );
    println!("|---|---|---|---|");
    let mut rows = Vec::new();
    for chars in [500, 1_000, 2_000, 4_000, 8_000] {
        let memories: Vec<Vec<String>> = (0..MEMORIES).map(|i| terms(&korean(i, chars))).collect();
        let per_memory = memories.iter().map(Vec::len).sum::<usize>() / MEMORIES;
        let ms = build(&memories);
        let per_term = ms * 1000.0 / (per_memory * MEMORIES) as f64;
        println!("| {chars} | {per_memory} | {ms:.1} | {per_term:.3} |");
        rows.push(json!({"syllables": chars, "terms": per_memory, "build_ms": ms, "us_per_term": per_term}));
    }
    let memories = short(100_000);
    let ms = build(&memories);
    let per_memory = ms * 1000.0 / memories.len() as f64;
    println!(
        "\n100,000 short memories (12–20 Zipf words): {ms:.0} ms, {per_memory:.2} µs per memory"
    );
    let out = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/results/build.json");
    let short = json!({"memories": memories.len(), "build_ms": ms, "us_per_memory": per_memory});
    std::fs::write(
        out,
        serde_json::to_string_pretty(
            &json!({ "memories": MEMORIES, "rows": rows, "short": short }),
        )
        .unwrap(),
    )
    .unwrap();
}
