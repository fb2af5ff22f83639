//! The four object operations the state bucket needs (docs/stores.md#s3), behind a small
//! trait so that the counters' compare-and-swap paths can be driven by a stub as well as
//! by S3.

use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};

use crate::aws;

/// DeleteObjects takes at most this many keys per call.
const DELETE_BATCH: usize = 1_000;
/// ListObjectsV2 returns at most this many keys per page.
const LIST_PAGE: usize = 1_000;

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ObjectError {
    /// A conditional write lost: the object changed (412), a concurrent write conflicted
    /// (409), or the object it was to replace is gone (404 on If-Match). In every case
    /// another writer got there first.
    #[error("precondition failed")]
    Precondition,
    /// The call failed; `cause` is the service's answer or the transport's error.
    #[error("S3 {operation} failed — {cause}")]
    Failed { operation: String, cause: String },
}

/// When a put may happen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Condition<'a> {
    Always,
    /// Only over the version with this ETag.
    IfMatch(&'a str),
    /// Only if there is no object yet.
    IfAbsent,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub body: Vec<u8>,
    pub etag: String,
}

#[async_trait]
pub trait Objects: Send + Sync {
    /// `None` when there is no such object (or S3 gave it no ETag).
    async fn get(&self, key: &str) -> Result<Option<Object>, ObjectError>;

    /// Always written as `application/json`.
    async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        condition: Condition<'_>,
    ) -> Result<(), ObjectError>;

    /// Up to `limit` keys under `prefix` after `start_after`, in ascending byte order.
    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ObjectError>;

    async fn delete(&self, keys: &[String]) -> Result<(), ObjectError>;
}

/// The state bucket itself.
pub struct S3Objects {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Objects {
    pub fn new(client: aws_sdk_s3::Client, bucket: &str) -> Self {
        S3Objects {
            client,
            bucket: bucket.to_owned(),
        }
    }
}

#[async_trait]
impl Objects for S3Objects {
    async fn get(&self, key: &str) -> Result<Option<Object>, ObjectError> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if aws::status(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(failed("GetObject", &aws::describe(&e))),
        };
        let Some(etag) = out.e_tag().map(str::to_owned) else {
            return Ok(None);
        };
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| failed("GetObject", &e.to_string()))?
            .into_bytes()
            .to_vec();
        Ok(Some(Object { body, etag }))
    }

    async fn put(
        &self,
        key: &str,
        body: Vec<u8>,
        condition: Condition<'_>,
    ) -> Result<(), ObjectError> {
        let mut put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .body(ByteStream::from(body));
        put = match condition {
            Condition::Always => put,
            Condition::IfMatch(etag) => put.if_match(etag),
            Condition::IfAbsent => put.if_none_match("*"),
        };
        match put.send().await {
            Ok(_) => Ok(()),
            Err(e) => match (aws::status(&e), condition) {
                (Some(412 | 409), _) | (Some(404), Condition::IfMatch(_)) => {
                    Err(ObjectError::Precondition)
                }
                _ => Err(failed("PutObject", &aws::describe(&e))),
            },
        }
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, ObjectError> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        while keys.len() < limit {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .max_keys(LIST_PAGE.min(limit - keys.len()) as i32)
                .set_start_after(start_after.map(str::to_owned))
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| failed("ListObjectsV2", &aws::describe(&e)))?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
            // A truncated page without a token would loop forever: stop instead.
            match page.next_continuation_token() {
                Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_owned()),
                _ => break,
            }
        }
        keys.truncate(limit);
        Ok(keys)
    }

    async fn delete(&self, keys: &[String]) -> Result<(), ObjectError> {
        for batch in keys.chunks(DELETE_BATCH) {
            let objects = batch
                .iter()
                .map(|k| ObjectIdentifier::builder().key(k).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| failed("DeleteObjects", &e.to_string()))?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| failed("DeleteObjects", &e.to_string()))?;
            let out = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| failed("DeleteObjects", &aws::describe(&e)))?;
            if let Some(first) = out.errors().first() {
                return Err(failed(
                    "DeleteObjects",
                    &format!(
                        "could not remove {} of {} keys: {} — {}",
                        out.errors().len(),
                        batch.len(),
                        first.key().unwrap_or("?"),
                        first.code().unwrap_or("unknown error"),
                    ),
                ));
            }
        }
        Ok(())
    }
}

pub(super) fn failed(operation: &str, cause: &str) -> ObjectError {
    ObjectError::Failed {
        operation: operation.to_owned(),
        cause: cause.to_owned(),
    }
}
