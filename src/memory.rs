//! The domain: what a memory is, who may see it, and the identities a request carries.
//!
//! Everything here is backend-neutral; stores map these types onto their own layouts.

use std::fmt;
use std::sync::Arc;

/// What kind of knowledge a memory holds. The declaration order is the canonical order
/// used everywhere (e.g. the stats breakdown).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum MemoryType {
    Project,
    Pattern,
    Reference,
    Conversation,
}

impl MemoryType {
    pub const ALL: [MemoryType; 4] = [
        MemoryType::Project,
        MemoryType::Pattern,
        MemoryType::Reference,
        MemoryType::Conversation,
    ];

    /// Every type's name, in canonical order.
    pub const NAMES: [&'static str; 4] = names!(MemoryType, 4);

    pub const fn as_str(self) -> &'static str {
        match self {
            MemoryType::Project => "project",
            MemoryType::Pattern => "pattern",
            MemoryType::Reference => "reference",
            MemoryType::Conversation => "conversation",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Days after which an untouched memory of this type has lost half its trust:
    /// conventions of the project age slowly, things a user said age fast.
    pub fn trust_half_life_days(self) -> f64 {
        match self {
            MemoryType::Project => 180.0,
            MemoryType::Reference => 120.0,
            MemoryType::Pattern => 60.0,
            MemoryType::Conversation => 30.0,
        }
    }
}

impl fmt::Display for MemoryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who may see a memory: the whole project, or only the conversation that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Project,
    Conversation,
}

impl Scope {
    pub const ALL: [Scope; 2] = [Scope::Project, Scope::Conversation];
    pub const NAMES: [&'static str; 2] = names!(Scope, 2);

    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::Project => "project",
            Scope::Conversation => "conversation",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// `T::ALL`'s names, in order, as a constant: for schemas and messages that list a domain
/// type's values.
macro_rules! names {
    ($t:ty, $n:literal) => {{
        let mut out = [""; $n];
        let mut i = 0;
        while i < $n {
            out[i] = <$t>::ALL[i].as_str();
            i += 1;
        }
        out
    }};
}
pub(crate) use names;

/// Which embedding model a store's vectors come from, and their width: vectors compare only
/// when both are the same. The name is `provider:model`, as the startup line shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    pub name: String,
    pub dimension: usize,
}

impl Model {
    /// The model a store recorded as its `model` and `dimension` values (`(key, value)`
    /// rows of its metadata), if it has both.
    pub fn recorded(rows: &[(String, String)]) -> Option<Model> {
        let value = |key: &str| rows.iter().find(|(k, _)| k == key).map(|(_, v)| v);
        Some(Model {
            name: value("model")?.clone(),
            dimension: value("dimension")?.parse().ok()?,
        })
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, {}d", self.name, self.dimension)
    }
}

/// The longest tenant name and conversation id (docs/identity.md#identity).
pub const MAX_TENANT_CHARS: usize = 128;
pub const MAX_CONVERSATION_CHARS: usize = 512;

/// A validated tenant name (docs/identity.md#identity): `context` makes one from a header,
/// an import from its file, both by `parse`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant(String);

impl Tenant {
    /// `value` as a tenant, by the rules of the tenant header, which are every tenant's; a
    /// refusal names `what`.
    pub fn parse(what: &str, value: String) -> Result<Tenant, String> {
        if value.chars().count() > MAX_TENANT_CHARS {
            return Err(format!(
                "{what} is too long (max {MAX_TENANT_CHARS} characters)."
            ));
        }
        if !is_slug(&value) {
            return Err(format!(
                "{what} must start with a letter or digit and contain only letters, digits, \
                 '.', '_' or '-'."
            ));
        }
        if value == "." || value == ".." {
            return Err(format!("{what} is not a valid tenant."));
        }
        Ok(Tenant(value))
    }

