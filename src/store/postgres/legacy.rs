//! Migration from the v0.8 layout (docs/stores.md#legacy-migration: migrate, never drop). v0.8 kept each
//! memory as `memories(tenant_id, id, embedding, metadata jsonb)` — the S3 Vectors
//! metadata of docs/stores.md#s3-vectors-records — and its access counters as JSON documents in an
//! `objects(key, body, version)` table shaped like the S3 state bucket (docs/stores.md#lock-free-counters):
//! `stats/<tenant>/merged.json` plus per-pod shards above its watermark. Everything is
//! moved into the native table inside the caller's transaction, under the schema lock.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::{Postgres, Row, Transaction};

use super::StoreError;

/// True when `memories` still has the v0.8 `metadata` column.
async fn present(tx: &mut Transaction<'_, Postgres>) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() \
         AND table_name = 'memories' AND column_name = 'metadata'",
    )
    .fetch_optional(&mut **tx)
    .await?
    .is_some())
}

/// Per memory: how often it was recalled and when last, in ms.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Usage {
    access: i64,
    last_at: Option<i64>,
}

impl Usage {
    fn add(&mut self, other: Usage) {
        let (mine, theirs) = (self.access.max(0) as u64, other.access.max(0) as u64);
        self.access = crate::memory::add_uses(mine, theirs) as i64;
        self.last_at = self.last_at.max(other.last_at);
    }
}

/// A v0.8 layout set aside under other names, out of the native schema's way, with its
/// counters folded per memory.
pub(super) struct SetAside {
    usage: HashMap<(String, String), Usage>,
}

/// When `memories` is v0.8's: reads its counters and renames its table and indexes, freeing
/// the names the native schema is about to take; None for any other database.
pub(super) async fn set_aside(
    tx: &mut Transaction<'_, Postgres>,
) -> Result<Option<SetAside>, StoreError> {
    if !present(tx).await? {
        return Ok(None);
    }
    let usage = counters(tx).await?;
    for statement in [
        "ALTER TABLE memories RENAME TO memories_v08",
        "ALTER INDEX IF EXISTS memories_pkey RENAME TO memories_v08_pkey",
        "ALTER INDEX IF EXISTS memories_recent_idx RENAME TO memories_v08_recent_idx",
        "ALTER INDEX IF EXISTS memories_type_recent_idx RENAME TO memories_v08_type_recent_idx",
    ] {
        sqlx::query(statement).execute(&mut **tx).await?;
    }
    Ok(Some(SetAside { usage }))
}

impl SetAside {
    /// Moves every v0.8 memory, with its folded counters, into the native table (created
    /// since), then drops the old tables. Returns how many memories moved.
    pub(super) async fn carry_over(
        self,
        tx: &mut Transaction<'_, Postgres>,
    ) -> Result<usize, StoreError> {
        let usage = self.usage;
        let rows = sqlx::query(
            "SELECT tenant_id, id, embedding::text AS embedding, metadata::text AS metadata \
             FROM memories_v08",
        )
        .fetch_all(&mut **tx)
        .await?;
        let mut moved = 0;
        for row in rows {
            let tenant: String = row.try_get("tenant_id")?;
            let id: String = row.try_get("id")?;
            let embedding: String = row.try_get("embedding")?;
            let metadata: Value = row
                .try_get::<String, _>("metadata")
                .ok()
                .and_then(|m| serde_json::from_str(&m).ok())
                .unwrap_or(Value::Null);
            let Some(record) = Record::read(&metadata) else {
                // v0.8 could not read it either (no content): nothing to carry over.
                continue;
            };
            let used = usage
                .get(&(tenant.clone(), id.clone()))
                .copied()
                .unwrap_or_default();
            sqlx::query(
                "INSERT INTO memories (tenant_id, id, content, memory_type, category, tags, created_at, \
                 scope, conversation, trust_base, embedding, access_count, last_accessed_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, to_timestamp($7::double precision / 1000), $8, $9, $10, \
                 $11::vector, $12, to_timestamp($13::double precision / 1000))",
            )
            .bind(&tenant)
            .bind(&id)
            .bind(&record.content)
            .bind(&record.memory_type)
            .bind(record.category.as_deref())
            .bind(&record.tags)
            .bind(record.created_at as f64)
            .bind(record.scope)
            .bind(record.conversation.as_deref())
            .bind(record.trust_base)
            .bind(&embedding)
            .bind(used.access)
            .bind(used.last_at.map(|ms| ms as f64))
            .execute(&mut **tx)
            .await?;
            moved += 1;
        }
        for statement in [
            "DROP TABLE memories_v08",
            "DROP TABLE IF EXISTS objects",
            "DROP SEQUENCE IF EXISTS objects_version",
        ] {
            sqlx::query(statement).execute(&mut **tx).await?;
        }
        Ok(moved)
    }
}

