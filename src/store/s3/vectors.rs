//! The memories themselves, in an S3 Vectors index (docs/stores.md#s3): one vector per
//! memory under `<tenant>#<id>`, with the body in its metadata so that recall is a single
//! QueryVectors call. The index is created outside the server with `content`, `createdAt`,
//! `tags` and `trustBase` non-filterable.

use std::collections::HashMap;

use aws_sdk_s3vectors::types::{DistanceMetric, IndexMode, PutInputVector, VectorData};
use aws_smithy_types::{Document, Number};
use serde_json::{Map, Value, json};

use super::super::StoreError;
use crate::aws;
use crate::memory::{Conversation, Memory, MemoryType, Scope, Tenant, iso};

/// QueryVectors answers at most this many per call.
const TOP_K_MAX: usize = 100;
const GET_BATCH: usize = 100;
const DELETE_BATCH: usize = 500;
/// Budgets of the metadata's JSON text; "KB" taken as 1,000 to keep a margin (docs/stores.md#s3).
const FILTERABLE_BYTES: usize = 2_000;
const METADATA_BYTES: usize = 40_000;
const CONTENT_BYTES: usize = 32_000;
/// Epoch milliseconds from which the memory is gone: filterable.
const EXPIRES_AT: &str = "expiresAt";

pub struct Vectors {
    client: aws_sdk_s3vectors::Client,
    bucket: String,
    index: String,
}

impl Vectors {
    pub fn new(client: aws_sdk_s3vectors::Client, bucket: &str, index: &str) -> Self {
        Vectors {
            client,
            bucket: bucket.to_owned(),
            index: index.to_owned(),
        }
    }

    pub async fn put(
        &self,
        key: &str,
        embedding: &[f32],
        metadata: &Value,
    ) -> Result<(), StoreError> {
        let vector = PutInputVector::builder()
            .key(key)
            .data(VectorData::Float32(embedding.to_vec()))
            .metadata(to_document(metadata))
            .build()
            .map_err(|e| failed("PutVectors", &e.to_string()))?;
        self.client
            .put_vectors()
            .vector_bucket_name(&self.bucket)
            .index_name(&self.index)
            .vectors(vector)
            .send()
            .await
            .map_err(|e| failed("PutVectors", &aws::describe(&e)))?;
        Ok(())
    }

