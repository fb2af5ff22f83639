//! Test support: an OpenAI-compatible embeddings stub serving the deterministic embedder
//! of docs/embeddings.md#test-embedder, the real router on 127.0.0.1:0, and a small MCP client.
#![allow(dead_code)] // each test crate uses its own part of this module

#[cfg(feature = "s3")]
pub mod aws;
pub mod oauth;
pub mod process;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub const DIMENSION: usize = 64;

/// A model folder of the real-model tests: `$var` when set, else `.models/<name>` of the
/// checkout (`make models` puts each there).
pub fn model_dir(var: &str, name: &str) -> std::path::PathBuf {
    std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(".models")
                .join(name)
        })
}

/// The binary's variables to serve the model in `model` at its own thresholds, on a SQLite
/// file in `dir`.
pub fn local_model_env(dir: &std::path::Path, model: &std::path::Path) -> HashMap<String, String> {
    [
        (
            "DATABASE_URL",
            format!("sqlite:{}", dir.join("memory.db").display()),
        ),
        ("EMBEDDING_PROVIDER", "local".into()),
        ("EMBEDDING_MODEL", model.display().to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The model in `dir`, or a failure that says how to fetch it.
#[cfg(feature = "local")]
pub fn load_model(dir: &std::path::Path) -> mcp_memory::embed::local::LocalEmbedder {
    mcp_memory::embed::local::LocalEmbedder::load(dir, None)
        .unwrap_or_else(|e| panic!("{e} (run `make models`)"))
}

/// A fixture text's vector from the encoder alone, on the reference's own token ids. A text
/// past the model's window is read in windows (docs/embeddings.md#long-texts) where the
/// reference truncated it: this is what checks the arithmetic at the window's full length.
#[cfg(feature = "local")]
pub fn encode_ids(
    dir: &std::path::Path,
    precision: mcp_memory_encoder::Precision,
    ids: &[u32],
) -> Vec<f32> {
    let kernel = match precision {
        mcp_memory_encoder::Precision::Int8 => int8_kernel(),
        mcp_memory_encoder::Precision::F32 => mcp_memory_encoder::Kernel::best(),
    };
    let (encoder, _) = mcp_memory_encoder::Encoder::open(dir, kernel).unwrap();
    let encoder = encoder.with_precision(precision).unwrap();
    encoder.encode(&[ids]).unwrap().remove(0)
}

/// A fixture sentence's token ids.
pub fn ids(sentence: &Value) -> Vec<u32> {
    (sentence["ids"].as_array().unwrap().iter())
        .map(|v| v.as_u64().unwrap() as u32)
        .collect()
}

/// The model in `dir` with `EMBEDDING_PRECISION=int8`, on `int8_kernel`.
#[cfg(feature = "local")]
pub fn load_int8(dir: &std::path::Path) -> mcp_memory::embed::local::LocalEmbedder {
    mcp_memory::embed::local::LocalEmbedder::load_on(
        dir,
        None,
        int8_kernel(),
        mcp_memory_encoder::Precision::Int8,
    )
    .unwrap_or_else(|e| panic!("{e} (run `make models`)"))
}

/// The fastest kernel this CPU runs int8 products on: AVX-512 with AVX-512 VNNI, AVX2 with
/// AVX-VNNI, else the portable one (docs/models.md, "int8 products").
#[cfg(feature = "local")]
pub fn int8_kernel() -> mcp_memory_encoder::Kernel {
    (mcp_memory_encoder::Kernel::available().into_iter().rev())
        .find(|k| mcp_memory_encoder::int8::runs_on(*k))
        .expect("the portable kernel has int8 products")
}

/// The cosine of two vectors, in f64.
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot = |x: &[f32], y: &[f32]| -> f64 {
        x.iter()
            .zip(y)
            .map(|(p, q)| f64::from(*p) * f64::from(*q))
            .sum()
    };
    dot(a, b) / (dot(a, a) * dot(b, b)).sqrt()
}

/// How far `ours` is from `reference` at most, each component within `tolerance` (absolute:
/// some components are ~1e-33 in every vector, so a relative error means nothing).
pub fn within(text: &str, ours: &[f32], reference: &[f64], tolerance: f64) -> f64 {
    assert_eq!(ours.len(), reference.len(), "{text:.40}: width");
    let mut worst = 0.0f64;
    for (i, (a, b)) in ours.iter().zip(reference).enumerate() {
        let gap = (f64::from(*a) - b).abs();
        assert!(
            gap <= tolerance,
            "{text:.40}: component {i} is {a}, reference {b}"
        );
        worst = worst.max(gap);
    }
    worst
}

/// An int8 vector within a cosine of 0.998 of its float64 reference (docs/models.md, "int8
/// products"); the cosine, for the test to report its smallest.
pub fn close_in_int8(text: &str, ours: &[f32], reference: &[f64]) -> f64 {
    let reference: Vec<f32> = reference.iter().map(|v| *v as f32).collect();
    let cosine = cosine(ours, &reference);
    assert!(
        cosine >= 0.998,
        "{text:.40}: cosine {cosine} to the reference"
    );
    cosine
}

/// Texts of very different lengths in one pass give each text's own vector, within 1e-5.
#[cfg(feature = "local")]
pub async fn batch_matches_one_at_a_time(
    embedder: &mcp_memory::embed::local::LocalEmbedder,
    texts: &[&str],
) {
    use mcp_memory::embed::Embedder;
    let batch = embedder.embed_batch(texts).await.unwrap();
    for (text, together) in texts.iter().zip(batch) {
        let alone = embedder.embed(text).await.unwrap();
        let gap = together
            .iter()
            .zip(&alone)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(gap < 1e-5, "{text:.40}: batched differs by {gap}");
    }
}

/// Developer facts, each with a question asking for it in other words: what the real-model
/// tests recall through the binary.
pub const PARAPHRASES: [(&str, &str); 3] = [
    (
        "Production deploys use blue-green releases on EKS, switched by the ALB.",
        "How do we roll out a new version to production?",
    ),
    (
        "Run the test suite with `make test`; it starts PostgreSQL itself.",
        "What command runs the tests?",
    ),
    (
        "We chose PostgreSQL over MongoDB because we need transactions across tables.",
        "Why did we pick our database?",
    ),
];

/// A Korean memory of at most `bytes` UTF-8 bytes whose last paragraph, about a third of
/// it, says `fact` over and over, after words of no meaning: longer than any remote
/// embedder's window, and about `fact` only in its tail.
pub fn long_korean(fact: &str, bytes: usize) -> String {
    const SYLLABLES: [char; 20] = [
        '가', '나', '다', '라', '마', '바', '사', '아', '자', '차', '카', '타', '파', '하', '거',
        '너', '더', '러', '머', '버',
    ];
    let mut text = String::new();
    let mut seed: u64 = 7;
    while text.len() < bytes * 2 / 3 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        for i in 0..2 + (seed >> 60) % 3 {
            text.push(SYLLABLES[((seed >> (8 * i)) % 20) as usize]);
        }
        text.push(' ');
    }
    text.push_str("\n\n");
    while text.len() + fact.len() < bytes {
        text.push_str(fact);
        text.push(' ');
    }
    text.trim_end().to_owned()
}

/// The first result's line of a recall's answer; empty when it found nothing.
pub fn top_hit(recalled: &str) -> &str {
    (recalled.lines())
        .find(|l| l.starts_with("1. "))
        .unwrap_or_default()
}

/// The fake embedder: texts sharing words get close vectors (9 of 10 words → ≈0.93,
/// unrelated ≈0).
pub fn fake_vector(text: &str) -> Vec<f64> {
    fake_vector_of(text, DIMENSION)
}

/// The fake embedder's vector of `width` values: the stub answers a model named
/// `fake-<width>` with these (another model, for `mcp-memory reembed`).
pub fn fake_vector_of(text: &str, width: usize) -> Vec<f64> {
    let lower = text.to_lowercase();
    let mut tokens: Vec<&str> = lower
        .split(|c: char| {
            !(c.is_ascii_lowercase() || c.is_ascii_digit() || ('가'..='힣').contains(&c))
        })
        .filter(|t| t.chars().count() >= 2)
        .collect();
    if tokens.is_empty() {
        tokens.push(" empty");
    }
    let mut sum = vec![0.0f64; width];
    for token in tokens {
        let mut component = 0;
        let mut block = 0;
        while component < width {
            let digest = Sha256::digest(format!("{token}:{block}").as_bytes());
            for b in digest.iter().take(width - component) {
                sum[component] += f64::from(*b) / 255.0 - 0.5;
                component += 1;
            }
            block += 1;
        }
    }
    let norm = sum.iter().map(|x| x * x).sum::<f64>().sqrt();
    let norm = if norm == 0.0 { 1.0 } else { norm };
    sum.iter().map(|x| x / norm).collect()
}

/// An OpenAI-compatible `/v1/embeddings`; `fail_with` makes it answer that status,
/// `answer_with` makes it answer 200 with a given body instead of an embedding, and `hold`
/// keeps every request waiting until `release`, counting how many wait at once.
#[derive(Clone)]
pub struct EmbeddingStub {
    pub base_url: String,
    behaviour: Arc<Behaviour>,
    requests: Arc<Requests>,
}

/// How the stub answers: see `EmbeddingStub`'s methods.
#[derive(Default)]
struct Behaviour {
    fail_with: AtomicU16,
    /// A status, how many requests still get it, and the `Retry-After` sent with it.
    fail_next: std::sync::Mutex<(u16, usize, Option<&'static str>)>,
    /// The most tokens it reads (one every two bytes); 0: no limit.
    max_tokens: std::sync::atomic::AtomicUsize,
    answer: std::sync::Mutex<Option<String>>,
    /// Every text it was sent, in order.
    seen: std::sync::Mutex<Vec<String>>,
}

/// The requests the stub is answering now, the most it ever answered at once, and whether
/// it lets them through.
pub struct Requests {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    open: tokio::sync::watch::Sender<bool>,
}

impl EmbeddingStub {
    pub async fn start() -> EmbeddingStub {
        let behaviour = Arc::new(Behaviour::default());
        let requests = Arc::new(Requests {
            now: Default::default(),
            most: Default::default(),
            open: tokio::sync::watch::channel(true).0,
        });
        let app = axum::Router::new()
            .route("/v1/embeddings", axum::routing::post(embed))
            .with_state((Arc::clone(&behaviour), Arc::clone(&requests)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        EmbeddingStub {
            base_url: format!("http://{addr}/v1"),
            behaviour,
            requests,
        }
    }

    /// Requests wait, unanswered, until `release`.
    pub fn hold(&self) {
        self.requests.open.send_replace(false);
    }

    pub fn release(&self) {
        self.requests.open.send_replace(true);
    }

    /// Requests waiting or being answered now.
    pub fn requests_now(&self) -> usize {
        self.requests.now.load(Ordering::SeqCst)
    }

    /// The most requests it ever had at once.
    pub fn requests_at_most(&self) -> usize {
        self.requests.most.load(Ordering::SeqCst)
    }

    pub fn fail_with(&self, status: u16) {
        self.behaviour.fail_with.store(status, Ordering::SeqCst);
    }

    /// The next `times` requests are answered `status`, with `Retry-After` when given.
    pub fn fail_next(&self, status: u16, times: usize, retry_after: Option<&'static str>) {
        *self.behaviour.fail_next.lock().unwrap() = (status, times, retry_after);
    }

    /// Requests not yet failed of those `fail_next` named.
    pub fn failures_to_come(&self) -> usize {
        self.behaviour.fail_next.lock().unwrap().1
    }

    /// A text of more than `max` tokens (one every two bytes: more than the server's own
    /// count) is refused with 400, as OpenAI words it; 0: no limit.
    pub fn read_at_most(&self, max: usize) {
        self.behaviour.max_tokens.store(max, Ordering::SeqCst);
    }

    /// Every text it was sent so far, as sent.
    pub fn seen(&self) -> Vec<String> {
        self.behaviour.seen.lock().unwrap().clone()
    }

    pub fn answer_with(&self, body: Option<&str>) {
        *self.behaviour.answer.lock().unwrap() = body.map(str::to_owned);
    }
}

type StubState = (Arc<Behaviour>, Arc<Requests>);

/// Counts a request from its arrival to its answer.
struct Counted(Arc<Requests>);

impl Counted {
    fn new(requests: &Arc<Requests>) -> Counted {
        let now = requests.now.fetch_add(1, Ordering::SeqCst) + 1;
        requests.most.fetch_max(now, Ordering::SeqCst);
        Counted(Arc::clone(requests))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn embed(
    State((behaviour, requests)): State<StubState>,
    headers: axum::http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let _counted = Counted::new(&requests);
    let _ = requests.open.subscribe().wait_for(|open| *open).await;
    // The request shape of docs/embeddings.md#openai-compatible: bearer key, model and input, no dimensions.
    assert_eq!(headers["authorization"], "Bearer test-key");
    assert_eq!(body.as_object().unwrap().len(), 2, "{body}");
    assert!(body["model"].is_string());
    let status = behaviour.fail_with.load(Ordering::SeqCst);
    if status != 0 {
        return (
            StatusCode::from_u16(status).unwrap(),
            "upstream is overloaded",
        )
            .into_response();
    }
    {
        let mut next = behaviour.fail_next.lock().unwrap();
        if next.1 > 0 {
            next.1 -= 1;
            let mut failed = (StatusCode::from_u16(next.0).unwrap(), "slow down").into_response();
            if let Some(after) = next.2 {
                failed
                    .headers_mut()
                    .insert("retry-after", axum::http::HeaderValue::from_static(after));
            }
            return failed;
        }
    }
    if let Some(answer) = behaviour.answer.lock().unwrap().clone() {
        return (StatusCode::OK, answer).into_response();
    }
    let text = body["input"].as_str().unwrap_or_default();
    behaviour.seen.lock().unwrap().push(text.to_owned());
    let (max, tokens) = (
        behaviour.max_tokens.load(Ordering::SeqCst),
        text.len().div_ceil(2),
    );
    if max > 0 && tokens > max {
        let message = format!(
            "This model's maximum context length is {max} tokens, however you requested \
             {tokens} tokens. Please reduce your prompt."
        );
        let error = json!({"error": {"message": message, "type": "invalid_request_error"}});
        return (StatusCode::BAD_REQUEST, Json(error)).into_response();
    }
    let width = (body["model"].as_str())
        .and_then(|m| m.strip_prefix("fake-"))
        .and_then(|w| w.parse().ok())
        .unwrap_or(DIMENSION);
    Json(json!({"data": [{"embedding": fake_vector_of(text, width)}]})).into_response()
}

/// The environment a test server runs with; tests add or replace variables.
pub fn base_env(stub: &EmbeddingStub, db: &std::path::Path) -> HashMap<String, String> {
    [
        ("DATABASE_URL", format!("sqlite:{}", db.display())),
        ("EMBEDDING_PROVIDER", "openai".into()),
        ("EMBEDDING_BASE_URL", stub.base_url.clone()),
        ("EMBEDDING_API_KEY", "test-key".into()),
        ("EMBEDDING_MODEL", "fake-64".into()),
        ("EMBEDDING_DIM", DIMENSION.to_string()),
        ("RECALL_MIN_SIMILARITY", "0.3".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A fresh database on the test server (TEST_DATABASE_URL), for MCP_MEMORY_TEST_STORE=postgres.
#[cfg(feature = "postgres")]
pub async fn postgres_database() -> String {
    use sqlx::Connection;
    let url = std::env::var("TEST_DATABASE_URL").expect("TEST_DATABASE_URL: run `make test`");
    let name = format!(
        "t_{}",
        mcp_memory::memory::new_id(mcp_memory::memory::now_ms()).to_lowercase()
    );
    let mut admin = sqlx::postgres::PgConnection::connect(&url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    format!("{}/{name}", url.rsplit_once('/').unwrap().0)
}

#[cfg(not(feature = "postgres"))]
pub async fn postgres_database() -> String {
    panic!("MCP_MEMORY_TEST_STORE=postgres needs --features postgres")
}

/// Fresh S3 buckets on the emulator, for MCP_MEMORY_TEST_STORE=s3.
#[cfg(feature = "s3")]
pub async fn s3_store(env: &mut HashMap<String, String>) {
    let (vector_bucket, state_bucket) = aws::buckets(DIMENSION).await;
    env.remove("DATABASE_URL");
    env.insert("VECTOR_BUCKET".into(), vector_bucket);
    env.insert("STATE_BUCKET".into(), state_bucket);
    env.insert("S3_FORCE_PATH_STYLE".into(), "true".into());
    aws::point_at_emulator(env);
}

#[cfg(not(feature = "s3"))]
pub async fn s3_store(_: &mut HashMap<String, String>) {
    panic!("MCP_MEMORY_TEST_STORE=s3 needs --features s3")
}

/// The real router with a SQLite file (or PostgreSQL or S3, see above), on 127.0.0.1:0.
pub struct TestServer {
    pub url: String,
    pub stub: EmbeddingStub,
    pub dir: tempfile::TempDir,
    client: reqwest::Client,
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(&[]).await
    }

    pub async fn start_with(extra: &[(&str, &str)]) -> TestServer {
        let stub = EmbeddingStub::start().await;
        let dir = tempfile::tempdir().unwrap();
        let mut env = base_env(&stub, &dir.path().join("memory.db"));
        match std::env::var("MCP_MEMORY_TEST_STORE").as_deref() {
            Ok("postgres") => {
                env.insert("DATABASE_URL".into(), postgres_database().await);
            }
            Ok("s3") => s3_store(&mut env).await,
            _ => {}
        }
        for (k, v) in extra {
            env.insert((*k).to_owned(), (*v).to_owned());
        }
        let config = mcp_memory::config::Config::from_vars(|k| env.get(k).cloned()).unwrap();
        let app = Arc::new(mcp_memory::app::App::build(config).await.unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, mcp_memory::http::router(app))
                .await
                .unwrap()
        });
        TestServer {
            url: format!("http://{addr}"),
            stub,
            dir,
            client: reqwest::Client::new(),
        }
    }

    /// POSTs raw JSON to /mcp with the usual MCP headers plus `headers`.
    pub async fn post(&self, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut request = self
            .client
            .post(format!("{}/mcp", self.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Calls a tool in the legacy era; returns its text and error flag.
    pub async fn call(&self, headers: &[(&str, &str)], tool: &str, args: Value) -> (String, bool) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}});
        let (status, reply) = self.post(&body, headers).await;
        assert_eq!(status, 200, "{reply}");
        let result = &reply["result"];
        assert!(result.is_object(), "not a tool result: {reply}");
        let content = result["content"].as_array().unwrap();
        assert_eq!(content.len(), 1, "exactly one text block: {reply}");
        (
            content[0]["text"].as_str().unwrap().to_owned(),
            result["isError"].as_bool().unwrap_or(false),
        )
    }

    /// A successful tool call's text.
    pub async fn ok(&self, headers: &[(&str, &str)], tool: &str, args: Value) -> String {
        let (text, is_error) = self.call(headers, tool, args).await;
        assert!(!is_error, "{tool} failed: {text}");
        text
    }
}

/// The id in a `[MEMORY] Stored as <id>.` answer.
pub fn stored_id(text: &str) -> String {
    let rest = text
        .strip_prefix("[MEMORY] Stored as ")
        .unwrap_or_else(|| panic!("not a write: {text}"));
    rest[..26].to_owned()
}
