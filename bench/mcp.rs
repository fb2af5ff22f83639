//! The real router on 127.0.0.1:0 with the local model, called over MCP as an agent would:
//! what the recall-quality benchmarks (LoCoMo, the Korean set) share.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

/// The two ways of recalling, and the variables a server gets for each: by meaning only,
/// and hybrid at the default weight.
pub const RECALLS: [(&str, &[(&str, &str)]); 2] = [
    ("dense", &[("RECALL_KEYWORD_WEIGHT", "0")]),
    ("hybrid", &[]),
];

/// `EMBEDDING_PRECISION` from the benchmark's environment, which every server it starts
/// gets (docs/models.md, "int8 products"), and what the result files' names take from it:
/// `-int8`, or nothing for the default f32.
pub fn precision() -> (Option<String>, &'static str) {
    match std::env::var("EMBEDDING_PRECISION").ok() {
        Some(p) if p == "int8" => (Some(p), "-int8"),
        Some(p) if p == "f32" => (Some(p), ""),
        Some(other) => panic!("EMBEDDING_PRECISION={other}: f32 or int8"),
        None => (None, ""),
    }
}

/// The variables of the OpenAI-compatible embedder, which every server gets from the
/// benchmark's environment when it sets `EMBEDDING_PROVIDER=openai`: the quality sets asked
/// through a remote model (`crate::sets::remote`).
const REMOTE: [&str; 9] = [
    "EMBEDDING_PROVIDER",
    "EMBEDDING_BASE_URL",
    "EMBEDDING_API_KEY",
    "EMBEDDING_MODEL",
    "EMBEDDING_DIM",
    "EMBEDDING_MAX_TOKENS",
    "EMBEDDING_MAX_REQUESTS",
    "EMBEDDING_QUERY_PROMPT",
    "EMBEDDING_DOCUMENT_PROMPT",
];

/// Stopped when dropped, so a run that starts many servers holds one model at a time.
pub struct Server {
    url: String,
    client: reqwest::Client,
    serving: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

impl Server {
    /// Over the given store, with the model in `model` at its own thresholds (as `make run`
    /// has them); `extra` adds or replaces variables.
    pub async fn start(database_url: &str, model: &Path, extra: &[(&str, &str)]) -> Server {
        let mut env: HashMap<&str, String> = [
            ("DATABASE_URL", database_url.to_owned()),
            ("EMBEDDING_PROVIDER", "local".into()),
            ("EMBEDDING_MODEL", model.display().to_string()),
        ]
        .into_iter()
        .collect();
        if crate::sets::remote() {
            env.extend(
                REMOTE
                    .iter()
                    .filter_map(|k| Some((*k, std::env::var(k).ok()?))),
            );
        }
        if let (Some(precision), _) = precision() {
            env.insert("EMBEDDING_PRECISION", precision);
        }
        env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
        let config = mcp_memory::config::Config::from_vars(|k| env.get(k).cloned()).unwrap();
        let app = Arc::new(mcp_memory::app::App::build(config).await.unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let serving = tokio::spawn(async move {
            axum::serve(listener, mcp_memory::http::router(app))
                .await
                .unwrap()
        });
        Server {
            url,
            client: reqwest::Client::new(),
            serving,
        }
    }

    pub async fn call(&self, tenant: &str, tool: &str, args: Value) -> String {
        self.answer(tenant, tool, args).await.0
    }

    /// The answer's text and its structured result (the protocol version that has them).
    pub async fn answer(&self, tenant: &str, tool: &str, args: Value) -> (String, Value) {
        let reply: Value = self
            .client
            .post(&self.url)
            .header("x-memory-tenant", tenant)
            .header("mcp-protocol-version", "2025-06-18")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let text = reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(reply["result"]["isError"] != true, "{tool}: {text}");
        (text, reply["result"]["structuredContent"].clone())
    }
}

/// The memory ids a tool answer shows, in order.
pub fn shown_ids(text: &str) -> Vec<String> {
    text.match_indices("[id:")
        .map(|(i, _)| text[i + 4..i + 30].to_owned())
        .collect()
}

/// The memory `remember` stored, or the one an "Already known" answer merged it into.
pub fn stored_id(text: &str) -> String {
    match text.strip_prefix("[MEMORY] Stored as ") {
        Some(rest) => rest[..26].to_owned(),
        None => shown_ids(text).remove(0),
    }
}

/// A copy of the SQLite store at `from`, so each run asks on the same memories with no
/// uses recorded by another run (uses feed the ranking).
pub fn copy_store(from: &Path, to: &Path) {
    rusqlite::Connection::open(from)
        .unwrap()
        .execute("VACUUM INTO ?1", [to.display().to_string()])
        .unwrap();
}
