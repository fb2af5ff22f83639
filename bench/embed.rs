//! Embedding speed of the in-process model: load time, one short query at a time (p50,
//! p95), batched throughput, and resident memory with the model loaded.
//!
//!     make models && cargo bench --bench embed [-- MODEL_DIR [--kernel=portable|avx2|avx512|neon]
//!         [--precision=f32|int8]]
//!
//! The default model is MiniLM, the default kernel the fastest this CPU runs, the default
//! precision f32. Prints a one-line summary and writes
//! bench/results/embed-<model>-<kernel>[-int8].json.

use std::path::PathBuf;
use std::time::Instant;

use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;
use mcp_memory_encoder::{Kernel, Precision};

const SINGLE_RUNS: usize = 200;
const BATCH_TEXTS: usize = 1024;
const BATCH_SIZE: usize = 32;
const IN_FLIGHT: usize = 128;

fn rss_mb() -> f64 {
    status_mb("VmRSS:")
}

/// The most this process has held resident so far.
fn peak_mb() -> f64 {
    status_mb("VmHWM:")
}

fn status_mb(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Short developer-memory sentences, varied so no two are identical.
fn texts(n: usize) -> Vec<String> {
    let subjects = [
        "the deploy pipeline",
        "our test suite",
        "the staging database",
        "release notes",
        "the API gateway",
        "code review",
    ];
    let facts = [
        "runs every night at two",
        "needs approval from the platform team",
        "uses blue-green switching",
        "is configured in the infra repo",
        "was moved to the new cluster",
    ];
    (0..n)
        .map(|i| {
            format!(
                "{} {} (note {i})",
                subjects[i % subjects.len()],
                facts[(i / subjects.len()) % facts.len()]
            )
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let dir = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".models/all-MiniLM-L6-v2")
        });
    let kernel = std::env::args()
        .find_map(|a| a.strip_prefix("--kernel=").map(str::to_owned))
        .map(|name| Kernel::named(&name).unwrap())
        .unwrap_or_else(Kernel::best);
    let int8 = std::env::args().any(|a| a == "--precision=int8");
    let (precision, suffix) = match int8 {
        true => (Precision::Int8, "-int8"),
        false => (Precision::F32, ""),
    };
    let rss_before = rss_mb();
    let started = Instant::now();
    let embedder = LocalEmbedder::load_on(&dir, None, kernel, precision)
        .expect("model loads (run `make models`)");
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    embedder.embed("warm up").await.unwrap();

    let queries = texts(SINGLE_RUNS);
    let mut latencies: Vec<f64> = Vec::with_capacity(SINGLE_RUNS);
    for q in &queries {
        let t = Instant::now();
        embedder.embed(q).await.unwrap();
        latencies.push(t.elapsed().as_secs_f64() * 1e3);
    }
    latencies.sort_by(f64::total_cmp);
    let p50 = latencies[SINGLE_RUNS / 2];
    let p95 = latencies[SINGLE_RUNS * 95 / 100];
    let single_per_s = 1e3 * SINGLE_RUNS as f64 / latencies.iter().sum::<f64>();

    let corpus = texts(BATCH_TEXTS);
    let t = Instant::now();
    for chunk in corpus.chunks(BATCH_SIZE) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        embedder.embed_batch(&refs).await.unwrap();
    }
    let batched_per_s = BATCH_TEXTS as f64 / t.elapsed().as_secs_f64();

    // Concurrent single requests, as a busy server sees them: the worker batches them. At
    // most IN_FLIGHT wait at once, within the queue's bound (one more would be refused).
    use futures_util::StreamExt;
    let t = Instant::now();
    let answered: Vec<_> = futures_util::stream::iter(&corpus)
        .map(|q| embedder.embed(q))
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await;
    for answer in answered {
        answer.unwrap();
    }
    let concurrent_per_s = BATCH_TEXTS as f64 / t.elapsed().as_secs_f64();
    let (rss, peak) = (rss_mb(), peak_mb());

    let result = serde_json::json!({
        "model": dir.file_name().map(|n| n.to_string_lossy().into_owned()),
        "kernel": kernel.name(),
        "precision": if int8 { "int8" } else { "f32" },
        "dimension": embedder.dimension(),
        "load_ms": load_ms,
        "single": {"runs": SINGLE_RUNS, "p50_ms": p50, "p95_ms": p95, "per_s": single_per_s},
        "batched": {"texts": BATCH_TEXTS, "batch": BATCH_SIZE, "per_s": batched_per_s},
        "concurrent": {"texts": BATCH_TEXTS, "per_s": concurrent_per_s},
        "rss_mb": {"before_load": rss_before, "after": rss, "peak": peak},
    });
    let out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/results");
    std::fs::create_dir_all(&out).unwrap();
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    std::fs::write(
        out.join(format!("embed-{name}-{}{suffix}.json", kernel.name())),
        serde_json::to_string_pretty(&result).unwrap(),
    )
    .unwrap();
    println!(
        "embed {name} ({}{suffix}): load {load_ms:.0} ms, single p50 {p50:.1} ms p95 {p95:.1} ms ({single_per_s:.0}/s), \
         batched {batched_per_s:.0}/s, concurrent {concurrent_per_s:.0}/s, RSS {rss:.0} MB (peak {peak:.0})",
        kernel.name()
    );
}
