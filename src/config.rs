//! Environment → validated configuration, before the port is bound (BEHAVIOR.md §11,
//! DESIGN.md §3). Every refusal is one line naming the variable. This module and the
//! store/embed constructors are the only places that know which features were compiled in.

use std::net::IpAddr;
#[cfg(any(feature = "sqlite", feature = "local"))]
use std::path::PathBuf;

/// Which store serves this process.
pub enum StoreConfig {
    #[cfg(feature = "sqlite")]
    Sqlite { path: PathBuf },
    /// The URL holds credentials: never print it.
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        pool: crate::store::postgres::PoolSettings,
    },
}

/// Which embedder serves this process.
pub enum EmbedderConfig {
    #[cfg(feature = "openai")]
    OpenAi {
        base_url: String,
        api_key: String,
        model: String,
        dimension: usize,
    },
    /// A sentence-transformers model directory; the width defaults to the model's.
    #[cfg(feature = "local")]
    Local {
        model_dir: PathBuf,
        dimension: Option<usize>,
    },
}

/// No `Debug`: it holds the API keys.
pub struct Config {
    pub host: IpAddr,
    pub port: u16,
    pub api_key: Option<String>,
    pub allowed_origins: Vec<String>,
    pub body_limit: usize,
    pub store: StoreConfig,
    pub embedder: EmbedderConfig,
    pub min_similarity: f64,
    /// Settings that were ignored, one line each, for the operator.
    pub warnings: Vec<String>,
}

const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

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

        let store = store(&get, &mut warnings)?;

        if get("KNOWLEDGE_BASE_ID").is_some() {
            warnings.push(
                "KNOWLEDGE_BASE_ID is ignored: search_docs is not available in this build".into(),
            );
        }

        let embedder = embedder(&get)?;

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

        for name in ["STATS_FLUSH_MS", "STATS_COMPACT_THRESHOLD"] {
            if let Some(raw) = get(name) {
                positive(&raw, name)?;
                warnings.push(format!(
                    "{name} is ignored: it applies to the S3 store only"
                ));
            }
        }

        Ok(Config {
            host,
            port,
            api_key,
            allowed_origins,
            body_limit,
            store,
            embedder,
            min_similarity,
            warnings,
        })
    }
}

fn positive(raw: &str, name: &str) -> Result<usize, String> {
    raw.parse::<usize>()
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("{name} must be a positive integer, got \"{raw}\""))
}

/// A choice the operator made that this binary cannot serve: either the feature was left
/// out of the build, or this version does not implement it yet.
fn unavailable(what: &str, feature: &str, compiled: bool) -> String {
    if compiled {
        format!("{what} is not implemented in this version of mcp-memory yet")
    } else {
        format!("{what}, which this build does not include (build with --features {feature})")
    }
}

fn store(
    get: &impl Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Result<StoreConfig, String> {
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
            return Ok(StoreConfig::Sqlite {
                path: PathBuf::from(path),
            });
            #[cfg(not(feature = "sqlite"))]
            return Err(unavailable("DATABASE_URL selects SQLite", "sqlite", false));
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
        (Some(_), Some(_)) => Err(unavailable(
            "VECTOR_BUCKET and STATE_BUCKET select the S3 store",
            "s3",
            cfg!(feature = "s3"),
        )),
    }
}

#[cfg(feature = "postgres")]
fn postgres(url: String, get: &impl Fn(&str) -> Option<String>) -> Result<StoreConfig, String> {
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
    Ok(StoreConfig::Postgres {
        url,
        pool: crate::store::postgres::PoolSettings {
            max_connections,
            statement_timeout_ms,
        },
    })
}

#[cfg(not(feature = "postgres"))]
fn postgres(_: String, _: &impl Fn(&str) -> Option<String>) -> Result<StoreConfig, String> {
    Err(unavailable(
        "DATABASE_URL selects PostgreSQL",
        "postgres",
        false,
    ))
}

fn embedder(get: &impl Fn(&str) -> Option<String>) -> Result<EmbedderConfig, String> {
    let provider = get("EMBEDDING_PROVIDER");
    match provider.as_deref().unwrap_or("bedrock") {
        "bedrock" if provider.is_none() => Err(if cfg!(feature = "bedrock") {
            unavailable("EMBEDDING_PROVIDER defaults to bedrock", "bedrock", true)
        } else {
            "EMBEDDING_PROVIDER defaults to bedrock, which this build does not include; set it \
             to openai"
                .into()
        }),
        "bedrock" => Err(unavailable(
            "EMBEDDING_PROVIDER=bedrock",
            "bedrock",
            cfg!(feature = "bedrock"),
        )),
        "local" => local(get),
        "openai" => openai(get),
        other => Err(format!(
            "EMBEDDING_PROVIDER must be \"bedrock\", \"openai\" or \"local\", got \"{other}\""
        )),
    }
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
    Err(unavailable("EMBEDDING_PROVIDER=openai", "openai", false))
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
    Err(unavailable("EMBEDDING_PROVIDER=local", "local", false))
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
        let StoreConfig::Sqlite { path } = c.store else {
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
        let default = load(&[BASE[0]]).err().unwrap();
        assert!(
            default.starts_with("EMBEDDING_PROVIDER defaults to bedrock"),
            "{default}"
        );
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
        let c = with(&[("KNOWLEDGE_BASE_ID", "kb1"), ("STATS_FLUSH_MS", "100")]).unwrap();
        assert_eq!(c.warnings.len(), 2);
        assert!(c.warnings[0].starts_with("KNOWLEDGE_BASE_ID is ignored"));
        let err = with(&[("STATS_FLUSH_MS", "soon")]).err().unwrap();
        assert_eq!(
            err,
            "STATS_FLUSH_MS must be a positive integer, got \"soon\""
        );
    }
}
