//! The English option all-mpnet-base-v2 (fetched by `make models`, or from
//! MCP_MEMORY_TEST_MPNET_MODEL) through our encoder (crates/encoder/src/model.rs): its
//! vectors against the independent numpy implementation (bench/reference_mpnet.py), a batch
//! against one text at a time, its window, and recall by paraphrase through the binary.

mod support;

use std::path::PathBuf;

use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;
use serde_json::{Value, json};
use support::process;

fn model_dir() -> PathBuf {
    support::model_dir("MCP_MEMORY_TEST_MPNET_MODEL", "all-mpnet-base-v2")
}

fn load() -> LocalEmbedder {
    support::load_model(&model_dir())
}

/// The model's window: a text of more tokens is read in windows.
const WINDOW: usize = 384;

/// Each fixture text, its token ids and its reference vector.
fn reference() -> Vec<(String, Vec<u32>, Vec<f64>)> {
    let fixture: Value =
        serde_json::from_str(include_str!("fixtures/mpnet_reference.json")).unwrap();
    (fixture["sentences"].as_array().unwrap().iter())
        .map(|s| {
            let vector = (s["embedding"].as_array().unwrap().iter())
                .map(|v| v.as_f64().unwrap())
                .collect();
            (
                s["text"].as_str().unwrap().to_owned(),
                support::ids(s),
                vector,
            )
        })
        .collect()
}

/// Our vector of a fixture text, as the reference computed it: the text past the window,
/// which the reference truncated, by the encoder on the reference's ids
/// (`support::encode_ids`).
async fn ours(
    embedder: &LocalEmbedder,
    precision: mcp_memory_encoder::Precision,
    text: &str,
    ids: &[u32],
) -> Vec<f32> {
    if ids.len() >= WINDOW {
        return support::encode_ids(&model_dir(), precision, ids);
    }
    embedder.embed(text).await.unwrap()
}

/// Every text of the fixture (one past the 384-token window, `ours`), within 1e-6 of the
/// numpy float64 forward in every component (1.5e-7 here).
#[tokio::test]
async fn vectors_match_the_independent_reference() {
    let embedder = load();
    assert_eq!(embedder.dimension(), 768);
    assert!(embedder.prompts().query.is_empty());
    let mut worst = 0.0f64;
    for (text, ids, reference) in reference() {
        let ours = ours(&embedder, mcp_memory_encoder::Precision::F32, &text, &ids).await;
        worst = worst.max(support::within(&text, &ours, &reference, 1e-6));
    }
    eprintln!("largest difference from the reference: {worst:e}");
}

/// With `EMBEDDING_PRECISION=int8` (docs/models.md, "int8 products") every vector of the
/// fixture stays within a cosine of 0.998 of the reference.
#[tokio::test]
async fn int8_products_stay_close_to_the_reference() {
    let embedder = support::load_int8(&model_dir());
    let mut worst = 1.0f64;
    for (text, ids, reference) in reference() {
        let ours = ours(&embedder, mcp_memory_encoder::Precision::Int8, &text, &ids).await;
        worst = worst.min(support::close_in_int8(&text, &ours, &reference));
    }
    eprintln!("smallest cosine to the reference: {worst}");
}

/// Texts of very different lengths in one padded pass give each text's own vector: the
/// positions and the relative bias ignore the padding.
#[tokio::test]
async fn a_padded_batch_gives_the_same_vectors_as_one_at_a_time() {
    let texts: Vec<String> = reference().into_iter().map(|(t, _, _)| t).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    support::batch_matches_one_at_a_time(&load(), &texts).await;
}

/// Through the binary with MPNet's own thresholds: facts come back for questions in other
/// words, and a question about nothing stored gets no match.
#[tokio::test]
async fn recall_by_paraphrase_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = support::local_model_env(dir.path(), &model_dir());
    let server = process::start(&mut env).await;
    let headers = [("x-tenant-id", "english-team")];
    let facts = support::PARAPHRASES;
    for (fact, _) in facts {
        let stored = server
            .call(&headers, "remember", json!({"content": fact}))
            .await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
    for (fact, question) in facts {
        let answer = server
            .call(&headers, "recall", json!({"query": question}))
            .await;
        let first = answer.split("\n1. ").nth(1).unwrap_or_default();
        assert!(first.contains(fact), "{question}: {answer}");
    }
    let unrelated = server
        .call(
            &headers,
            "recall",
            json!({"query": "What is a good recipe for banana bread?"}),
        )
        .await;
    assert!(unrelated.contains("NO CONFIDENT MATCH"), "{unrelated}");
}
