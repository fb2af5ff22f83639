//! Any OpenAI-compatible `/embeddings` endpoint (docs/embeddings.md#openai-compatible): one POST per text, no
//! `dimensions` parameter, at most `EMBEDDING_MAX_REQUESTS` at once, a 10 s timeout for
//! each text, its turns and retries included (3 s to connect), an answer of at most 4 MiB;
//! a 429 or 503 is tried again after the wait the service asks for (`Retry-After`) or a
//! short backoff, while the 10 s allow.

use std::time::Duration;

use async_trait::async_trait;

use super::{EmbedError, Embedder, Prompts, check_values, check_vector};

const TIMEOUT_MS: u64 = 10_000;
const CONNECT_TIMEOUT_MS: u64 = 3_000;
/// The largest answer read: 3,072 numbers as JSON take about 70 KB, so this leaves room for
/// any real model and stops an endpoint that streams without end.
const MAX_ANSWER_BYTES: usize = 4 << 20;
/// How much of an error body the agent gets to see.
const BODY_EXCERPT_CHARS: usize = 200;
/// Tries of one text, the first included, when the service answers 429 or 503.
const ATTEMPTS: u32 = 3;
/// The wait before a second try when the service asks for none; doubled before a third.
const BACKOFF: Duration = Duration::from_millis(250);

/// A request that failed, and how long the service asked to be left before another.
struct Failed {
    error: EmbedError,
    retry_after: Option<Duration>,
}

impl From<EmbedError> for Failed {
    fn from(error: EmbedError) -> Failed {
        Failed {
            error,
            retry_after: None,
        }
    }
}

pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    api_key: String,
    model: String,
    dimension: usize,
    /// What its model sees before each text (docs/embeddings.md#prompts).
    prompts: Prompts,
    /// A burst of calls opens this many connections to the service, not one each.
    turns: tokio::sync::Semaphore,
    max_requests: usize,
}

impl OpenAiEmbedder {
    /// `base_url` is validated by `config` (http(s), no credentials, query or fragment).
    pub fn new(
        base_url: &str,
        api_key: &str,
        model: &str,
        dimension: usize,
        max_requests: usize,
        prompts: Prompts,
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
            prompts,
            turns: tokio::sync::Semaphore::new(max_requests),
            max_requests,
        }
    }

    /// The vector of `text` after `prompt`, within one timeout.
    async fn prompted(&self, prompt: &str, text: &str) -> Result<Vec<f32>, EmbedError> {
        let text = format!("{prompt}{text}");
        let deadline = tokio::time::Instant::now() + Duration::from_millis(TIMEOUT_MS);
        match tokio::time::timeout_at(deadline, self.tries(&text, deadline)).await {
            Ok(embedded) => embedded,
            Err(_) => Err(EmbedError::Timeout(TIMEOUT_MS)),
        }
    }

    /// The text's vector, tried again after a 429 or 503 while `deadline` allows the wait.
    async fn tries(
        &self,
        text: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<f32>, EmbedError> {
        let mut backoff = BACKOFF;
        let mut attempt = 1;
        loop {
            let failed = match self.request(text).await {
                Ok(vector) => return Ok(vector),
                Err(failed) => failed,
            };
            let passing = matches!(
                failed.error,
                EmbedError::Status {
                    status: 429 | 503,
                    ..
                }
            );
            let wait = failed.retry_after.unwrap_or(backoff);
            if !passing || attempt >= ATTEMPTS || tokio::time::Instant::now() + wait >= deadline {
                return Err(failed.error);
            }
            tokio::time::sleep(wait).await;
            backoff *= 2;
            attempt += 1;
        }
    }

    /// One request, in its turn.
    async fn request(&self, text: &str) -> Result<Vec<f32>, Failed> {
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
        let retry_after = retry_after(&response);
        let body = read_capped(response).await?;
        if !status.is_success() {
            let excerpt: String = body.chars().take(BODY_EXCERPT_CHARS).collect();
            return Err(Failed {
                error: EmbedError::Status {
                    status: status.as_u16(),
                    body: (!excerpt.trim().is_empty()).then_some(excerpt),
                },
                retry_after,
            });
        }
        // The usual answer, read straight into numbers: a tree of `Value`s for every
        // number costs more than the rest of the request. Any other shape takes the checks
        // of `check_vector`, which say what was wrong.
        if let Ok(Answer { data }) = serde_json::from_str::<Answer>(&body)
            && let Some(first) = data.into_iter().next()
        {
            let vector = first.embedding.into_iter().map(|x| x as f32).collect();
            return Ok(check_values(vector, &self.model, self.dimension)?);
        }
        let json: serde_json::Value =
            serde_json::from_str(&body).map_err(|_| EmbedError::InvalidJson)?;
        Ok(check_vector(
            json.pointer("/data/0/embedding"),
            &self.model,
            self.dimension,
        )?)
    }
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.prompted(&self.prompts.document, text).await
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.prompted(&self.prompts.query, text).await
    }

    fn at_once(&self) -> Option<usize> {
        Some(self.max_requests)
    }

    /// The prompts are part of the name: they change every vector as much as another model
    /// would, so a store of vectors made with others refuses this embedder, and a fit made
    /// with others is not its (docs/embeddings.md#prompts).
    fn model(&self) -> crate::memory::Model {
        let prompts = match &self.prompts {
            p if p.is_empty() => String::new(),
            Prompts { query, document } => {
                format!(" with prompts query {query:?} and document {document:?}")
            }
        };
        crate::memory::Model {
            name: format!("openai:{}{prompts}", self.model),
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

/// The wait a `Retry-After` of seconds asks for (a date is not read: the backoff stands in).
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let seconds: f64 = (response.headers().get(reqwest::header::RETRY_AFTER)?)
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (seconds.is_finite() && seconds >= 0.0)
        .then(|| Duration::from_secs_f64(seconds.min(TIMEOUT_MS as f64 / 1000.0)))
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