    /// A name a store read back, or a test's; anything from outside goes through `parse`.
    pub(crate) fn new_unchecked(value: String) -> Self {
        Tenant(value)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A validated conversation id (docs/identity.md#identity).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conversation(String);

impl Conversation {
    /// `value` as a conversation id, by the rules of the conversation header; a refusal
    /// names `what`.
    pub fn parse(what: &str, value: String) -> Result<Conversation, String> {
        if value.chars().count() > MAX_CONVERSATION_CHARS {
            return Err(format!(
                "{what} is too long (max {MAX_CONVERSATION_CHARS} characters)."
            ));
        }
        if !value.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(format!(
                "{what} may carry printable ASCII only, with no whitespace."
            ));
        }
        Ok(Conversation(value))
    }

    /// An id a store read back, or a test's; anything from outside goes through `parse`.
    pub(crate) fn new_unchecked(value: String) -> Self {
        Conversation(value)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_slug(value: &str) -> bool {
    let mut chars = value.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// What one request may see: the project's memories, plus its own conversation's notes
/// when it is in a conversation, none of them expired at the request's instant. The single
/// definition of visibility (docs/identity.md#visibility).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visibility {
    pub conversation: Option<Conversation>,
    /// The instant (ms since the Unix epoch) the request sees the store at: a memory that
    /// expires at or before it is gone, whether or not a sweep has deleted it yet.
    pub at: i64,
}

impl Visibility {
    /// What a request in `conversation` (if any) sees now.
    pub fn now(conversation: Option<Conversation>) -> Visibility {
        Visibility {
            conversation,
            at: now_ms(),
        }
    }

    pub fn can_see(&self, memory: &Memory) -> bool {
        let in_audience = match memory.scope {
            Scope::Project => true,
            Scope::Conversation => match (&self.conversation, &memory.conversation) {
                (Some(mine), Some(theirs)) => mine == theirs,
                _ => false,
            },
        };
        in_audience && self.sees_alive(memory.expires_at)
    }

    /// Whether a memory expiring at `expires_at` is still there at the request's instant.
    pub fn sees_alive(&self, expires_at: Option<i64>) -> bool {
        !expired(expires_at, self.at)
    }

    /// Dedup candidates for a write of `scope` (docs/ranking.md#duplicates): a project-scoped write is
    /// compared only with project memories, so a conversation's private note can never
    /// swallow a fact meant for the whole project.
    pub fn for_dedup(&self, scope: Scope) -> Visibility {
        match scope {
            Scope::Project => Visibility {
                conversation: None,
                at: self.at,
            },
            Scope::Conversation => self.clone(),
        }
    }
}

/// A stored memory with its usage counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    pub id: String,
    pub content: String,
    pub memory_type: MemoryType,
    pub category: Option<String>,
    pub tags: Vec<String>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub scope: Scope,
    /// Visibility key for conversation scope; provenance only for project scope.
    pub conversation: Option<Conversation>,
    pub trust_base: f64,
    pub access_count: u64,
    /// Milliseconds since the Unix epoch; `None` until first recalled.
    pub last_accessed_at: Option<i64>,
    /// The id of the memory this one took the place of (`remember`'s `replaces`).
    pub replaces: Option<String>,
    /// Milliseconds since the Unix epoch from which the memory is gone; `None`: never.
    pub expires_at: Option<i64>,
    /// Who wrote it, by the credential's name (`key:NAME`, `oauth:SUB`); `None` when it was
    /// written without one (docs/protocol.md#provenance).
    pub author: Option<String>,
}

/// A memory as `remember` hands it to the store, before it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    pub id: String,
    pub content: String,
    pub memory_type: MemoryType,
    pub category: Option<String>,
    pub tags: Vec<String>,
    pub created_at: i64,
    pub scope: Scope,
    pub conversation: Option<Conversation>,
    /// The id of a memory the writer can see that this one takes the place of.
    pub replaces: Option<String>,
    pub expires_at: Option<i64>,
    pub author: Option<String>,
}

impl NewMemory {
    /// A project memory of `content` alone: no type but `project`, no labels, no expiry.
    pub fn plain(id: &str, content: &str, created_at: i64) -> NewMemory {
        NewMemory {
            id: id.to_owned(),
            content: content.to_owned(),
            memory_type: MemoryType::Project,
            category: None,
            tags: Vec::new(),
            created_at,
            scope: Scope::Project,
            conversation: None,
            replaces: None,
            expires_at: None,
            author: None,
        }
    }

    pub fn into_memory(self) -> Memory {
        Memory {
            id: self.id,
            content: self.content,
            memory_type: self.memory_type,
            category: self.category,
            tags: self.tags,
            created_at: self.created_at,
            scope: self.scope,
            conversation: self.conversation,
            trust_base: 1.0,
            access_count: 0,
            last_accessed_at: None,
            replaces: self.replaces,
            expires_at: self.expires_at,
            author: self.author,
        }
    }
}

/// The largest memory `remember` stores, and its labels' bounds: the same for a memory
/// that arrives by `mcp-memory import` (docs/tools.md#validation).
pub const MAX_CONTENT_BYTES: usize = 32_000;
pub const MAX_CATEGORY_BYTES: usize = 128;
pub const MAX_TAGS: usize = 20;
pub const MAX_TAG_BYTES: usize = 64;
/// Ids are 26 characters; this only bounds what is looked up.
pub const MAX_ID_BYTES: usize = 128;
/// How much of an over-long tag the refusal quotes.
const TAG_QUOTE_CHARS: usize = 30;

/// The most uses a memory counts, 2^53: every count up to it is exact as a JSON number (an
/// f64), and a sum of two cannot overflow a 64-bit integer (SQLite would make it a REAL,
/// which its row reader refuses). Counting saturates there; an import refuses more
/// (docs/ranking.md, "Usage recording").
pub const MAX_USES: u64 = 1 << 53;

/// `count` plus `more` uses, saturating at `MAX_USES`.
pub fn add_uses(count: u64, more: u64) -> u64 {
    count.saturating_add(more).min(MAX_USES)
}

/// A memory's text or label breaks one of the rules above: the message names the field
/// and the limit, for the caller to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

/// JavaScript's `trim`, which also strips the byte-order mark.
pub fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
}

/// `value` when its trim is non-empty and it holds no NUL; the untrimmed value is what is
/// kept. NUL is refused on every store alike: PostgreSQL cannot hold it in text, and a
/// memory must read the same wherever it is kept.
pub fn non_blank<'a>(value: &'a str, name: &str) -> Result<&'a str, Invalid> {
    if trim(value).is_empty() {
        return Err(Invalid(format!(
            "`{name}` is required and must be a non-empty string."
        )));
    }
    if value.contains('\0') {
        return Err(Invalid(format!(
            "`{name}` may not hold a NUL character (U+0000)."
        )));
    }
    Ok(value)
}

/// A memory's content: not blank, no NUL, within `MAX_CONTENT_BYTES`.
pub fn content(content: &str) -> Result<&str, Invalid> {
    let content = non_blank(content, "content")?;
    if content.len() > MAX_CONTENT_BYTES {
        return Err(Invalid(format!(
            "`content` is {} bytes; the maximum is {MAX_CONTENT_BYTES}. Store the essential fact \
             rather than the whole document.",
            content.len()
        )));
    }
    Ok(content)
}

/// A category as stored: one line within `MAX_CATEGORY_BYTES`, trimmed, empty as none.
pub fn category(category: Option<&str>) -> Result<Option<String>, Invalid> {
    if category.is_some_and(|c| c.chars().any(char::is_control)) {
        return Err(Invalid(
            "`category` may not hold control characters (newlines, tabs, NUL); it is a \
             one-line label."
                .into(),
        ));
    }
    if category.is_some_and(|c| c.len() > MAX_CATEGORY_BYTES) {
        return Err(Invalid(format!(
            "`category` may be at most {MAX_CATEGORY_BYTES} bytes; it is a sub-label, so put the \
             detail in content."
        )));
    }
    Ok(category
        .map(trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned))
}

/// Tags trimmed, blanks dropped: how they are stored and how a filter names them.
pub fn trimmed_tags(given: Option<Vec<String>>) -> Vec<String> {
    (given.into_iter().flatten())
        .map(|tag| trim(&tag).to_owned())
        .filter(|tag| !tag.is_empty())
        .collect()
}

/// Tags as stored: each one line, at most `MAX_TAGS` given (blank ones count), trimmed,
/// blanks dropped, each within `MAX_TAG_BYTES`.
pub fn tags(given: Option<Vec<String>>) -> Result<Vec<String>, Invalid> {
    let count = given.as_ref().map_or(0, Vec::len);
    if given
        .iter()
        .flatten()
        .any(|t| t.chars().any(char::is_control))
    {
        return Err(Invalid(
            "`tags` may not hold control characters (newlines, tabs, NUL); each tag is a \
             one-line label."
                .into(),
        ));
    }
    let tags = trimmed_tags(given);
    if count > MAX_TAGS {
        return Err(Invalid(format!(
            "`tags` may hold at most {MAX_TAGS} entries."
        )));
    }
    if let Some(long) = tags.iter().find(|t| t.len() > MAX_TAG_BYTES) {
        let quote: String = long.chars().take(TAG_QUOTE_CHARS).collect();
        return Err(Invalid(format!(
            "each tag may be at most {MAX_TAG_BYTES} bytes; \"{quote}…\" is longer."
        )));
    }
    Ok(tags)
}

/// A memory's id as a caller names it (`forget`'s `id`, `remember`'s `replaces`): not blank,
/// trimmed, within `MAX_ID_BYTES` (ids are 26-character ULIDs; a v0.8 database's may be
/// longer), and free of control characters, so an answer may quote it whole.
pub fn memory_id(id: &str, field: &str) -> Result<String, Invalid> {
    let id = trim(non_blank(id, field)?);
    if id.len() > MAX_ID_BYTES {
        return Err(Invalid(format!(
            "`{field}` may be at most {MAX_ID_BYTES} bytes: it is a memory's id."
        )));
    }
    if id.chars().any(char::is_control) {
        return Err(Invalid(format!(
            "`{field}` may not hold control characters (line breaks, tabs): it is a memory's id."
        )));
    }
    Ok(id.to_owned())
}

/// The id a memory replaces (`memory_id`).
pub fn replaces(id: &str) -> Result<String, Invalid> {
    memory_id(id, "replaces")
}

/// The instants a memory's times may take: those RFC 3339 can write (years 0000 to 9999),
/// in ms, which every store holds (PostgreSQL's timestamps reach far beyond).
pub const EARLIEST_MS: i64 = -62_167_219_200_000;
pub const LATEST_MS: i64 = 253_402_300_799_999;

/// A memory's labels as they are stored.
pub struct Labels {
    pub category: Option<String>,
    pub tags: Vec<String>,
    pub replaces: Option<String>,
}

/// What `remember` holds a memory's text and labels to, for a memory that arrives another
/// way too (`mcp-memory import`): its labels as stored, or the first rule it breaks.
pub fn labels(
    content_given: &str,
    category_given: Option<&str>,
    tags_given: Vec<String>,
    replaces_given: Option<&str>,
) -> Result<Labels, Invalid> {
    content(content_given)?;
    Ok(Labels {
        category: category(category_given)?,
        tags: tags(Some(tags_given))?,
        replaces: replaces_given.map(replaces).transpose()?,
    })
}

/// A memory found by vector search, with its cosine similarity to the query. The memory is
/// shared: a recall weighs a hundred or more candidates and shows a few, and a store that
/// holds its memories in memory hands them out without copying each one.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub memory: Arc<Memory>,
    pub similarity: f64,
}