/// A v0.8 memory's metadata, read as tolerantly as v0.8 read it (docs/stores.md#s3-vectors-records).
struct Record {
    content: String,
    memory_type: String,
    category: Option<String>,
    tags: Vec<String>,
    created_at: i64,
    scope: &'static str,
    conversation: Option<String>,
    trust_base: f64,
}

impl Record {
    fn read(m: &Value) -> Option<Record> {
        let content = m["content"].as_str()?.to_owned();
        m["tenantId"].as_str()?;
        let memory_type = m["memoryType"]
            .as_str()
            .filter(|t| crate::memory::MemoryType::parse(t).is_some())
            .unwrap_or("project")
            .to_owned();
        let conversation = m["conversation"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        let scope = if m["scope"].as_str() == Some("conversation") {
            "conversation"
        } else {
            "project"
        };
        Some(Record {
            content,
            memory_type,
            category: m["category"]
                .as_str()
                .filter(|c| !c.is_empty())
                .map(str::to_owned),
            tags: m["tags"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            // An unparseable date ranks as infinitely old, as v0.8 showed it.
            created_at: m["createdAt"].as_str().and_then(parse_ms).unwrap_or(0),
            scope,
            // A v0.8 thread note that lost its conversation was visible to nobody; the
            // empty key keeps it that way (no request has an empty conversation).
            conversation: match (scope, conversation) {
                ("conversation", None) => Some(String::new()),
                (_, c) => c,
            },
            trust_base: m["trustBase"].as_f64().unwrap_or(1.0),
        })
    }
}

fn parse_ms(iso: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(iso)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Folds v0.8's counter documents: each tenant's merged counts plus every shard whose file
/// name sorts above the merged watermark (older shards are already inside it).
async fn counters(
    tx: &mut Transaction<'_, Postgres>,
) -> Result<HashMap<(String, String), Usage>, StoreError> {
    let has_objects: bool = sqlx::query_scalar("SELECT to_regclass('objects') IS NOT NULL")
        .fetch_one(&mut **tx)
        .await?;
    if !has_objects {
        return Ok(HashMap::new());
    }
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT key, body FROM objects WHERE starts_with(key, 'stats/')")
            .fetch_all(&mut **tx)
            .await?;
    Ok(fold(&rows))
}

fn fold(objects: &[(String, String)]) -> HashMap<(String, String), Usage> {
    let mut watermarks: HashMap<&str, String> = HashMap::new();
    let mut usage: HashMap<(String, String), Usage> = HashMap::new();
    for (key, body) in objects {
        if let Some(tenant) = key
            .strip_prefix("stats/")
            .and_then(|k| k.strip_suffix("/merged.json"))
        {
            let merged: Value = serde_json::from_str(body).unwrap_or(Value::Null);
            watermarks.insert(
                tenant,
                merged["watermark"].as_str().unwrap_or_default().to_owned(),
            );
            add_deltas(&mut usage, tenant, &merged["counts"]);
        }
    }
    for (key, body) in objects {
        let Some((tenant, name)) = key
            .strip_prefix("stats/")
            .and_then(|k| k.split_once("/shard/"))
        else {
            continue;
        };
        if name <= watermarks.get(tenant).map(String::as_str).unwrap_or("") {
            continue;
        }
        // An unreadable shard is skipped, never guessed at (docs/stores.md#lock-free-counters).
        if let Ok(shard) = serde_json::from_str::<Value>(body) {
            add_deltas(&mut usage, tenant, &shard);
        }
    }
    usage
}

fn add_deltas(usage: &mut HashMap<(String, String), Usage>, tenant: &str, deltas: &Value) {
    let Some(entries) = deltas.as_object() else {
        return;
    };
    for (id, entry) in entries {
        // One bad entry does not poison the rest (docs/stores.md#lock-free-counters).
        let (Some(access), Some(last_at)) = (
            entry["access"].as_f64(),
            entry["lastAt"].as_str().and_then(parse_ms),
        ) else {
            continue;
        };
        usage
            .entry((tenant.to_owned(), id.clone()))
            .or_default()
            .add(Usage {
                access: access.max(0.0) as i64,
                last_at: Some(last_at),
            });
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    fn obj(key: &str, body: &str) -> (String, String) {
        (key.into(), body.into())
    }

    #[test]
    fn counters_fold_merged_plus_shards_above_the_watermark() {
        let objects = [
            obj(
                "stats/acme/merged.json",
                r#"{"counts":{"A":{"access":5,"lastAt":"2026-01-01T00:00:00.000Z"}},"watermark":"01B-pod.json"}"#,
            ),
            obj(
                "stats/acme/shard/01A-pod.json",
                r#"{"A":{"access":100,"lastAt":"2027-01-01T00:00:00.000Z"}}"#,
            ),
            obj(
                "stats/acme/shard/01B-pod.json",
                r#"{"A":{"access":100,"lastAt":"2027-01-01T00:00:00.000Z"}}"#,
            ),
            obj(
                "stats/acme/shard/01C-pod.json",
                r#"{"A":{"access":2,"lastAt":"2026-02-01T00:00:00.000Z"},"B":{"access":1,"lastAt":"bad"}}"#,
            ),
            obj("stats/acme/shard/01D-pod.json", "not json"),
            obj(
                "stats/globex/shard/01A-pod.json",
                r#"{"A":{"access":7,"lastAt":"2026-03-01T00:00:00.000Z"}}"#,
            ),
        ];
        let usage = fold(&objects);
        let a = usage[&("acme".to_owned(), "A".to_owned())];
        assert_eq!(a.access, 7);
        assert_eq!(a.last_at, parse_ms("2026-02-01T00:00:00.000Z"));
        assert!(!usage.contains_key(&("acme".to_owned(), "B".to_owned())));
        assert_eq!(usage[&("globex".to_owned(), "A".to_owned())].access, 7);
    }

    #[test]
    fn records_are_read_tolerantly() {
        let full: Value = serde_json::json!({"tenantId": "acme", "memoryType": "pattern", "category": "c",
            "scope": "conversation", "conversation": "chat:1", "content": "x",
            "createdAt": "2026-07-01T12:34:56.789Z", "tags": ["a", 1], "trustBase": 1});
        let r = Record::read(&full).unwrap();
        assert_eq!(
            (r.memory_type.as_str(), r.scope, r.conversation.as_deref()),
            ("pattern", "conversation", Some("chat:1"))
        );
        assert_eq!(r.tags, ["a"]);
        assert_eq!(r.created_at, 1_782_909_296_789);
        let odd: Value = serde_json::json!({"tenantId": "acme", "memoryType": "weird", "content": "y",
            "createdAt": "yesterday", "scope": "conversation", "category": 3});
        let r = Record::read(&odd).unwrap();
        assert_eq!(
            (r.memory_type.as_str(), r.created_at, r.category),
            ("project", 0, None)
        );
        assert_eq!(r.conversation.as_deref(), Some(""));
        assert!(Record::read(&serde_json::json!({"tenantId": "acme"})).is_none());
    }
}
