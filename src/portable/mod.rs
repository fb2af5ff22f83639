//! Memories out of a store and into another (`mcp-memory export` and `import`), as JSON
//! Lines: a header naming the format and the embedding model, then one memory per line,
//! whole, with its vector (docs/stores.md#export-and-import). The commands are
//! configured as the server is, by the same variables, and open the store it would.

pub mod export;
pub mod import;
pub mod progress;
pub mod reembed;

use std::process::ExitCode;
use std::sync::Arc;

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::config::{Config, Variables};
use crate::embed::{self, EmbedError, Embedder};
use crate::memory::{Memory, MemoryType, Model, Scope, iso};
use crate::store::{MemoryStore, Portable};

/// The format this release writes: a header, the memories, and an end line.
pub const FORMAT: &str = "mcp-memory/2";
/// The format of earlier releases, still read: the same without the end line, so a file
/// cut short cannot be told from a whole one.
pub const FORMAT_WITHOUT_END: &str = "mcp-memory/1";
/// Memories read or written at a time: what a command holds in memory, whatever the size
/// of the store or the file.
pub const BATCH: usize = 500;
/// How far past this machine's clock an imported creation or use may be: two machines'
/// clocks differ by seconds, never by this.
pub const CLOCK_SKEW_MS: i64 = 5 * 60_000;

/// The first line of an export.
#[derive(Debug, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub model: String,
    pub dimension: usize,
    pub exported_at: String,
}

/// The last line of an export, `{"end":{"memories":N,"sha256":"…"}}`: how many memory
/// lines come before it, and the SHA-256 of every byte before it, header included (`head
/// -n -1 FILE | sha256sum` gives the same). A file cut at a line boundary has lost it; one
/// cut or changed elsewhere no longer matches it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct End {
    pub memories: u64,
    pub sha256: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndLine {
    end: End,
}

impl End {
    /// The line this end is written as.
    pub fn line(self) -> String {
        serde_json::to_string(&EndLine { end: self }).unwrap_or_default()
    }

    /// Whether `line` is an end line (and not a memory), which `read` then checks.
    pub fn is(line: &str) -> bool {
        line.trim_start().starts_with("{\"end\"")
    }

    /// The end an end line gives.
    pub fn read(line: &str) -> Result<End, String> {
        serde_json::from_str::<EndLine>(line)
            .map(|l| l.end)
            .map_err(|e| format!("not an export's end line ({e})"))
    }
}

/// One memory, as a line of an export.
#[derive(Debug, Serialize, Deserialize)]
pub struct Line {
    pub tenant: String,
    pub id: String,
    pub content: String,
    #[serde(rename = "type")]
    pub memory_type: String,
    pub category: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub scope: String,
    pub conversation: Option<String>,
    pub created: String,
    pub expires: Option<String>,
    pub replaces: Option<String>,
    pub trust_base: f64,
    pub access_count: u64,
    pub last_accessed: Option<String>,
    /// Who wrote it (docs/protocol.md#provenance); absent for a memory written without a
    /// credential, so such a line reads as it always did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Little-endian f32s, base64: exact, and a third of the text of decimal numbers.
    pub embedding: String,
}

