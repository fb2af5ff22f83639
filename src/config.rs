//! Environment → validated configuration, before the port is bound (BEHAVIOR.md §11,
//! DESIGN.md §3). Every refusal is one line naming the variable. This module and the
//! store/embed constructors are the only places that know which features were compiled in.

use std::net::IpAddr;

use crate::docs::KnowledgeBase;
use crate::embed::Settings as EmbedderConfig;
use crate::store::Settings;
#[cfg(any(feature = "sqlite", feature = "local"))]
use std::path::PathBuf;

/// No `Debug`: it holds the API keys.
pub struct Config {
    pub host: IpAddr,
    pub port: u16,
    pub api_key: Option<String>,
    pub allowed_origins: Vec<String>,
    pub body_limit: usize,
    pub store: Settings,
    pub embedder: EmbedderConfig,
    pub knowledge_base: Option<KnowledgeBase>,
    pub min_similarity: f64,
    pub keyword_weight: f64,
    /// Whether tool-call metrics carry the tenant (one series per tenant: opt-in).
    pub metrics_tenant_label: bool,
    /// Settings that were ignored, one line each, for the operator.
    pub warnings: Vec<String>,
}

/// Every variable the server reads, its default, and what it does: `--help` prints this,
/// and a test checks that it names every variable this file reads.
pub const VARIABLES: &[(&str, &str, &str)] = &[
    ("PORT", "3000", "port to listen on"),
    ("HOST", "0.0.0.0", "address to listen on"),
    (
        "MCP_API_KEY",
        "unset (no auth)",
        "bearer token every request to /mcp and /metrics must present",
    ),
    (
        "MCP_ALLOWED_ORIGINS",
        "empty",
        "comma-separated browser origins allowed to call",
    ),
    (
        "MCP_BODY_LIMIT_BYTES",
        "1048576",
        "largest request body accepted",
    ),
    (
        "DATABASE_URL",
        "unset",
        "sqlite:<path> or postgres://… ; unset means S3",
    ),
    (
        "DATABASE_POOL_SIZE",
        "10",
        "PostgreSQL connections per process",
    ),
    (
        "DATABASE_STATEMENT_TIMEOUT_MS",
        "10000",
        "PostgreSQL statement timeout",
    ),
    ("VECTOR_BUCKET", "unset", "S3 Vectors bucket (S3 store)"),
    ("VECTOR_INDEX", "memories", "S3 Vectors index (S3 store)"),
    (
        "STATE_BUCKET",
        "unset",
        "S3 bucket for the recency index and counters (S3 store)",
    ),
    (
        "STATS_FLUSH_MS",
        "30000",
        "how often counters are flushed (S3 store)",
    ),
    (
        "STATS_COMPACT_THRESHOLD",
        "20",
        "counter shards that trigger compaction (S3 store)",
    ),
    (
        "S3_FORCE_PATH_STYLE",
        "false",
        "path-style S3 addressing, for emulators",
    ),
    (
        "AWS_REGION",
        DEFAULT_REGION,
        "region of S3, Bedrock and the knowledge base",
    ),
    ("EMBEDDING_PROVIDER", "bedrock", "bedrock, openai or local"),
    (
        "EMBEDDING_MODEL",
        "amazon.titan-embed-text-v2:0 / text-embedding-3-small",
        "model id (bedrock, openai), or the model directory (local)",
    ),
    (
        "EMBEDDING_DIM",
        "1024 bedrock, 1536 openai, the model's own local",
        "vector width",
    ),
    (
        "EMBEDDING_BASE_URL",
        "unset",
        "OpenAI-compatible endpoint (openai)",
    ),
    ("EMBEDDING_API_KEY", "unset", "its API key (openai)"),
    (
        "KNOWLEDGE_BASE_ID",
        "unset",
        "Bedrock Knowledge Base for search_docs",
    ),
    ("RECALL_MIN_SIMILARITY", "0.1", "similarity floor of recall"),
    (
        "RECALL_KEYWORD_WEIGHT",
        "0.5",
        "weight of words against meaning in recall (0 = meaning only)",
    ),
    (
        "METRICS_TENANT_LABEL",
        "false",
        "label tool-call metrics with the tenant",
    ),
];

const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;
/// How much a query's words weigh against its meaning; chosen on the LoCoMo benchmark
/// (BENCHMARKS.md).
const DEFAULT_KEYWORD_WEIGHT: f64 = 0.5;
/// One region for S3, Bedrock and the knowledge base.
const DEFAULT_REGION: &str = "ap-northeast-2";

