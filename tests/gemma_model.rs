//! The multilingual option embeddinggemma-300m (fetched by `make models`, or from
//! MCP_MEMORY_TEST_GEMMA_MODEL) through our encoder (crates/encoder/src/gemma.rs): its
//! vectors against the independent numpy implementation (bench/reference_gemma.py), queries
//! and documents with their prompts, one text past the sliding window; a batch against one
//! text at a time; int8 products; and Korean through the binary.

mod support;

use std::path::PathBuf;

use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;
use serde_json::{Value, json};
use support::process;

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
    assert_eq!(embedder.prompts().document, "title: none | text: ");
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

/// Through the binary with the model's own thresholds (docs/models.md, "embeddinggemma-300m"):
/// a Korean repeat with another ending is refused, a fact one number apart is kept, Korean
/// and English questions in other words find their Korean fact first without being labelled
/// NO CONFIDENT MATCH, and a question about nothing stored is.
#[tokio::test]
async fn korean_through_the_binary() {
    let dir = tempfile::tempdir().unwrap();
    let mut env = support::local_model_env(dir.path(), &model_dir());
    let server = process::start(&mut env).await;
    let headers = [("x-tenant-id", "korean-team")];
    let facts = [
        "운영 배포는 매주 화요일 오후에만 하고, 금요일에는 절대 배포하지 않는다.",
        "스테이징 DB 비밀번호는 Vault의 secret/stg/db 경로에 있다.",
        "로그는 Loki로 보내고 30일이 지나면 자동으로 지운다.",
    ];
    for fact in facts {
        let stored = server
            .call(&headers, "remember", json!({"content": fact}))
            .await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
    let repeat = "운영 배포는 매주 화요일 오후에만 하고, 금요일에는 절대 배포하지 않습니다.";
    let answer = server
        .call(&headers, "remember", json!({"content": repeat}))
        .await;
    assert!(answer.contains("Already known"), "{answer}");
    let different = "로그는 Loki로 보내고 90일이 지나면 자동으로 지운다.";
    let answer = server
        .call(&headers, "remember", json!({"content": different}))
        .await;
    assert!(answer.starts_with("[MEMORY] Stored as "), "{answer}");
    for (question, fact) in [
        ("새 버전은 무슨 요일에 내보낼 수 있어?", facts[0]),
        ("검증 환경 데이터베이스 접속 암호는 어디 보관돼?", facts[1]),
        (
            "Which day of the week are production releases allowed?",
            facts[0],
        ),
    ] {
        let answer = server
            .call(&headers, "recall", json!({"query": question}))
            .await;
        let first = answer.split("\n1. ").nth(1).unwrap_or_default();
        assert!(first.contains(fact), "{question}: {answer}");
        assert!(
            !answer.contains("NO CONFIDENT MATCH"),
            "{question}: {answer}"
        );
    }
    let unrelated = server
        .call(
            &headers,
            "recall",
            json!({"query": "Who won the football world cup in 1998?"}),
        )
        .await;
    assert!(unrelated.contains("NO CONFIDENT MATCH"), "{unrelated}");
}