impl Hit {
    pub fn new(memory: Memory, similarity: f64) -> Hit {
        Hit {
            memory: Arc::new(memory),
            similarity,
        }
    }
}

/// A memory found by the words of a query: its BM25 score among the memories the caller
/// can see, and its cosine similarity to the query, so both rankings can be fused.
#[derive(Debug, Clone, PartialEq)]
pub struct KeywordHit {
    pub hit: Hit,
    pub score: f64,
}

/// Whether a memory expiring at `expires_at` (ms; None for never) is gone at `at` (ms):
/// from its expiry on.
pub fn expired(expires_at: Option<i64>, at: i64) -> bool {
    expires_at.is_some_and(|expires| expires <= at)
}

/// A fresh ULID minted from the write instant: lexicographic order is time order.
pub fn new_id(now_ms: i64) -> String {
    let ms = u64::try_from(now_ms).unwrap_or(0);
    ulid::Ulid::from_parts(ms, rand_u128()).to_string()
}

pub(crate) fn rand_u128() -> u128 {
    // ulid's own generator needs the `rand` feature; the std hasher's random keys are enough
    // to make ids unique within one millisecond.
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut high = RandomState::new().build_hasher();
    high.write_u8(1);
    let mut low = RandomState::new().build_hasher();
    low.write_u8(2);
    (u128::from(high.finish()) << 64) | u128::from(low.finish())
}