    /// The tenant's nearest records still there at `at` (ms) as `(key, similarity,
    /// metadata)`. Tenant and expiry are the only filters sent: expired memories must not
    /// take the places of live ones, and the conversation is applied by the caller.
    pub async fn query(
        &self,
        tenant: &Tenant,
        embedding: &[f32],
        k: usize,
        at: i64,
    ) -> Result<Vec<(String, f64, Value)>, StoreError> {
        let filter = to_document(&json!({"$and": [
            {"tenantId": tenant.as_str()},
            {"$or": [{EXPIRES_AT: {"$exists": false}}, {EXPIRES_AT: {"$gt": at}}]},
        ]}));
        let mut found = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self
                .client
                .query_vectors()
                .vector_bucket_name(&self.bucket)
                .index_name(&self.index)
                .top_k(k.clamp(1, TOP_K_MAX) as i32)
                .query_vector(VectorData::Float32(embedding.to_vec()))
                .filter(filter.clone())
                // Filtered before the search whatever the index's own mode: on a CLASSIC
                // index the filter is applied during it, and a tenant among many finds
                // fewer than k, or nothing (docs/stores.md#index-modes).
                .query_mode(IndexMode::Enhanced)
                .return_metadata(true)
                .return_distance(true)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| failed("QueryVectors", &aws::describe(&e)))?;
            for v in out.vectors() {
                // A missing distance reads as orthogonal: similarity 0.
                let similarity = 1.0 - f64::from(v.distance().unwrap_or(1.0));
                let metadata = v.metadata().map(from_document).unwrap_or(Value::Null);
                found.push((v.key().to_owned(), similarity, metadata));
            }
            match out.next_token() {
                Some(next) if found.len() < k => token = Some(next.to_owned()),
                _ => break,
            }
        }
        found.truncate(k);
        Ok(found)
    }

    /// The records under `keys` that exist, as `key → metadata`.
    pub async fn get(&self, keys: &[String]) -> Result<HashMap<String, Value>, StoreError> {
        let found = self.get_records(keys, false).await?;
        Ok(found.into_iter().map(|(k, (m, _))| (k, m)).collect())
    }

    /// The records under `keys` that exist with their vectors, as `key → (metadata, vector)`.
    pub async fn get_whole(
        &self,
        keys: &[String],
    ) -> Result<HashMap<String, (Value, Vec<f32>)>, StoreError> {
        let found = self.get_records(keys, true).await?;
        Ok(found
            .into_iter()
            .map(|(k, (m, v))| (k, (m, v.unwrap_or_default())))
            .collect())
    }

    async fn get_records(
        &self,
        keys: &[String],
        with_data: bool,
    ) -> Result<HashMap<String, (Value, Option<Vec<f32>>)>, StoreError> {
        let mut found = HashMap::new();
        for batch in keys.chunks(GET_BATCH) {
            let out = self
                .client
                .get_vectors()
                .vector_bucket_name(&self.bucket)
                .index_name(&self.index)
                .set_keys(Some(batch.to_vec()))
                .return_metadata(true)
                .return_data(with_data)
                .send()
                .await
                .map_err(|e| failed("GetVectors", &aws::describe(&e)))?;
            for v in out.vectors() {
                let metadata = v.metadata().map(from_document).unwrap_or(Value::Null);
                let data = match v.data() {
                    Some(VectorData::Float32(values)) => Some(values.clone()),
                    _ => None,
                };
                found.insert(v.key().to_owned(), (metadata, data));
            }
        }
        Ok(found)
    }

    pub async fn delete(&self, keys: &[String]) -> Result<(), StoreError> {
        for batch in keys.chunks(DELETE_BATCH) {
            self.client
                .delete_vectors()
                .vector_bucket_name(&self.bucket)
                .index_name(&self.index)
                .set_keys(Some(batch.to_vec()))
                .send()
                .await
                .map_err(|e| failed("DeleteVectors", &aws::describe(&e)))?;
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        format!("{}/{}", self.bucket, self.index)
    }

    /// Where the index is, as errors name it.
    pub fn location(&self) -> String {
        format!("S3 Vectors {}", self.describe())
    }

    /// What the index was made with; None when there is no such index.
    pub async fn layout(&self) -> Result<Option<Layout>, StoreError> {
        let found = self
            .client
            .get_index()
            .vector_bucket_name(&self.bucket)
            .index_name(&self.index)
            .send()
            .await;
        let index = match found {
            Ok(out) => out.index,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_not_found_exception()) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(failed("GetIndex", &aws::describe(&e))),
        };
        Ok(index.map(|index| Layout {
            dimension: index.dimension().max(0) as usize,
            metric: index.distance_metric().clone(),
            non_filterable: index
                .metadata_configuration()
                .map(|c| c.non_filterable_metadata_keys().to_vec())
                .unwrap_or_default(),
            mode: index.index_mode().cloned(),
        }))
    }

    /// The index, which must exist and be made as `Layout::check` says.
    pub async fn check(&self, width: usize) -> Result<Layout, StoreError> {
        let location = self.location();
        let Some(layout) = self.layout().await? else {
            return Err(StoreError::SetUp {
                location,
                problem: "does not exist".into(),
                fix: "create it as docs/guide.md#aws-s3-vectors-s3-and-bedrock-on-eks says".into(),
            });
        };
        layout.check(&location, width)?;
        Ok(layout)
    }

    /// Creates the index as docs/guide.md#aws-s3-vectors-s3-and-bedrock-on-eks says to:
    /// float32, cosine, `NON_FILTERABLE` kept out of filters, ENHANCED.
    pub async fn create(&self, dimension: usize) -> Result<(), StoreError> {
        use aws_sdk_s3vectors::types::{DataType, MetadataConfiguration};
        let mut config = MetadataConfiguration::builder();
        for key in NON_FILTERABLE {
            config = config.non_filterable_metadata_keys(key);
        }
        let config = config
            .build()
            .map_err(|e| failed("CreateIndex", &e.to_string()))?;
        self.client
            .create_index()
            .vector_bucket_name(&self.bucket)
            .index_name(&self.index)
            .data_type(DataType::Float32)
            .dimension(i32::try_from(dimension).unwrap_or(i32::MAX))
            .distance_metric(DistanceMetric::Cosine)
            .metadata_configuration(config)
            .send()
            .await
            .map_err(|e| failed("CreateIndex", &aws::describe(&e)))?;
        // CreateIndex takes the bucket's default mode, CLASSIC in older buckets.
        self.client
            .update_index_mode()
            .vector_bucket_name(&self.bucket)
            .index_name(&self.index)
            .index_mode(IndexMode::Enhanced)
            .send()
            .await
            .map_err(|e| failed("UpdateIndexMode", &aws::describe(&e)))?;
        Ok(())
    }
}