impl Line {
    pub fn of(p: &Portable) -> Line {
        let m = &p.memory;
        let bytes: Vec<u8> = p.embedding.iter().flat_map(|x| x.to_le_bytes()).collect();
        Line {
            tenant: p.tenant.as_str().to_owned(),
            id: m.id.clone(),
            content: m.content.clone(),
            memory_type: m.memory_type.as_str().to_owned(),
            category: m.category.clone(),
            tags: m.tags.clone(),
            scope: m.scope.as_str().to_owned(),
            conversation: m.conversation.as_ref().map(|c| c.as_str().to_owned()),
            created: iso(m.created_at),
            expires: m.expires_at.map(iso),
            replaces: m.replaces.clone(),
            trust_base: m.trust_base,
            access_count: m.access_count,
            last_accessed: m.last_accessed_at.map(iso),
            author: m.author.clone(),
            embedding: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }

    /// The memory this line holds, checked as `remember` checks one (and its vector of
    /// `dimension` values); a refusal names the field.
    pub fn into_portable(self, dimension: usize) -> Result<Portable, String> {
        let field = |name: &str, message: String| format!("{name}: {message}");
        let tenant = crate::memory::Tenant::parse("the tenant", self.tenant)
            .map_err(|e| field("tenant", e))?;
        // In its canonical form: every store keys memories by the id as written.
        if ulid::Ulid::from_string(&self.id).map(|u| u.to_string()) != Ok(self.id.clone()) {
            return Err(field(
                "id",
                format!("\"{}\" is not a ULID in upper case", self.id),
            ));
        }
        let crate::memory::Labels {
            category,
            tags,
            replaces,
        } = crate::memory::labels(
            &self.content,
            self.category.as_deref(),
            self.tags,
            self.replaces.as_deref(),
        )
        .map_err(|refused| refused.0)?;
        let memory_type = MemoryType::parse(&self.memory_type).ok_or_else(|| {
            field(
                "type",
                format!("must be one of: {}", MemoryType::NAMES.join(", ")),
            )
        })?;
        let scope = Scope::parse(&self.scope).ok_or_else(|| {
            field(
                "scope",
                format!("must be one of: {}", Scope::NAMES.join(", ")),
            )
        })?;
        let conversation = self
            .conversation
            .map(|c| crate::memory::Conversation::parse("the conversation", c))
            .transpose()
            .map_err(|e| field("conversation", e))?;
        if scope == Scope::Conversation && conversation.is_none() {
            return Err(field(
                "conversation",
                "a memory of scope conversation needs its conversation".into(),
            ));
        }
        let time = |name: &str, text: &str| {
            chrono::DateTime::parse_from_rfc3339(text)
                .map(|t| t.timestamp_millis())
                .map_err(|_| field(name, format!("\"{text}\" is not an RFC 3339 time")))
        };
        let created_at = time("created", &self.created)?;
        let expires_at = self
            .expires
            .as_deref()
            .map(|t| time("expires", t))
            .transpose()?;
        let last_accessed_at = (self.last_accessed.as_deref())
            .map(|t| time("last_accessed", t))
            .transpose()?;
        // A creation or use in the future would pin the memory first in every listing (and
        // first in recency) for good; a clock a little ahead of this one's is allowed.
        let latest = crate::memory::now_ms() + CLOCK_SKEW_MS;
        for (name, text, at) in [
            ("created", Some(&self.created), Some(created_at)),
            (
                "last_accessed",
                self.last_accessed.as_ref(),
                last_accessed_at,
            ),
        ] {
            if let (Some(text), Some(at)) = (text, at)
                && at > latest
            {
                return Err(field(
                    name,
                    format!(
                        "\"{text}\" is in the future: at most {} minutes past this machine's clock",
                        CLOCK_SKEW_MS / 60_000
                    ),
                ));
            }
        }
        if !(self.trust_base.is_finite() && self.trust_base > 0.0 && self.trust_base <= 1.0) {
            return Err(field("trust_base", "must be in (0, 1]".into()));
        }
        if self.access_count > crate::memory::MAX_USES {
            let most = crate::memory::MAX_USES;
            return Err(field("access_count", format!("must be at most {most}")));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.embedding)
            .map_err(|_| field("embedding", "is not base64".into()))?;
        if Some(bytes.len()) != dimension.checked_mul(4) {
            return Err(field(
                "embedding",
                format!(
                    "holds {} values where the header says {dimension}",
                    bytes.len() as f64 / 4.0
                ),
            ));
        }
        let embedding: Vec<f32> = (bytes.chunks_exact(4))
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        if embedding.iter().any(|x| !x.is_finite()) || embedding.iter().all(|x| *x == 0.0) {
            return Err(field(
                "embedding",
                "is not a usable vector (zero or not finite)".into(),
            ));
        }
        let author = match self.author {
            Some(a)
                if a.is_empty()
                    || a.len() > crate::auth::MAX_NAME_BYTES
                    || a.chars().any(char::is_control) =>
            {
                return Err(field(
                    "author",
                    format!(
                        "must be 1 to {} bytes without control characters",
                        crate::auth::MAX_NAME_BYTES
                    ),
                ));
            }
            author => author,
        };
        Ok(Portable {
            tenant,
            memory: Memory {
                id: self.id,
                content: self.content,
                memory_type,
                category,
                tags,
                created_at,
                scope,
                conversation,
                trust_base: self.trust_base,
                access_count: self.access_count,
                last_accessed_at,
                author,
                replaces,
                expires_at,
            },
            embedding,
        })
    }
}

/// The configured embedder and store, as the server would open them; a refusal is printed
/// as one line and becomes the exit code.
async fn open(variables: Variables) -> Result<(Arc<dyn Embedder>, Arc<dyn MemoryStore>), ExitCode> {
    let (_, embedder, store) = opened(variables).await?;
    Ok((embedder, store))
}

/// `open`, with the configuration, for a command that judges as the server does
/// (`calibrate`).
pub async fn opened(variables: Variables) -> Result<Opened, ExitCode> {
    let config = resolved(variables)?;
    match crate::app::open_store(&config).await {
        Ok((embedder, store)) => Ok((config, embedder, store)),
        Err(refused) => {
            eprintln!("{refused}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// The configuration, and the embedder and the store it names.
pub type Opened = (Config, Arc<dyn Embedder>, Arc<dyn MemoryStore>);

/// The configuration; a refusal is printed as one line and becomes the exit code, and its
/// warnings are printed.
fn resolved(variables: Variables) -> Result<Config, ExitCode> {
    let config = variables.resolve().map_err(|message| {
        eprintln!("configuration error: {message}");
        ExitCode::FAILURE
    })?;
    for warning in &config.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(config)
}

/// The configuration and the embedder it names, for a command that opens its store
/// itself (`reembed`); a refusal is printed as one line and becomes
/// the exit code.
pub fn configured(variables: Variables) -> Result<(Config, Arc<dyn Embedder>), ExitCode> {
    let config = resolved(variables)?;
    let embedder = embed::build(&config.embedder).map_err(|e| {
        eprintln!("embedding model error: {e}");
        ExitCode::FAILURE
    })?;
    Ok((config, embedder))
}

/// How long embedding waits out a busy local model for one text, in tries of 20 ms.
const BUSY_TRIES: usize = 500;
/// Texts embedded at once by `import --reembed`, `reembed` and `calibrate`.
const EMBEDDING_AT_ONCE: usize = 16;

/// What a text is embedded as: a model trained with instructions embeds the two apart
/// (`Embedder::embed_query`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    Memory,
    Query,
}

/// The vectors of `texts`, in their order, by the configured embedder: always
/// `EMBEDDING_AT_ONCE` in flight, so a local model finds a full batch waiting whenever it
/// frees up, or as many as the embedder takes at once when that is fewer (a text waiting
/// for its turn would spend its timeout waiting); a busy local model is waited for. `done`
/// hears of each vector as it comes.
pub async fn embed_all(
    embedder: &Arc<dyn Embedder>,
    texts: Vec<String>,
    kind: Embedding,
    mut done: impl FnMut(),
) -> Result<Vec<Vec<f32>>, String> {
    use futures_util::{StreamExt, TryStreamExt};
    let once = |text: String| async move {
        match kind {
            Embedding::Memory => embedder.embed(&text).await,
            Embedding::Query => embedder.embed_query(&text).await,
        }
    };
    let embed = |text: String| async move {
        for _ in 1..BUSY_TRIES {
            match once(text.clone()).await {
                Err(EmbedError::Busy(_)) => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await
                }
                done => return done,
            }
        }
        once(text).await
    };
    let at_once = (embedder.at_once()).map_or(EMBEDDING_AT_ONCE, |n| n.clamp(1, EMBEDDING_AT_ONCE));
    let endpoint = embedder.at_once().is_some();
    futures_util::stream::iter(texts)
        .map(embed)
        .buffered(at_once)
        .inspect_ok(|_| done())
        .map_err(|e| stopped(&e, endpoint))
        .try_collect()
        .await
}

/// Why a command embedding many texts stopped. An endpoint that took too long for one of
/// them is usually one given more than it can do at once, on long windows: the two
/// settings that leave each text more of its 10 s are named.
fn stopped(e: &EmbedError, endpoint: bool) -> String {
    match e {
        EmbedError::Timeout(_) if endpoint => format!(
            "embedding: {e} (a slow endpoint: fewer requests at once, EMBEDDING_MAX_REQUESTS, \
             or shorter windows, EMBEDDING_MAX_TOKENS, leave each text more of its time)"
        ),
        _ => format!("embedding: {e}"),
    }
}

/// The model a header names.
fn model_of(header: &Header) -> Model {
    Model {
        name: header.model.clone(),
        dimension: header.dimension,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::embed::Turns;

    /// A command keeps no more texts in flight than the embedder takes, so none spends its
    /// timeout waiting for a turn; every vector comes back, in order.
    #[tokio::test]
    async fn no_more_texts_go_at_once_than_the_embedder_takes() {
        let turns = Arc::new(Turns::new(3));
        let embedder: Arc<dyn Embedder> = turns.clone();
        let texts: Vec<String> = (0..40).map(|i| format!("text {i}")).collect();
        let mut heard = 0;
        let vectors = embed_all(&embedder, texts, Embedding::Memory, || heard += 1)
            .await
            .unwrap();
        assert_eq!((vectors.len(), heard), (40, 40));
        assert_eq!(turns.most(), 3);
    }

    /// An endpoint that answers too late for every text.
    struct Late;

    #[async_trait::async_trait]
    impl Embedder for Late {
        async fn embed(&self, _: &str) -> Result<Vec<f32>, EmbedError> {
            Err(EmbedError::Timeout(10_000))
        }

        fn at_once(&self) -> Option<usize> {
            Some(2)
        }

        fn model(&self) -> Model {
            Model {
                name: "test:late".into(),
                dimension: 2,
            }
        }
    }

    /// The command stops at the first text that timed out, and says what to lower.
    #[tokio::test]
    async fn a_timeout_at_the_endpoint_names_what_to_lower() {
        let embedder: Arc<dyn Embedder> = Arc::new(Late);
        let texts = vec!["one".to_owned(), "two".to_owned()];
        let stopped = embed_all(&embedder, texts, Embedding::Query, || {})
            .await
            .unwrap_err();
        assert_eq!(
            stopped,
            "embedding: the embedding service did not respond within 10000ms (a slow \
             endpoint: fewer requests at once, EMBEDDING_MAX_REQUESTS, or shorter windows, \
             EMBEDDING_MAX_TOKENS, leave each text more of its time)"
        );
    }
}
