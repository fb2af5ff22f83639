//! A memory's row: the visibility clause, the columns a memory is read from, its codec both
//! ways, and the rows of a search's answers read by id.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::memory::{Conversation, Hit, KeywordHit, Memory, MemoryType, Scope, Tenant, Visibility};
use crate::search::{Found, SearchIndex};
use crate::store::StoreError;

/// `$2` is the request's conversation or NULL, `$3` its instant in epoch milliseconds
/// (docs/identity.md#visibility).
pub(super) const VISIBLE: &str = "(scope = 'project' OR (scope = 'conversation' AND $2::text IS NOT NULL AND conversation = $2)) \
     AND (expires_at IS NULL OR expires_at > to_timestamp($3::double precision / 1000))";
/// Times travel as epoch milliseconds, exactly (extract gives numeric since PostgreSQL 14).
pub(super) const COLUMNS: &str = "id, content, memory_type, category, tags, \
     (extract(epoch FROM created_at) * 1000)::bigint AS created_ms, scope, conversation, trust_base, \
     access_count, (extract(epoch FROM last_accessed_at) * 1000)::bigint AS last_accessed_ms, \
     replaces, (extract(epoch FROM expires_at) * 1000)::bigint AS expires_ms, author";

/// A memory to write: its tenant, the memory whole, its vector and its terms.
pub(super) type NewRow<'a> = (&'a str, &'a Memory, &'a [f32], Vec<String>);

/// One statement writing `rows` whole, their uses and times as they hold them; a caller may
/// add an `ON CONFLICT` clause.
pub(super) fn insert<'a>(
    rows: impl IntoIterator<Item = NewRow<'a>>,
) -> sqlx::QueryBuilder<'a, sqlx::Postgres> {
    let mut insert = sqlx::QueryBuilder::new(
        "INSERT INTO memories (tenant_id, id, content, memory_type, category, tags, created_at, \
         scope, conversation, trust_base, embedding, access_count, last_accessed_at, terms, \
         replaces, expires_at, author) ",
    );
    let seconds = |ms: i64| ms as f64 / 1000.0;
    insert.push_values(rows, |mut row, (tenant, m, embedding, terms)| {
        row.push_bind(tenant)
            .push_bind(&m.id)
            .push_bind(&m.content)
            .push_bind(m.memory_type.as_str())
            .push_bind(m.category.as_deref())
            .push_bind(&m.tags)
            .push("to_timestamp(")
            .push_bind_unseparated(seconds(m.created_at))
            .push_unseparated(")")
            .push_bind(m.scope.as_str())
            .push_bind(m.conversation.as_ref().map(Conversation::as_str))
            .push_bind(m.trust_base)
            .push_bind(pgvector::Vector::from(embedding.to_vec()))
            .push_bind(i64::try_from(m.access_count).unwrap_or(i64::MAX))
            .push("to_timestamp(")
            .push_bind_unseparated(m.last_accessed_at.map(seconds))
            .push_unseparated(")")
            .push_bind(terms)
            .push_bind(m.replaces.as_deref())
            .push("to_timestamp(")
            .push_bind_unseparated(m.expires_at.map(seconds))
            .push_unseparated(")")
            .push_bind(m.author.as_deref());
    });
    insert
}

pub(super) fn memory_from_row(row: &PgRow) -> Result<Memory, sqlx::Error> {
    let memory_type: String = row.try_get("memory_type")?;
    let scope: String = row.try_get("scope")?;
    Ok(Memory {
        id: row.try_get("id")?,
        content: row.try_get("content")?,
        memory_type: MemoryType::parse(&memory_type).unwrap_or(MemoryType::Project),
        category: row
            .try_get::<Option<String>, _>("category")?
            .filter(|c| !c.is_empty()),
        tags: row.try_get("tags")?,
        created_at: row.try_get("created_ms")?,
        scope: Scope::parse(&scope).unwrap_or(Scope::Project),
        conversation: row
            .try_get::<Option<String>, _>("conversation")?
            .map(Conversation::new_unchecked),
        trust_base: row.try_get("trust_base")?,
        access_count: (row.try_get::<i64, _>("access_count")?.max(0) as u64)
            .min(crate::memory::MAX_USES),
        last_accessed_at: row.try_get("last_accessed_ms")?,
        replaces: row.try_get("replaces")?,
        expires_at: row.try_get("expires_ms")?,
        author: row.try_get("author")?,
    })
}

pub(super) fn conversation_of(v: &Visibility) -> Option<&str> {
    v.conversation.as_ref().map(Conversation::as_str)
}

/// The request's instant, as `VISIBLE`'s `$3` takes it.
pub(super) fn at_of(v: &Visibility) -> f64 {
    v.at as f64
}

/// A memory a search found, by id, with its similarity and, for a keyword match, its score.
pub(super) struct Located {
    pub(super) id: String,
    pub(super) similarity: f64,
    pub(super) score: f64,
}

impl Located {
    /// A search's answers as ids, nearest first, then by words.
    pub(super) fn all(index: &SearchIndex, found: Found) -> [Vec<Located>; 2] {
        let nearest = (found.nearest.into_iter())
            .map(|n| Located {
                id: index.id(n.position).to_owned(),
                similarity: n.similarity,
                score: 0.0,
            })
            .collect();
        let by_words = (found.by_words.into_iter())
            .map(|m| Located {
                id: index.id(m.position).to_owned(),
                similarity: m.similarity,
                score: m.score,
            })
            .collect();
        [nearest, by_words]
    }
}

/// Reads, in one query, the rows of each answer in `found` that `visibility` may see; each
/// keeps its order, and a memory in two answers is read once. A memory deleted since the
/// search is simply not found.
pub(super) async fn found_rows<'e, const N: usize>(
    executor: impl sqlx::PgExecutor<'e>,
    tenant: &Tenant,
    visibility: &Visibility,
    found: [Vec<Located>; N],
) -> Result<[Vec<KeywordHit>; N], StoreError> {
    let ids: Vec<&str> = found.iter().flatten().map(|l| l.id.as_str()).collect();
    if ids.is_empty() {
        return Ok(found.map(|_| Vec::new()));
    }
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM memories WHERE tenant_id = $1 AND {VISIBLE} AND id = ANY($4)"
    ))
    .bind(tenant.as_str())
    .bind(conversation_of(visibility))
    .bind(at_of(visibility))
    .bind(&ids)
    .fetch_all(executor)
    .await?;
    let by_id: HashMap<String, Arc<Memory>> = rows
        .iter()
        .map(|row| memory_from_row(row).map(|m| (m.id.clone(), Arc::new(m))))
        .collect::<Result<_, _>>()?;
    Ok(found.map(|answer| {
        answer
            .into_iter()
            .filter_map(|located| {
                Some(KeywordHit {
                    hit: Hit {
                        memory: Arc::clone(by_id.get(&located.id)?),
                        similarity: located.similarity,
                    },
                    score: located.score,
                })
            })
            .collect()
    }))
}
