//! The multilingual option embeddinggemma-300m (fetched by `make models`, or from
//! MCP_MEMORY_TEST_GEMMA_MODEL) through our encoder (crates/encoder/src/gemma.rs): its
//! vectors against the independent numpy implementation (bench/reference_gemma.py), queries
//! and documents with their prompts, one text past the sliding window; a batch against one
//! text at a time; and int8 products.

mod support;

use std::path::PathBuf;

use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;
use serde_json::Value;

fn model_dir() -> PathBuf {
    support::model_dir("MCP_MEMORY_TEST_GEMMA_MODEL", "embeddinggemma-300m")
}

/// The fixture's texts: (text, whether it is a query, the reference vector).
fn reference() -> Vec<(String, bool, Vec<f64>)> {
    let fixture: Value =
        serde_json::from_str(include_str!("fixtures/gemma_reference.json")).unwrap();
    (fixture["sentences"].as_array().unwrap().iter())
        .map(|s| {
            let vector = (s["embedding"].as_array().unwrap().iter())
                .map(|v| v.as_f64().unwrap())
                .collect();
            let text = s["text"].as_str().unwrap().to_owned();
            (text, s["prompt_name"] == "query", vector)
        })
        .collect()
}

async fn embed(embedder: &LocalEmbedder, text: &str, query: bool) -> Vec<f32> {
    if query {
        embedder.embed_query(text).await.unwrap()
    } else {
        embedder.embed(text).await.unwrap()
    }
}

/// Every text of the fixture, each with the prompt its use gets (a query's, a document's),
/// one of them 698 tokens long so that the sliding layers' window of 257 cuts it, within
/// 1e-6 of the numpy float64 forward in every component (7.6e-8 here).
#[tokio::test]
async fn vectors_match_the_independent_reference() {
    let embedder = support::load_model(&model_dir());
    assert_eq!(embedder.dimension(), 768);
    assert_eq!(embedder.prompts().query, "task: search result | query: ");
    assert_eq!(embedder.prompts().passage, "title: none | text: ");
    let mut worst = 0.0f64;
    for (text, query, reference) in reference() {
        let ours = embed(&embedder, &text, query).await;
        worst = worst.max(support::within(&text, &ours, &reference, 1e-6));
    }
    eprintln!("largest difference from the reference: {worst:e}");
}

/// With `EMBEDDING_PRECISION=int8` every vector of the fixture stays within a cosine of
/// 0.998 of the reference.
#[tokio::test]
async fn int8_products_stay_close_to_the_reference() {
    let embedder = support::load_int8(&model_dir());
    let mut worst = 1.0f64;
    for (text, query, reference) in reference() {
        let ours = embed(&embedder, &text, query).await;
        worst = worst.min(support::close_in_int8(&text, &ours, &reference));
    }
    eprintln!("smallest cosine to the reference: {worst}");
}

/// Texts of very different lengths in one pass give each text's own vector.
#[tokio::test]
async fn a_batch_gives_the_same_vectors_as_one_at_a_time() {
    let embedder = support::load_model(&model_dir());
    let texts: Vec<String> = reference().into_iter().map(|(t, _, _)| t).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    support::batch_matches_one_at_a_time(&embedder, &texts).await;
}
