//! A zero-latency OpenAI-compatible embedder for the load benchmark, so what is measured is
//! the server, not a model. A text's vector is the normalised sum of one pseudo-random vector
//! per word, so texts sharing words are close (as with a real model) and the server's ranking
//! does real work. The width comes from the model name: `stub-384`, `stub-1536`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

type WordVectors = Arc<RwLock<HashMap<(String, usize), Arc<Vec<f32>>>>>;

pub struct Stub {
    pub base_url: String,
}

/// Serves `/v1/embeddings` on 127.0.0.1:0 from a runtime of its own, so the load generator's
/// workers never wait behind it.
pub fn start() -> Stub {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let app = axum::Router::new()
                .route("/v1/embeddings", axum::routing::post(embed))
                .with_state(WordVectors::default());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    Stub {
        base_url: format!("http://{}/v1", rx.recv().unwrap()),
    }
}

async fn embed(State(words): State<WordVectors>, Json(body): Json<Value>) -> Json<Value> {
    let width = body["model"]
        .as_str()
        .and_then(|m| m.strip_prefix("stub-"))
        .and_then(|w| w.parse().ok())
        .unwrap_or(384);
    let text = body["input"].as_str().unwrap_or_default();
    Json(json!({"data": [{"embedding": vector(&words, text, width)}]}))
}

pub fn vector_of(text: &str, width: usize) -> Vec<f32> {
    vector(&WordVectors::default(), text, width)
}

fn vector(words: &WordVectors, text: &str, width: usize) -> Vec<f32> {
    let mut sum = vec![0.0f32; width];
    for word in text.split_whitespace() {
        let key = (word.to_lowercase(), width);
        let cached = words.read().unwrap().get(&key).cloned();
        let v = cached.unwrap_or_else(|| {
            let v = Arc::new(word_vector(&key.0, width));
            words.write().unwrap().insert(key, Arc::clone(&v));
            v
        });
        for (s, x) in sum.iter_mut().zip(v.iter()) {
            *s += x;
        }
    }
    let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
    sum.iter().map(|x| x / norm).collect()
}

/// SplitMix64 seeded by the word: deterministic across runs and processes.
fn word_vector(word: &str, width: usize) -> Vec<f32> {
    let mut state = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    (0..width)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}
