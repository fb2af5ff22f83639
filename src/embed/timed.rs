//! The embedder, timed: it wraps the configured embedder, passes every call through
//! unchanged, and reports how long each took (successful or not) to the metrics, and to a
//! tool call's trace as a span.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::{EmbedError, Embedder};
use crate::metrics::Metrics;

pub struct TimedEmbedder {
    pub inner: Arc<dyn Embedder>,
    pub metrics: Arc<Metrics>,
}

impl TimedEmbedder {
    async fn timed<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        let _span = crate::traces::child("embed");
        let started = Instant::now();
        let result = call.await;
        self.metrics.embedding(started.elapsed());
        result
    }
}

#[async_trait]
impl Embedder for TimedEmbedder {
    async fn embed(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.timed(self.inner.embed(text)).await
    }

    async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        self.timed(self.inner.embed_query(text)).await
    }

    fn model(&self) -> crate::memory::Model {
        self.inner.model()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn at_once(&self) -> Option<usize> {
        self.inner.at_once()
    }

    fn health(&self) -> Result<(), String> {
        self.inner.health()
    }
}