/// `bytes` as lower-case hex, as `sha256sum` prints a digest.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// ISO-8601 UTC with exactly three fractional digits, as JavaScript's `toISOString` prints.
pub fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(scope: Scope, conversation: Option<&str>) -> Memory {
        NewMemory {
            id: new_id(0),
            content: "x".into(),
            memory_type: MemoryType::Project,
            category: None,
            tags: vec![],
            created_at: 0,
            scope,
            conversation: conversation.map(|c| Conversation::new_unchecked(c.into())),
            replaces: None,
            expires_at: None,
            author: None,
        }
        .into_memory()
    }

    fn seen_by(conversation: Option<&str>) -> Visibility {
        Visibility {
            conversation: conversation.map(|c| Conversation::new_unchecked(c.into())),
            at: 1_000,
        }
    }

    #[test]
    fn a_memory_is_gone_from_the_instant_it_expires() {
        let mut m = memory(Scope::Project, None);
        m.expires_at = Some(1_001);
        assert!(seen_by(None).can_see(&m));
        m.expires_at = Some(1_000);
        assert!(!seen_by(None).can_see(&m));
        assert!(!seen_by(None).for_dedup(Scope::Project).can_see(&m));
        m.expires_at = None;
        assert!(seen_by(None).can_see(&m));
    }

    #[test]
    fn project_memories_are_visible_everywhere_and_provenance_is_no_filter() {
        let m = memory(Scope::Project, Some("chat:1"));
        assert!(seen_by(None).can_see(&m));
        assert!(seen_by(Some("chat:2")).can_see(&m));
    }

    #[test]
    fn conversation_notes_are_visible_only_to_their_conversation() {
        let m = memory(Scope::Conversation, Some("chat:1"));
        assert!(seen_by(Some("chat:1")).can_see(&m));
        assert!(!seen_by(Some("chat:2")).can_see(&m));
        assert!(!seen_by(None).can_see(&m));
    }

    #[test]
    fn ids_are_26_crockford_characters_in_time_order() {
        let a = new_id(1_700_000_000_000);
        let b = new_id(1_700_000_000_001);
        assert_eq!(a.len(), 26);
        assert!(
            a.chars()
                .all(|c| "0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(c))
        );
        assert!(a < b);
        assert_ne!(new_id(5), new_id(5));
    }

    #[test]
    fn iso_has_millisecond_precision_and_z() {
        assert_eq!(iso(1_782_909_296_789), "2026-07-01T12:34:56.789Z");
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn tags_are_trimmed_and_blanks_dropped() {
        let given = [" a ", "", "  ", "배포"].map(String::from).to_vec();
        assert_eq!(trimmed_tags(Some(given)), ["a", "배포"]);
        assert!(trimmed_tags(None).is_empty());
    }
}