impl Config {
    pub fn from_env() -> Result<Config, String> {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads variables through `var`; values are trimmed and blank means unset.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let get = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let mut warnings = Vec::new();

        let port = match get("PORT") {
            None => 3000,
            Some(raw) => raw.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                format!("PORT must be an integer between 1 and 65535, got \"{raw}\"")
            })?,
        };
        let host = match get("HOST") {
            None => IpAddr::from([0, 0, 0, 0]),
            Some(raw) => raw
                .parse()
                .map_err(|_| format!("HOST must be an IP address to listen on, got \"{raw}\""))?,
        };
        let body_limit = match get("MCP_BODY_LIMIT_BYTES") {
            None => DEFAULT_BODY_LIMIT,
            Some(raw) => positive(&raw, "MCP_BODY_LIMIT_BYTES")?,
        };
        let api_key = get("MCP_API_KEY");
        let allowed_origins = get("MCP_ALLOWED_ORIGINS")
            .map(|raw| {
                raw.split(',')
                    .map(|o| o.trim().to_owned())
                    .filter(|o| !o.is_empty())
                    .collect()
            })
            .unwrap_or_default();

        let region = get("AWS_REGION").unwrap_or_else(|| DEFAULT_REGION.into());
        let store = store(&get, &region, &mut warnings)?;
        let knowledge_base = knowledge_base(&get, &region, &mut warnings)?;
        let embedder = embedder(&get, &region)?;

        let min_similarity = match get("RECALL_MIN_SIMILARITY") {
            None => 0.1,
            Some(raw) => raw
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v > 0.0 && *v <= 1.0)
                .ok_or_else(|| {
                    format!(
                        "RECALL_MIN_SIMILARITY must be greater than 0 and at most 1, got \"{raw}\""
                    )
                })?,
        };

        let keyword_weight = match get("RECALL_KEYWORD_WEIGHT") {
            None => DEFAULT_KEYWORD_WEIGHT,
            Some(raw) => raw
                .parse::<f64>()
                .ok()
                .filter(|v| (0.0..=1.0).contains(v))
                .ok_or_else(|| {
                    format!("RECALL_KEYWORD_WEIGHT must be between 0 and 1, got \"{raw}\"")
                })?,
        };

        // Read by `store` for S3; only validated (and reported as ignored) otherwise.
        for name in ["STATS_FLUSH_MS", "STATS_COMPACT_THRESHOLD"] {
            if let Some(raw) = get(name) {
                positive(&raw, name)?;
                if !store.is_s3() {
                    warnings.push(format!(
                        "{name} is ignored: it applies to the S3 store only"
                    ));
                }
            }
        }

        let metrics_tenant_label = flag(&get, "METRICS_TENANT_LABEL")?;

        Ok(Config {
            host,
            port,
            api_key,
            allowed_origins,
            body_limit,
            store,
            embedder,
            knowledge_base,
            min_similarity,
            keyword_weight,
            metrics_tenant_label,
            warnings,
        })
    }
}

/// A true/false variable; unset is false.
fn flag(get: &impl Fn(&str) -> Option<String>, name: &str) -> Result<bool, String> {
    match get(name).as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(format!("{name} must be true or false, got \"{other}\"")),
    }
}

fn positive(raw: &str, name: &str) -> Result<usize, String> {
    raw.parse::<usize>()
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("{name} must be a positive integer, got \"{raw}\""))
}

/// A choice the operator made that this binary cannot serve: the feature was left out of
/// the build.
#[allow(dead_code)] // every feature compiled in leaves nothing to refuse
fn unavailable(what: &str, feature: &str) -> String {
    format!("{what}, which this build does not include (build with --features {feature})")
}