/// What GetIndex says of an index, as far as the server depends on it.
#[derive(Debug)]
pub struct Layout {
    pub dimension: usize,
    metric: DistanceMetric,
    non_filterable: Vec<String>,
    /// None from a service that predates index modes: CLASSIC.
    pub mode: Option<IndexMode>,
}

impl Layout {
    /// The index must be `width` wide, measure cosine distance (similarities are read as
    /// `1 - distance`) and keep `NON_FILTERABLE` out of filters (the budgets of
    /// `check_budget` count on it). None of these can be changed on an existing index.
    pub fn check(&self, location: &str, width: usize) -> Result<(), StoreError> {
        if self.dimension != width {
            return Err(StoreError::Dimension {
                location: location.to_owned(),
                stored: self.dimension,
                configured: width,
            });
        }
        let missing: Vec<&str> = NON_FILTERABLE
            .into_iter()
            .filter(|key| !self.non_filterable.iter().any(|k| k == key))
            .collect();
        let problem = if self.metric != DistanceMetric::Cosine {
            format!(
                "measures {} distance, and this server reads cosine distances",
                self.metric.as_str()
            )
        } else if !missing.is_empty() {
            format!(
                "lets {} be filtered: large memories would overflow its 2 KB filterable \
                 metadata",
                missing.join(", ")
            )
        } else {
            return Ok(());
        };
        Err(StoreError::SetUp {
            location: location.to_owned(),
            problem,
            fix: format!(
                "an index's metric and keys cannot change: create another as \
                 docs/guide.md#aws-s3-vectors-s3-and-bedrock-on-eks says (or let `mcp-memory \
                 reembed --to-index NAME` create it), move the memories into it with that \
                 command, then set VECTOR_INDEX=NAME ({} must be non-filterable)",
                NON_FILTERABLE.join(", ")
            ),
        })
    }
}

fn failed(operation: &str, cause: &str) -> StoreError {
    StoreError::unavailable(format!("S3 Vectors {operation} failed"), cause.to_owned())
}

/// The vector key: built from the caller's own tenant, so an id from another project can
/// never address its memory.
pub fn key(tenant: &Tenant, id: &str) -> String {
    format!("{}#{id}", tenant.as_str())
}

/// The record's metadata. Keys with nothing to say are left out rather than empty: S3
/// Vectors refuses a whole write over an empty array.
pub fn metadata(tenant: &Tenant, memory: &Memory) -> Value {
    let mut m = Map::new();
    m.insert("tenantId".into(), json!(tenant.as_str()));
    m.insert("memoryType".into(), json!(memory.memory_type.as_str()));
    if let Some(category) = &memory.category {
        m.insert("category".into(), json!(category));
    }
    if memory.scope == Scope::Conversation {
        m.insert("scope".into(), json!("conversation"));
    }
    if let Some(conversation) = &memory.conversation {
        m.insert("conversation".into(), json!(conversation.as_str()));
    }
    m.insert("content".into(), json!(memory.content));
    m.insert("createdAt".into(), json!(iso(memory.created_at)));
    if !memory.tags.is_empty() {
        m.insert("tags".into(), json!(memory.tags));
    }
    // An integer, as the original wrote it: `1`, not `1.0`.
    if memory.trust_base == 1.0 {
        m.insert("trustBase".into(), json!(1));
    } else {
        m.insert("trustBase".into(), json!(memory.trust_base));
    }
    if let Some(replaced) = &memory.replaces {
        m.insert("replaces".into(), json!(replaced));
    }
    // Filterable, as an index created before it was written keeps any new key: at most
    // `auth::MAX_NAME_BYTES`, within the filterable budget with the longest of the rest.
    if let Some(author) = &memory.author {
        m.insert("author".into(), json!(author));
    }
    // A number, so that queries can filter on it.
    if let Some(at) = memory.expires_at {
        m.insert(EXPIRES_AT.into(), json!(at));
    }
    Value::Object(m)
}

