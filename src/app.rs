//! The composition root: a validated configuration becomes a running set of parts.

use std::sync::Arc;

use crate::auth::Gate;
use crate::config::{Config, Timeouts};
use crate::embed::{self, Embedder, TimedEmbedder};
use crate::library;
use crate::metrics::Metrics;
use crate::store::sweep::Sweeper;
use crate::store::{self, MemoryStore, StoreError, TimedStore};
use crate::tools::{Judgement, ToolService};
use crate::traces::Traces;

/// The Cargo features of this build, as `build_info` reports them.
const FEATURES: &[&str] = &[
    #[cfg(feature = "sqlite")]
    "sqlite",
    #[cfg(feature = "postgres")]
    "postgres",
    #[cfg(feature = "s3")]
    "s3",
    #[cfg(feature = "local")]
    "local",
    #[cfg(feature = "openai")]
    "openai",
    #[cfg(feature = "bedrock")]
    "bedrock",
    #[cfg(feature = "kb")]
    "kb",
];

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    #[error("embedding model error: {0}")]
    Embedder(String),
    #[error("storage error: {0}")]
    Store(StoreError),
    #[error("traces: {0}")]
    Traces(String),
}

/// Everything a request needs, shared by all requests.
pub struct App {
    pub tools: ToolService,
    pub metrics: Arc<Metrics>,
    /// Who may call over HTTP, and for which tenants.
    pub gate: Arc<Gate>,
    pub allowed_origins: Vec<String>,
    /// Whether the server listens on loopback only: the memory browser is open without a
    /// credential only then (`http::ui`).
    pub loopback_only: bool,
    pub body_limit: usize,
    pub timeouts: Timeouts,
    /// HTTP connections served at once, and waiting for a request (`http::serve`).
    pub max_connections: usize,
    pub max_idle_connections: usize,
    /// Deletes expired memories; stopped at shutdown.
    pub sweeper: Sweeper,
    /// Sends tool calls' spans, when traces are on; flushed at shutdown.
    pub traces: Traces,
}

/// The embedder and the store the configuration names, as the server and the commands
/// (`mcp-memory export`, `import`) open them: the embedder first, since its model is what
/// the store checks its vectors against; a store whose index fixes the width has the
/// embedder explain a mismatch.
pub async fn open_store(
    config: &Config,
) -> Result<(Arc<dyn Embedder>, Arc<dyn MemoryStore>), BootError> {
    let embedder = embed::build(&config.embedder).map_err(BootError::Embedder)?;
    let store = store::open(&config.store, &embedder.model())
        .await
        .map_err(BootError::Store)?;
    let embedder = match store.width_fixed_by_index() {
        true => embed::explained_by_index(embedder),
        false => embedder,
    };
    Ok((embedder, store))
}

impl App {
    /// Opens the store (creating its schema) and builds the embedder, before any port is
    /// bound, so a deployment that cannot work never starts answering.
    pub async fn build(config: Config) -> Result<App, BootError> {
        let traces = Traces::start(&config.traces).map_err(BootError::Traces)?;
        let (embedder, store) = open_store(&config).await?;
        let metrics = Arc::new(Metrics::new(config.metrics_tenant_label, FEATURES));
        let store: Arc<dyn store::MemoryStore> = Arc::new(TimedStore {
            inner: store,
            metrics: Arc::clone(&metrics),
        });
        let sweeper = Sweeper::start(
            Arc::clone(&store),
            Arc::clone(&metrics),
            config.expiry_sweep,
        );
        Ok(App {
            tools: ToolService::new(
                store,
                Arc::new(TimedEmbedder {
                    inner: embedder,
                    metrics: Arc::clone(&metrics),
                }),
                config.knowledge_base.as_ref().and_then(library::open),
                Judgement {
                    numbers: config.numbers,
                    keyword_weight: config.keyword_weight,
                },
                config.timeouts.request,
                Arc::clone(&metrics),
                config.state_key,
            ),
            metrics,
            gate: Arc::new(config.gate),
            allowed_origins: config.allowed_origins,
            loopback_only: config.host.is_loopback(),
            body_limit: config.body_limit,
            timeouts: config.timeouts,
            max_connections: config.max_connections,
            max_idle_connections: config.max_idle_connections,
            sweeper,
            traces,
        })
    }

    /// The startup lines describing where memories live, how they are embedded, and
    /// whether the model's numbers were measured for it: the store is asked for its fit
    /// here, and when it does not answer, at the first call that needs it.
    pub async fn describe(&self) -> String {
        let model = self.tools.embedder.model().name;
        let calibration = match self.tools.judged().await {
            Ok(judged) => judged.calibrated.describe(&model),
            Err(e) => format!(
                "not read yet, as the store did not answer ({e}); the first call that needs it \
                 reads it"
            ),
        };
        format!(
            "store: {} ({})\ncalibration: {calibration}",
            self.tools.store.describe(),
            self.tools.embedder.describe(),
        )
    }
}
