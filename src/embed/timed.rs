//! The embedder, timed: it wraps the configured embedder, passes every call through
//! unchanged, and reports how long each took (successful or not) to the metrics.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::{EmbedError, Embedder};
use crate::metrics::Metrics;

pub struct TimedEmbedder {
    pub inner: Arc<dyn Embedder>,
    pub metrics: Arc<Metrics>,
}

#[async_trait]
impl Embedder for TimedEmbedder {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let started = Instant::now();
        let result = self.inner.embed(text).await;
        self.metrics.embedding(started.elapsed());
        result
    }

    fn model(&self) -> crate::memory::Model {
        self.inner.model()
    }

    fn health(&self) -> Result<(), String> {
        self.inner.health()
    }
}