/// The index's size limits, checked before any call (docs/stores.md#s3). The tool layer's
/// own limits leave only JSON escaping to trip these: a body full of quotes or newlines
/// serialises far larger than it reads.
pub fn check_budget(metadata: &Value) -> Result<(), StoreError> {
    let content = metadata["content"].as_str().unwrap_or_default();
    if content.len() > CONTENT_BYTES {
        return Err(StoreError::Refused {
            field: "content",
            limit: CONTENT_BYTES,
            message: format!(
                "`content` is {} bytes; the maximum is {CONTENT_BYTES}. Store the essential \
                 fact rather than the whole document.",
                content.len()
            ),
        });
    }
    let filterable: Map<String, Value> = metadata
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !NON_FILTERABLE.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let filterable_bytes = Value::Object(filterable).to_string().len();
    if filterable_bytes > FILTERABLE_BYTES {
        return Err(StoreError::Refused {
            field: "category",
            limit: FILTERABLE_BYTES,
            message: format!(
                "the filterable metadata (type, scope, category, conversation id, author, \
                 replaces, expiry) is {filterable_bytes} bytes against a {FILTERABLE_BYTES} \
                 byte limit; shorten the category."
            ),
        });
    }
    let total = metadata.to_string().len();
    if total > METADATA_BYTES {
        return Err(StoreError::Refused {
            field: "tags",
            limit: METADATA_BYTES,
            message: format!(
                "the memory and its labels are {total} bytes against a {METADATA_BYTES} byte \
                 limit. Shorten the tags, or store a shorter fact."
            ),
        });
    }
    Ok(())
}

/// The keys the index is created with as non-filterable; the guide's CLI matches.
pub const NON_FILTERABLE: [&str; 4] = ["content", "createdAt", "tags", "trustBase"];

/// A record read back, tolerant of what older deploys wrote; `None` for one that is not a
/// memory of `tenant` (belt and braces: the query was already filtered by tenant).
pub fn read(tenant: &Tenant, key: &str, metadata: &Value) -> Option<Memory> {
    let id = key.split_once('#').map(|(_, id)| id)?;
    let content = metadata.get("content")?.as_str()?;
    if id.is_empty() || metadata.get("tenantId")?.as_str()? != tenant.as_str() {
        return None;
    }
    let text = |k: &str| metadata.get(k).and_then(Value::as_str);
    let created_at = text("createdAt")
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp_millis())
        // A date that does not parse is never shown, and ranks as infinitely old.
        .unwrap_or(0);
    Some(Memory {
        id: id.to_owned(),
        content: content.to_owned(),
        memory_type: text("memoryType")
            .and_then(MemoryType::parse)
            .unwrap_or(MemoryType::Project),
        category: text("category").map(str::to_owned),
        tags: metadata
            .get("tags")
            .and_then(Value::as_array)
            .map(|tags| {
                tags.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        created_at,
        scope: match text("scope") {
            Some("conversation") => Scope::Conversation,
            _ => Scope::Project,
        },
        conversation: text("conversation")
            .filter(|c| !c.is_empty())
            .map(|c| Conversation::new_unchecked(c.to_owned())),
        trust_base: metadata
            .get("trustBase")
            .and_then(Value::as_f64)
            .unwrap_or(1.0),
        access_count: 0,
        last_accessed_at: None,
        replaces: text("replaces").map(str::to_owned),
        author: text("author").map(str::to_owned),
        expires_at: metadata
            .get(EXPIRES_AT)
            .and_then(Value::as_f64)
            .map(|at| at as i64),
    })
}

/// JSON → the SDK's document type (its serde support is behind an unstable flag).
fn to_document(value: &Value) -> Document {
    match value {
        Value::Null => Document::Null,
        Value::Bool(b) => Document::Bool(*b),
        Value::Number(n) => Document::Number(if let Some(u) = n.as_u64() {
            Number::PosInt(u)
        } else if let Some(i) = n.as_i64() {
            Number::NegInt(i)
        } else {
            Number::Float(n.as_f64().unwrap_or_default())
        }),
        Value::String(s) => Document::String(s.clone()),
        Value::Array(items) => Document::Array(items.iter().map(to_document).collect()),
        Value::Object(map) => Document::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), to_document(v)))
                .collect(),
        ),
    }
}

