//! A memory's row: the visibility clause, the columns a memory is read from, and its
//! codec both ways (vectors as little-endian f32 blobs, tags as JSON).

use rusqlite::{Connection, Row, params};

use crate::memory::{Conversation, Memory, MemoryType, Scope, Visibility};

/// `?2` is the request's conversation or NULL, `?3` its instant (docs/identity.md#visibility).
pub(super) const VISIBLE: &str = "(scope = 'project' OR (?2 IS NOT NULL AND conversation = ?2)) \
     AND (expires_at IS NULL OR expires_at > ?3)";
/// A memory whole, read `FROM {MEMORIES}`: its counters add up both tables, at most
/// `memory::MAX_USES` (9007199254740992: a file an older release let past it still reads).
pub(super) const COLUMNS: &str = "m.id, m.content, m.memory_type, m.category, m.tags, m.created_at, m.scope, \
     m.conversation, m.trust_base, min(m.access_count + coalesce(u.access_count, 0), 9007199254740992), \
     max(coalesce(m.last_accessed_at, u.last_accessed_at), \
         coalesce(u.last_accessed_at, m.last_accessed_at)), m.replaces, m.expires_at, m.author";
/// How many columns `COLUMNS` is: a query reading more after it reads them from here.
pub(super) const WIDTH: usize = 14;
pub(super) const MEMORIES: &str =
    "memories m LEFT JOIN memory_uses u ON u.tenant_id = m.tenant_id AND u.id = m.id";

pub(super) fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn from_blob(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

pub(super) fn memory_from_row(row: &Row) -> rusqlite::Result<Memory> {
    let tags: String = row.get(4)?;
    let scope: String = row.get(6)?;
    Ok(Memory {
        id: row.get(0)?,
        content: row.get(1)?,
        memory_type: MemoryType::parse(&row.get::<_, String>(2)?).unwrap_or(MemoryType::Project),
        category: row.get(3)?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        created_at: row.get(5)?,
        scope: Scope::parse(&scope).unwrap_or(Scope::Project),
        conversation: row
            .get::<_, Option<String>>(7)?
            .map(Conversation::new_unchecked),
        trust_base: row.get(8)?,
        access_count: (row.get::<_, i64>(9)?.max(0) as u64).min(crate::memory::MAX_USES),
        last_accessed_at: row.get(10)?,
        replaces: row.get(11)?,
        expires_at: row.get(12)?,
        author: row.get(13)?,
    })
}

/// Writes `memory` of `tenant` whole, its uses and times as it holds them, with `verb`
/// (`INSERT`, or `INSERT OR IGNORE` to keep a memory the file already holds); how many
/// rows it wrote.
pub(super) fn insert(
    tx: &Connection,
    verb: &str,
    tenant: &str,
    m: &Memory,
    embedding: &[f32],
    terms: &[String],
) -> rusqlite::Result<usize> {
    tx.prepare_cached(&format!(
        "{verb} INTO memories (tenant_id, id, content, memory_type, category, tags, \
         created_at, scope, conversation, trust_base, embedding, access_count, \
         last_accessed_at, terms, replaces, expires_at, author) VALUES (?1, ?2, ?3, ?4, ?5, ?6, \
         ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)"
    ))?
    .execute(params![
        tenant,
        m.id,
        m.content,
        m.memory_type.as_str(),
        m.category,
        serde_json::to_string(&m.tags).unwrap_or_else(|_| "[]".into()),
        m.created_at,
        m.scope.as_str(),
        m.conversation.as_ref().map(|c| c.as_str()),
        m.trust_base,
        to_blob(embedding),
        i64::try_from(m.access_count).unwrap_or(i64::MAX),
        m.last_accessed_at,
        terms.join(" "),
        m.replaces,
        m.expires_at,
        m.author,
    ])
}

pub(super) fn conversation_of(v: &Visibility) -> Option<String> {
    v.conversation.as_ref().map(|c| c.as_str().to_owned())
}
