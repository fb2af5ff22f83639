//! Any OpenAI-compatible `/embeddings` endpoint (docs/embeddings.md#openai-compatible): one POST per text, no
//! `dimensions` parameter, at most `EMBEDDING_MAX_REQUESTS` at once, a 10 s timeout for
//! each text, its turn included (3 s to connect), an answer of at most 4 MiB, and no
//! retries of our own.

use std::time::Duration;

use async_trait::async_trait;

use super::{EmbedError, Embedder, check_values, check_vector};

const TIMEOUT_MS: u64 = 10_000;
const CONNECT_TIMEOUT_MS: u64 = 3_000;
/// The largest answer read: 3,072 numbers as JSON take about 70 KB, so this leaves room for
/// any real model and stops an endpoint that streams without end.
const MAX_ANSWER_BYTES: usize = 4 << 20;
/// How much of an error body the agent gets to see.
const BODY_EXCERPT_CHARS: usize = 200;

pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    api_key: String,
    model: String,
    dimension: usize,
    /// A burst of calls opens this many connections to the service, not one each.
    turns: tokio::sync::Semaphore,
}

impl OpenAiEmbedder {
    /// `base_url` is validated by `config` (http(s), no credentials, query or fragment).
    pub fn new(
        base_url: &str,
        api_key: &str,
        model: &str,
        dimension: usize,
        max_requests: usize,
    ) -> Self {
        OpenAiEmbedder {
            client: reqwest::Client::builder()
                .timeout(Duration::from_millis(TIMEOUT_MS))
                .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
                .build()
                .unwrap_or_default(),
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            api_key: api_key.to_owned(),
            model: model.to_owned(),
            dimension,
            turns: tokio::sync::Semaphore::new(max_requests),
        }
    }

    /// One request, in its turn.
    async fn request(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        // The turns are never closed, so acquiring one never fails; it only waits.
        let _turn = self
            .turns
            .acquire()
            .await
            .map_err(|_| EmbedError::Timeout(TIMEOUT_MS))?;

        let response = self
            .client
            .post(&self.url)
            .bearer_auth(&self.api_key)
            .json(&serde_json::json!({ "model": self.model, "input": text }))
            .send()
            .await
            .map_err(transport_error)?;
        let status = response.status();
        let body = read_capped(response).await?;
        if !status.is_success() {
            let excerpt: String = body.chars().take(BODY_EXCERPT_CHARS).collect();
            return Err(EmbedError::Status {
                status: status.as_u16(),
                body: (!excerpt.trim().is_empty()).then_some(excerpt),
            });
        }
        // The usual answer, read straight into numbers: a tree of `Value`s for every
        // number costs more than the rest of the request. Any other shape takes the checks
        // of `check_vector`, which say what was wrong.
        if let Ok(Answer { data }) = serde_json::from_str::<Answer>(&body)
            && let Some(first) = data.into_iter().next()
        {
            let vector = first.embedding.into_iter().map(|x| x as f32).collect();
            return check_values(vector, &self.model, self.dimension);
        }
        let json: serde_json::Value =
            serde_json::from_str(&body).map_err(|_| EmbedError::InvalidJson)?;
        check_vector(
            json.pointer("/data/0/embedding"),
            &self.model,
            self.dimension,
        )
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let timeout = Duration::from_millis(TIMEOUT_MS);
        match tokio::time::timeout(timeout, self.request(text)).await {
            Ok(embedded) => embedded,
            Err(_) => Err(EmbedError::Timeout(TIMEOUT_MS)),
        }
    }

    fn model(&self) -> crate::memory::Model {
        crate::memory::Model {
            name: format!("openai:{}", self.model),
            dimension: self.dimension,
        }
    }
}

#[derive(serde::Deserialize)]
struct Answer {
    data: Vec<Embedding>,
}

#[derive(serde::Deserialize)]
struct Embedding {
    embedding: Vec<f64>,
}

/// The answer's body as text, refused once it passes `MAX_ANSWER_BYTES`.
async fn read_capped(mut response: reqwest::Response) -> Result<String, EmbedError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(EmbedError::TooLarge(MAX_ANSWER_BYTES));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn transport_error(e: reqwest::Error) -> EmbedError {
    if e.is_timeout() {
        EmbedError::Timeout(TIMEOUT_MS)
    } else {
        // Without the URL: it is configuration, and the message goes back to the agent.
        EmbedError::Unreachable(root_cause(&e.without_url()))
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}