fn from_document(document: &Document) -> Value {
    match document {
        Document::Null => Value::Null,
        Document::Bool(b) => Value::Bool(*b),
        Document::Number(Number::PosInt(u)) => json!(u),
        Document::Number(Number::NegInt(i)) => json!(i),
        Document::Number(Number::Float(f)) => json!(f),
        Document::String(s) => Value::String(s.clone()),
        Document::Array(items) => Value::Array(items.iter().map(from_document).collect()),
        Document::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), from_document(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::NewMemory;

    fn tenant() -> Tenant {
        Tenant::new_unchecked("acme".into())
    }

    fn new_memory() -> NewMemory {
        NewMemory {
            id: "01KB0000000000000000000000".into(),
            content: "use pnpm".into(),
            memory_type: MemoryType::Pattern,
            category: None,
            tags: vec![],
            created_at: 1_780_000_000_000,
            scope: Scope::Project,
            conversation: Some(Conversation::new_unchecked("chat:1".into())),
            replaces: None,
            expires_at: None,
            author: None,
        }
    }

    #[test]
    fn metadata_leaves_out_what_is_empty_and_round_trips() {
        let m = new_memory();
        let meta = metadata(&tenant(), &m.clone().into_memory());
        assert_eq!(
            meta,
            json!({"tenantId": "acme", "memoryType": "pattern", "conversation": "chat:1",
                   "content": "use pnpm", "createdAt": "2026-05-28T20:26:40.000Z", "trustBase": 1})
        );
        assert_eq!(from_document(&to_document(&meta)), meta);
        let back = read(&tenant(), &key(&tenant(), &m.id), &meta).unwrap();
        assert_eq!(back, m.clone().into_memory());

        let mut note = m.clone();
        note.scope = Scope::Conversation;
        note.tags = vec!["a".into()];
        note.category = Some("decision".into());
        let meta = metadata(&tenant(), &note.clone().into_memory());
        assert_eq!(
            (meta["scope"].clone(), meta["tags"].clone()),
            (json!("conversation"), json!(["a"]))
        );
        assert_eq!(
            read(&tenant(), &key(&tenant(), &note.id), &meta).unwrap(),
            note.into_memory()
        );

        let mut expiring = m.clone();
        expiring.expires_at = Some(1_790_000_000_123);
        let meta = metadata(&tenant(), &expiring.clone().into_memory());
        assert_eq!(meta["expiresAt"], json!(1_790_000_000_123_i64));
        // However the service sends the number back, it is the same millisecond.
        let as_float = json!(1_790_000_000_123.0);
        let mut sent_back = meta.clone();
        sent_back["expiresAt"] = from_document(&to_document(&as_float));
        for meta in [meta, sent_back] {
            let back = read(&tenant(), &key(&tenant(), &expiring.id), &meta).unwrap();
            assert_eq!(back.expires_at, expiring.expires_at);
        }
    }

    #[test]
    fn reading_back_is_tolerant_but_never_crosses_tenants() {
        let k = "acme#01KB0000000000000000000000";
        let odd = json!({"tenantId": "acme", "content": "x", "memoryType": "weird",
                         "category": 7, "tags": ["a", 1], "createdAt": "yesterday",
                         "scope": "team", "conversation": "", "trustBase": "high"});
        let m = read(&tenant(), k, &odd).unwrap();
        assert_eq!(
            (
                m.memory_type,
                m.category,
                m.tags,
                m.created_at,
                m.scope,
                m.conversation,
                m.trust_base
            ),
            (
                MemoryType::Project,
                None,
                vec!["a".to_owned()],
                0,
                Scope::Project,
                None,
                1.0
            )
        );
        assert!(read(&tenant(), k, &json!({"tenantId": "other", "content": "x"})).is_none());
        assert!(read(&tenant(), k, &json!({"tenantId": "acme"})).is_none());
        assert!(
            read(
                &tenant(),
                "acme#",
                &json!({"tenantId": "acme", "content": "x"})
            )
            .is_none()
        );
        assert!(
            read(
                &tenant(),
                "no-hash",
                &json!({"tenantId": "acme", "content": "x"})
            )
            .is_none()
        );
        // Numbers come back as whichever variant the service chose.
        let float = from_document(&Document::Number(Number::Float(1.0)));
        assert_eq!(float.as_f64(), Some(1.0));
    }

    #[test]
    fn budgets_are_checked_on_the_escaped_json() {
        let mut m = new_memory();
        m.content = "\"".repeat(25_000); // 25,000 bytes, 50,000 once escaped
        let err = check_budget(&metadata(&tenant(), &m.clone().into_memory()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("the memory and its labels are 50") && err.contains("40000 byte limit"),
            "{err}"
        );
        let mut m = new_memory();
        m.category = Some("\\".repeat(1_000)); // 2,000 bytes once escaped
        let err = check_budget(&metadata(&tenant(), &m.clone().into_memory()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("against a 2000 byte limit") && err.contains("category"),
            "{err}"
        );
        assert!(check_budget(&metadata(&tenant(), &new_memory().into_memory())).is_ok());
        let mut m = new_memory();
        m.content = "x".repeat(32_001);
        assert!(
            check_budget(&metadata(&tenant(), &m.clone().into_memory()))
                .unwrap_err()
                .to_string()
                .contains("essential fact")
        );
    }
}