fn store(
    get: &impl Fn(&str) -> Option<String>,
    region: &str,
    warnings: &mut Vec<String>,
) -> Result<Settings, String> {
    if let Some(url) = get("DATABASE_URL") {
        for name in ["VECTOR_BUCKET", "STATE_BUCKET"] {
            if get(name).is_some() {
                warnings.push(format!("{name} is ignored: DATABASE_URL selects the store"));
            }
        }
        if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(
                    "DATABASE_URL=sqlite: needs a file path, e.g. sqlite:./data/memory.db".into(),
                );
            }
            #[cfg(feature = "sqlite")]
            return Ok(Settings::Sqlite {
                path: PathBuf::from(path),
            });
            #[cfg(not(feature = "sqlite"))]
            return Err(unavailable("DATABASE_URL selects SQLite", "sqlite"));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return postgres(url, get);
        }
        // Only the scheme: the rest may hold a password.
        let scheme = url.split(':').next().unwrap_or_default();
        return Err(format!(
            "DATABASE_URL must start with sqlite:, postgres:// or postgresql://, got \"{scheme}:…\""
        ));
    }
    let vector = get("VECTOR_BUCKET");
    let state = get("STATE_BUCKET");
    match (vector, state) {
        (None, None) => Err(
            "no storage is configured: set DATABASE_URL=sqlite:PATH for an \
                             embedded file, DATABASE_URL=postgres://… for PostgreSQL, or \
                             VECTOR_BUCKET and STATE_BUCKET for S3"
                .into(),
        ),
        (None, Some(_)) => Err("VECTOR_BUCKET is required".into()),
        (Some(_), None) => Err("STATE_BUCKET is required".into()),
        (Some(vector_bucket), Some(state_bucket)) => s3(get, region, vector_bucket, state_bucket),
    }
}

#[cfg(feature = "s3")]
fn s3(
    get: &impl Fn(&str) -> Option<String>,
    region: &str,
    vector_bucket: String,
    state_bucket: String,
) -> Result<Settings, String> {
    let vector_index = get("VECTOR_INDEX").unwrap_or_else(|| "memories".into());
    for (name, value) in [
        ("VECTOR_BUCKET", &vector_bucket),
        ("VECTOR_INDEX", &vector_index),
        ("STATE_BUCKET", &state_bucket),
    ] {
        if !is_bucket_name(value) {
            return Err(format!(
                "{name} must be 3-63 characters of lowercase letters, digits, '.' and '-', \
                 starting and ending with a letter or digit, got \"{value}\""
            ));
        }
    }
    let flush_ms = match get("STATS_FLUSH_MS") {
        None => 30_000,
        Some(raw) => positive(&raw, "STATS_FLUSH_MS")?,
    };
    let compact_threshold = match get("STATS_COMPACT_THRESHOLD") {
        None => 20,
        Some(raw) => positive(&raw, "STATS_COMPACT_THRESHOLD")?,
    };
    let force_path_style = flag(get, "S3_FORCE_PATH_STYLE")?;
    Ok(Settings::S3(crate::store::s3::S3Settings {
        vector_bucket,
        vector_index,
        state_bucket,
        region: region.to_owned(),
        force_path_style,
        flush_every: std::time::Duration::from_millis(flush_ms as u64),
        compact_threshold,
    }))
}

#[cfg(not(feature = "s3"))]
fn s3(
    _: &impl Fn(&str) -> Option<String>,
    _: &str,
    _: String,
    _: String,
) -> Result<Settings, String> {
    Err(unavailable(
        "VECTOR_BUCKET and STATE_BUCKET select the S3 store",
        "s3",
    ))
}

