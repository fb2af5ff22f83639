//! `mcp-memory reembed` on S3 (`store/reembed.rs`): an index's width is fixed, so the new
//! vectors go to another index of the same vector bucket, created if missing. Each memory is
//! copied with its metadata as it is; the recency index and the counters are the state
//! bucket's, shared by both indexes, so they need no copy, and a memory forgotten through
//! either index loses its index key and is not copied again. The servers keep the old index
//! until they are configured with the new one: a memory they write meanwhile is copied by
//! running the same command again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures_util::{StreamExt, TryStreamExt};
use serde_json::Value;

use super::index::{self, Entry};
use super::objects::Objects;
use super::vectors::{self, Vectors};
use super::{S3Settings, clients, lock, model_key, record_model, recorded_model, state_failed};
use crate::memory::{self, Model};
use crate::store::StoreError;
use crate::store::reembed::{Pending, Plan, Reembedding, Switched, Unembedded};

/// Vectors written at once.
const PUTS: usize = 8;

pub struct Reembedder {
    objects: Arc<dyn Objects>,
    from: Vectors,
    to: Vectors,
    /// Where the model of each index is recorded.
    from_model: String,
    to_model: String,
    to_index: String,
    /// The metadata of the memories the last `pending` named, to copy with their vectors.
    named: Mutex<HashMap<String, Value>>,
}

impl Reembedder {
    pub async fn open(settings: &S3Settings, to_index: &str) -> Result<Reembedder, StoreError> {
        if to_index == settings.vector_index {
            return Err(StoreError::Refused {
                field: "--to-index",
                limit: 0,
                message: format!(
                    "--to-index names the index the servers use ({to_index}): the new vectors \
                     need an index of their own"
                ),
            });
        }
        let (objects, client) = clients(settings).await;
        let bucket = &settings.vector_bucket;
        Ok(Reembedder {
            objects,
            from: Vectors::new(client.clone(), bucket, &settings.vector_index),
            to: Vectors::new(client, bucket, to_index),
            from_model: model_key(bucket, &settings.vector_index),
            to_model: model_key(bucket, to_index),
            to_index: to_index.to_owned(),
            named: Mutex::default(),
        })
    }
}

#[async_trait]
impl Reembedding for Reembedder {
    /// Creates the new index if missing; one that exists must be made as the servers need
    /// it (`vectors::Layout::check`) and hold no other model's vectors.
    async fn begin(&self, to: &Model) -> Result<Plan, StoreError> {
        let location = self.to.location();
        match self.to.layout().await? {
            None => self.to.create(to.dimension).await?,
            Some(layout) => layout.check(&location, to.dimension)?,
        }
        let theirs = recorded_model(&*self.objects, &self.to_model).await?;
        StoreError::unless_same_model(&location, theirs, to)?;
        Ok(Plan {
            recorded: recorded_model(&*self.objects, &self.from_model).await?,
            total: None,
            staged: 0,
        })
    }

    /// The next index keys across tenants; of their memories, the ones the new index does
    /// not hold yet (an expired one is left to the sweep).
    async fn pending(&self, from: Option<&str>, limit: usize) -> Result<Pending, StoreError> {
        let keys = (self.objects)
            .list(index::ALL, from, limit)
            .await
            .map_err(state_failed)?;
        let at = memory::now_ms();
        let vector_keys: Vec<String> = (keys.iter().filter_map(|k| Entry::parse(k)))
            .filter(|e| !memory::expired(e.expires_at, at))
            .map(|e| vectors::key(&memory::Tenant::new_unchecked(e.tenant), &e.id))
            .collect();
        let copied = self.to.get(&vector_keys).await?;
        let missing: Vec<String> = (vector_keys.into_iter())
            .filter(|k| !copied.contains_key(k))
            .collect();
        let mut found = self.from.get(&missing).await?;
        let mut memories = Vec::with_capacity(found.len());
        let mut named = lock(&self.named);
        named.clear();
        for key in missing {
            let Some(metadata) = found.remove(&key) else {
                continue;
            };
            let content = metadata.get("content").and_then(Value::as_str);
            if let Some(content) = content {
                memories.push(Unembedded {
                    key: key.clone(),
                    content: content.to_owned(),
                });
            }
            named.insert(key, metadata);
        }
        let next = (keys.len() == limit)
            .then(|| keys.last().cloned())
            .flatten();
        Ok(Pending { memories, next })
    }

    async fn stage(&self, staged: &[(String, Vec<f32>)]) -> Result<(), StoreError> {
        let copies: Vec<(String, Vec<f32>, Value)> = {
            let named = lock(&self.named);
            (staged.iter())
                .filter_map(|(key, v)| Some((key.clone(), v.clone(), named.get(key)?.clone())))
                .collect()
        };
        let to = &self.to;
        futures_util::stream::iter(copies)
            .map(|(key, vector, metadata)| async move { to.put(&key, &vector, &metadata).await })
            .buffer_unordered(PUTS)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Records the model of the new index; the servers move to it by configuration.
    async fn switch(&self, to: &Model) -> Result<Switched, StoreError> {
        let recorded = record_model(&*self.objects, &self.to_model, to).await?;
        let location = self.to.location();
        StoreError::unless_same_model(&location, recorded, to)?;
        Ok(Switched::Done)
    }

    fn describe(&self) -> String {
        self.to.location()
    }

    fn afterwards(&self) -> Option<String> {
        Some(format!(
            "VECTOR_INDEX={} (with the new embedder's variables) on every server; memories \
             written through the old index before then are copied by running this command \
             again",
            self.to_index
        ))
    }
}
