//! The integer scan alone (`search::scan`): queries scanned one by one against the same
//! queries in one shared pass (`dot_all_shared`), on one thread and on every core at once,
//! at 10k and 100k memories of width 384. What it says is whether a scan is bound by memory
//! bandwidth (a shared pass then costs each query a fraction) or by arithmetic (it does
//! not), which decides when concurrent recalls should share a pass.
//!
//!     cargo bench --bench scan
//!
//! Prints a Markdown table and writes bench/results/scan.json.

use std::time::Instant;

use mcp_memory::search::scan::{dot_all, dot_all_shared};
use serde_json::json;

const WIDTH: usize = 384;

/// SplitMix64, for reproducible values.
fn values(seed: u64, n: usize) -> impl Iterator<Item = u64> {
    let mut state = seed;
    (0..n).map(move |_| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// The median of `runs` timings of `work`, in milliseconds.
fn median(runs: usize, mut work: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let began = Instant::now();
            work();
            began.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Milliseconds per query for `queries` scanned one by one and in one shared pass, with
/// `threads` threads each doing the same at once (as concurrent recalls on every core do).
fn per_query(rows: &[i8], queries: &[Vec<i16>], threads: usize, runs: usize) -> (f64, f64) {
    let refs: Vec<&[i16]> = queries.iter().map(Vec::as_slice).collect();
    let timed = |shared: bool| {
        let total = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        median(runs, || {
                            if shared {
                                std::hint::black_box(dot_all_shared(rows, &refs));
                            } else {
                                let mut dots = Vec::new();
                                for query in &refs {
                                    dot_all(rows, query, &mut dots);
                                    std::hint::black_box(&dots);
                                }
                            }
                        })
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).sum::<f64>()
        });
        total / threads as f64 / queries.len() as f64
    };
    (timed(false), timed(true))
}

fn main() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut results = Vec::new();
    println!(
        "| memories | queries | threads | one by one, ms/query | shared pass, ms/query | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for memories in [10_000, 30_000, 100_000] {
        let rows: Vec<i8> = values(1, memories * WIDTH).map(|v| v as i8).collect();
        for count in [1usize, 4, 16] {
            let queries: Vec<Vec<i16>> = (0..count)
                .map(|q| {
                    values(100 + q as u64, WIDTH)
                        .map(|v| (v as i16) >> 1)
                        .collect()
                })
                .collect();
            for threads in [1, threads] {
                let runs = (2_000_000 / memories / count).clamp(5, 200);
                let (alone, shared) = per_query(&rows, &queries, threads, runs);
                println!(
                    "| {memories} | {count} | {threads} | {alone:.3} | {shared:.3} | {:.2} |",
                    alone / shared
                );
                results.push(json!({
                    "memories": memories, "width": WIDTH, "queries": count, "threads": threads,
                    "one_by_one_ms_per_query": alone, "shared_ms_per_query": shared,
                }));
            }
        }
    }
    let out = json!({"bench": "scan", "results": results});
    std::fs::write(
        "bench/results/scan.json",
        serde_json::to_string_pretty(&out).unwrap() + "\n",
    )
    .unwrap();
}