/// The naming rule S3 Vectors buckets and indexes share with general-purpose buckets.
#[cfg(feature = "s3")]
fn is_bucket_name(name: &str) -> bool {
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (3..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && edge_ok(name.chars().next())
        && edge_ok(name.chars().last())
}

#[cfg(feature = "kb")]
fn knowledge_base(
    get: &impl Fn(&str) -> Option<String>,
    region: &str,
    _: &mut Vec<String>,
) -> Result<Option<KnowledgeBase>, String> {
    let Some(id) = get("KNOWLEDGE_BASE_ID") else {
        return Ok(None);
    };
    let is_id = id.len() == 10 && id.chars().all(|c| c.is_ascii_alphanumeric());
    if !is_id && !id.starts_with("arn:") {
        return Err(format!(
            "KNOWLEDGE_BASE_ID must be a knowledge base id (10 letters or digits) or its ARN, \
             got \"{id}\""
        ));
    }
    Ok(Some(KnowledgeBase {
        id,
        region: region.to_owned(),
    }))
}

#[cfg(not(feature = "kb"))]
fn knowledge_base(
    get: &impl Fn(&str) -> Option<String>,
    _: &str,
    warnings: &mut Vec<String>,
) -> Result<Option<KnowledgeBase>, String> {
    if get("KNOWLEDGE_BASE_ID").is_some() {
        warnings.push(
            "KNOWLEDGE_BASE_ID is ignored: search_docs is not available in this build (build \
             with --features kb)"
                .into(),
        );
    }
    Ok(None)
}

#[cfg(feature = "postgres")]
fn postgres(url: String, get: &impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let max_connections = match get("DATABASE_POOL_SIZE") {
        None => 10,
        Some(raw) => positive(&raw, "DATABASE_POOL_SIZE")?
            .try_into()
            .map_err(|_| format!("DATABASE_POOL_SIZE is too large, got \"{raw}\""))?,
    };
    let statement_timeout_ms = match get("DATABASE_STATEMENT_TIMEOUT_MS") {
        None => 10_000,
        Some(raw) => positive(&raw, "DATABASE_STATEMENT_TIMEOUT_MS")? as u64,
    };
    Ok(Settings::Postgres {
        url,
        pool: crate::store::postgres::PoolSettings {
            max_connections,
            statement_timeout_ms,
        },
    })
}

#[cfg(not(feature = "postgres"))]
fn postgres(_: String, _: &impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
    Err(unavailable("DATABASE_URL selects PostgreSQL", "postgres"))
}

fn embedder(get: &impl Fn(&str) -> Option<String>, region: &str) -> Result<EmbedderConfig, String> {
    let provider = get("EMBEDDING_PROVIDER");
    match provider.as_deref().unwrap_or("bedrock") {
        "bedrock" => bedrock(get, region, provider.is_none()),
        "local" => local(get),
        "openai" => openai(get),
        other => Err(format!(
            "EMBEDDING_PROVIDER must be \"bedrock\", \"openai\" or \"local\", got \"{other}\""
        )),
    }
}

#[cfg(feature = "bedrock")]
fn bedrock(
    get: &impl Fn(&str) -> Option<String>,
    region: &str,
    _defaulted: bool,
) -> Result<EmbedderConfig, String> {
    let model = get("EMBEDDING_MODEL").unwrap_or_else(|| "amazon.titan-embed-text-v2:0".into());
    let dimension = match get("EMBEDDING_DIM") {
        None => 1024,
        Some(raw) => positive(&raw, "EMBEDDING_DIM")?,
    };
    // Titan v2 is asked for its width explicitly and offers only these three.
    if model.starts_with("amazon.titan-embed-text-v2") && ![256, 512, 1024].contains(&dimension) {
        return Err(format!(
            "EMBEDDING_DIM must be 256, 512 or 1024 for {model}, got \"{dimension}\""
        ));
    }
    Ok(EmbedderConfig::Bedrock {
        region: region.to_owned(),
        model,
        dimension,
    })
}

#[cfg(not(feature = "bedrock"))]
fn bedrock(
    _: &impl Fn(&str) -> Option<String>,
    _: &str,
    defaulted: bool,
) -> Result<EmbedderConfig, String> {
    Err(if defaulted {
        "EMBEDDING_PROVIDER defaults to bedrock, which this build does not include; set it to \
         openai or local"
            .into()
    } else {
        unavailable("EMBEDDING_PROVIDER=bedrock", "bedrock")
    })
}

#[cfg(feature = "openai")]
fn openai(get: &impl Fn(&str) -> Option<String>) -> Result<EmbedderConfig, String> {
    let base_url = get("EMBEDDING_BASE_URL").ok_or("EMBEDDING_BASE_URL is required")?;
    if !is_plain_http_base(&base_url) {
        return Err(
            "EMBEDDING_BASE_URL must be an HTTP(S) base URL without credentials, query or fragment"
                .into(),
        );
    }
    let api_key = get("EMBEDDING_API_KEY").ok_or("EMBEDDING_API_KEY is required")?;
    let model = get("EMBEDDING_MODEL").unwrap_or_else(|| "text-embedding-3-small".into());
    let dimension = match get("EMBEDDING_DIM") {
        None => 1536,
        Some(raw) => positive(&raw, "EMBEDDING_DIM")?,
    };
    Ok(EmbedderConfig::OpenAi {
        base_url: base_url.trim_end_matches('/').to_owned(),
        api_key,
        model,
        dimension,
    })
}

#[cfg(not(feature = "openai"))]
fn openai(_: &impl Fn(&str) -> Option<String>) -> Result<EmbedderConfig, String> {
    Err(unavailable("EMBEDDING_PROVIDER=openai", "openai"))
}

#[cfg(feature = "local")]
fn local(get: &impl Fn(&str) -> Option<String>) -> Result<EmbedderConfig, String> {
    let model_dir = get("EMBEDDING_MODEL").ok_or(
        "EMBEDDING_MODEL is required for EMBEDDING_PROVIDER=local: the path of a \
         sentence-transformers model directory (`make model` puts all-MiniLM-L6-v2 in \
         .models/all-MiniLM-L6-v2)",
    )?;
    let dimension = get("EMBEDDING_DIM")
        .map(|raw| positive(&raw, "EMBEDDING_DIM"))
        .transpose()?;
    Ok(EmbedderConfig::Local {
        model_dir: PathBuf::from(model_dir),
        dimension,
    })
}

#[cfg(not(feature = "local"))]
fn local(_: &impl Fn(&str) -> Option<String>) -> Result<EmbedderConfig, String> {
    Err(unavailable("EMBEDDING_PROVIDER=local", "local"))
}

#[cfg(feature = "openai")]
fn is_plain_http_base(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    !authority.is_empty() && !authority.contains('@') && !url.contains(['?', '#'])
}

#[cfg(all(test, feature = "sqlite", feature = "openai"))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn load(pairs: &[(&str, &str)]) -> Result<Config, String> {
        let vars: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|name| vars.get(name).cloned())
    }

    const BASE: [(&str, &str); 4] = [
        ("DATABASE_URL", "sqlite:/tmp/m.db"),
        ("EMBEDDING_PROVIDER", "openai"),
        ("EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1/"),
        ("EMBEDDING_API_KEY", "k"),
    ];

    fn with(extra: &[(&'static str, &'static str)]) -> Result<Config, String> {
        let mut pairs: Vec<(&str, &str)> = BASE.to_vec();
        pairs.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
        pairs.extend_from_slice(extra);
        load(&pairs)
    }

    #[test]
    // Without the postgres feature the store pattern below cannot fail.
    #[allow(irrefutable_let_patterns)]
    fn defaults() {
        let c = with(&[]).unwrap();
        assert_eq!(c.port, 3000);
        assert_eq!(c.min_similarity, 0.1);
        assert_eq!(c.body_limit, 1024 * 1024);
        assert!(c.api_key.is_none() && c.allowed_origins.is_empty());
        let EmbedderConfig::OpenAi {
            base_url,
            model,
            dimension,
            ..
        } = c.embedder
        else {
            panic!("not the openai embedder");
        };
        assert_eq!(base_url, "http://127.0.0.1:9/v1");
        assert_eq!(
            (model.as_str(), dimension),
            ("text-embedding-3-small", 1536)
        );
        let Settings::Sqlite { path } = c.store else {
            panic!("not the SQLite store");
        };
        assert_eq!(path, PathBuf::from("/tmp/m.db"));
    }

    #[test]
    fn port_must_be_in_range() {
        for bad in ["0", "65536", "-1", "3.0", "abc"] {
            let err = with(&[("PORT", bad)]).err().unwrap();
            assert_eq!(
                err,
                format!("PORT must be an integer between 1 and 65535, got \"{bad}\"")
            );
        }
        assert_eq!(with(&[("PORT", " 8080 ")]).unwrap().port, 8080);
    }

    #[test]
    fn min_similarity_is_in_the_open_closed_unit_interval() {
        for bad in ["0", "-0.5", "2", "many", "NaN", "inf"] {
            let err = with(&[("RECALL_MIN_SIMILARITY", bad)]).err().unwrap();
            assert!(
                err.starts_with("RECALL_MIN_SIMILARITY must be greater than 0 and at most 1"),
                "{err}"
            );
        }
        assert_eq!(
            with(&[("RECALL_MIN_SIMILARITY", "1")])
                .unwrap()
                .min_similarity,
            1.0
        );
        assert_eq!(
            with(&[("RECALL_MIN_SIMILARITY", "0.25")])
                .unwrap()
                .min_similarity,
            0.25
        );
    }

    #[test]
    fn storage_refusals_name_the_variables() {
        let none = load(&BASE[1..]).err().unwrap();
        assert!(none.starts_with("no storage is configured") && none.contains("DATABASE_URL"));
        let only_state = load(&[&BASE[1..], &[("STATE_BUCKET", "s")]].concat())
            .err()
            .unwrap();
        assert_eq!(only_state, "VECTOR_BUCKET is required");
        let only_vector = load(&[&BASE[1..], &[("VECTOR_BUCKET", "v")]].concat())
            .err()
            .unwrap();
        assert_eq!(only_vector, "STATE_BUCKET is required");
        let pg = with(&[("DATABASE_URL", "postgres://u:hunter2@db/x")]);
        if cfg!(feature = "postgres") {
            assert!(pg.is_ok());
        } else {
            let pg = pg.err().unwrap();
            assert!(pg.contains("PostgreSQL") && !pg.contains("hunter2"), "{pg}");
        }
        let odd = with(&[("DATABASE_URL", "mysql://u:hunter2@db/x")])
            .err()
            .unwrap();
        assert!(odd.starts_with("DATABASE_URL must start with") && !odd.contains("hunter2"));
        assert!(
            with(&[("DATABASE_URL", "sqlite:")])
                .err()
                .unwrap()
                .contains("needs a file path")
        );
    }

    #[test]
    fn embedding_refusals_name_the_variables() {
        match load(&[BASE[0]]) {
            #[cfg(feature = "bedrock")]
            Ok(Config {
                embedder:
                    EmbedderConfig::Bedrock {
                        model,
                        dimension,
                        region,
                    },
                ..
            }) => assert_eq!(
                (model.as_str(), dimension, region.as_str()),
                ("amazon.titan-embed-text-v2:0", 1024, "ap-northeast-2")
            ),
            Err(default) => assert!(
                !cfg!(feature = "bedrock")
                    && default.starts_with("EMBEDDING_PROVIDER defaults to bedrock"),
                "{default}"
            ),
            #[allow(unreachable_patterns)]
            Ok(_) => panic!("the default provider is bedrock"),
        }
        let unknown = with(&[("EMBEDDING_PROVIDER", "cohere")]).err().unwrap();
        assert!(unknown.starts_with("EMBEDDING_PROVIDER must be"));
        let no_base = load(&[BASE[0], BASE[1], BASE[3]]).err().unwrap();
        assert_eq!(no_base, "EMBEDDING_BASE_URL is required");
        let no_key = load(&[BASE[0], BASE[1], BASE[2]]).err().unwrap();
        assert_eq!(no_key, "EMBEDDING_API_KEY is required");
        for bad in [
            "ftp://x",
            "http://user:pw@host/v1",
            "https://h/v1?x=1",
            "https://h/v1#f",
            "http://",
        ] {
            let err = with(&[("EMBEDDING_BASE_URL", bad)]).err().unwrap();
            assert!(
                err.starts_with("EMBEDDING_BASE_URL must be an HTTP(S) base URL"),
                "{bad}"
            );
        }
        let dim = with(&[("EMBEDDING_DIM", "0")]).err().unwrap();
        assert_eq!(dim, "EMBEDDING_DIM must be a positive integer, got \"0\"");
        let local = with(&[("EMBEDDING_PROVIDER", "local")]).err().unwrap();
        assert!(
            local.starts_with("EMBEDDING_MODEL is required for EMBEDDING_PROVIDER=local"),
            "{local}"
        );
    }

    #[test]
    fn settings_for_other_backends_are_ignored_with_a_warning() {
        let c = with(&[
            ("KNOWLEDGE_BASE_ID", "KB12345678"),
            ("STATS_FLUSH_MS", "100"),
            ("VECTOR_BUCKET", "v"),
        ])
        .unwrap();
        assert!(c.warnings[0].starts_with("VECTOR_BUCKET is ignored"));
        assert!(
            c.warnings
                .last()
                .unwrap()
                .starts_with("STATS_FLUSH_MS is ignored")
        );
        assert_eq!(c.knowledge_base.is_some(), cfg!(feature = "kb"));
        assert_eq!(
            c.warnings
                .iter()
                .any(|w| w.starts_with("KNOWLEDGE_BASE_ID is ignored")),
            !cfg!(feature = "kb")
        );
        let err = with(&[("STATS_FLUSH_MS", "soon")]).err().unwrap();
        assert_eq!(
            err,
            "STATS_FLUSH_MS must be a positive integer, got \"soon\""
        );
    }

    #[cfg(feature = "s3")]
    #[test]
    fn the_s3_store_reads_its_buckets_and_counter_settings() {
        let s3 = [
            ("VECTOR_BUCKET", "acme-vectors"),
            ("STATE_BUCKET", "acme-state"),
            ("EMBEDDING_PROVIDER", "openai"),
            ("EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1"),
            ("EMBEDDING_API_KEY", "k"),
        ];
        let c = load(&s3).unwrap();
        let Settings::S3(settings) = &c.store else {
            panic!("not the S3 store");
        };
        assert_eq!(
            (
                settings.vector_index.as_str(),
                settings.region.as_str(),
                settings.flush_every.as_millis(),
                settings.compact_threshold,
                settings.force_path_style
            ),
            ("memories", "ap-northeast-2", 30_000, 20, false)
        );
        assert!(c.store.is_s3() && c.warnings.is_empty());
        let tuned = load(
            &[
                &s3[..],
                &[
                    ("STATS_FLUSH_MS", "500"),
                    ("STATS_COMPACT_THRESHOLD", "3"),
                    ("AWS_REGION", "us-east-1"),
                    ("S3_FORCE_PATH_STYLE", "true"),
                ],
            ]
            .concat(),
        )
        .unwrap();
        let Settings::S3(settings) = &tuned.store else {
            panic!("not the S3 store");
        };
        assert_eq!(
            (
                settings.flush_every.as_millis(),
                settings.compact_threshold,
                settings.region.as_str()
            ),
            (500, 3, "us-east-1")
        );
        assert!(settings.force_path_style);
        for (name, bad) in [
            ("VECTOR_BUCKET", "Acme"),
            ("VECTOR_INDEX", "a_b"),
            ("STATE_BUCKET", "ab"),
            ("STATE_BUCKET", "-acme"),
        ] {
            let err = load(&[&s3[..], &[(name, bad)]].concat()).err().unwrap();
            assert!(
                err.starts_with(&format!("{name} must be 3-63 characters")),
                "{err}"
            );
        }
        let err = load(&[&s3[..], &[("STATS_COMPACT_THRESHOLD", "0")]].concat())
            .err()
            .unwrap();
        assert_eq!(
            err,
            "STATS_COMPACT_THRESHOLD must be a positive integer, got \"0\""
        );
        // DATABASE_URL wins over the buckets, which are then reported as ignored.
        let both = with(&[
            ("VECTOR_BUCKET", "acme-vectors"),
            ("STATE_BUCKET", "acme-state"),
        ])
        .unwrap();
        assert!(!both.store.is_s3() && both.warnings.len() == 2);
    }

    #[cfg(feature = "bedrock")]
    #[test]
    fn titan_v2_offers_three_widths() {
        let bedrock = [BASE[0], ("EMBEDDING_PROVIDER", "bedrock")];
        for good in ["256", "512", "1024"] {
            assert!(load(&[&bedrock[..], &[("EMBEDDING_DIM", good)]].concat()).is_ok());
        }
        let err = load(&[&bedrock[..], &[("EMBEDDING_DIM", "768")]].concat())
            .err()
            .unwrap();
        assert!(
            err.starts_with("EMBEDDING_DIM must be 256, 512 or 1024"),
            "{err}"
        );
    }

    #[cfg(feature = "kb")]
    #[test]
    fn the_knowledge_base_id_is_checked() {
        assert_eq!(
            with(&[("KNOWLEDGE_BASE_ID", "KB12345678")])
                .unwrap()
                .knowledge_base
                .unwrap()
                .id,
            "KB12345678"
        );
        let arn = "arn:aws:bedrock:us-east-1:123456789012:knowledge-base/KB12345678";
        assert!(with(&[("KNOWLEDGE_BASE_ID", arn)]).is_ok());
        let err = with(&[("KNOWLEDGE_BASE_ID", "kb1")]).err().unwrap();
        assert!(err.starts_with("KNOWLEDGE_BASE_ID must be"), "{err}");
        assert!(with(&[]).unwrap().knowledge_base.is_none());
    }

    /// `--help` lists every variable this file reads.
    #[test]
    fn every_variable_read_is_documented() {
        let source = include_str!("config.rs");
        let documented: Vec<&str> = VARIABLES.iter().map(|(name, _, _)| *name).collect();
        // Reads are get(<name>) and flag(get, <name>) / flag(&get, <name>).
        for pattern in ["get(\"", "get, \""] {
            for read in source.split(pattern).skip(1) {
                let name = &read[..read.find('"').unwrap()];
                if name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                    assert!(
                        documented.contains(&name),
                        "{name} is read but not in VARIABLES"
                    );
                }
            }
        }
    }
}
