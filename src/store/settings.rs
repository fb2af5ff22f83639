//! Which store serves this process: the store's own variables, and the rules that pick one
//! store from them. Every variable is declared in every build, so `--help` lists it and a
//! build without its store refuses it by name.

#[cfg(feature = "sqlite")]
use std::path::Path;
use std::path::PathBuf;

use crate::search::VectorHome;
use crate::search::cache::Indexing;
use crate::variables::{flag, positive, text};

/// The store's variables as given, each validated on its own.
#[derive(clap::Args, Debug, Clone, Default)]
#[group(id = "store")]
pub struct Variables {
    /// sqlite:<path> for the embedded file, or postgres://… ; unset means S3 [default: unset]
    #[arg(long, env = "DATABASE_URL", value_parser = text, hide_env_values = true)]
    pub database_url: Option<String>,
    /// PostgreSQL connections per process
    #[arg(
        long,
        env = "DATABASE_POOL_SIZE",
        value_parser = positive("DATABASE_POOL_SIZE"),
        default_value = "10"
    )]
    pub database_pool_size: usize,
    /// PostgreSQL statement timeout, in milliseconds
    #[arg(
        long,
        env = "DATABASE_STATEMENT_TIMEOUT_MS",
        value_parser = positive("DATABASE_STATEMENT_TIMEOUT_MS"),
        default_value = "10000"
    )]
    pub database_statement_timeout_ms: usize,
    /// what the tenants' in-process search indexes may hold together, in MiB (SQLite and
    /// PostgreSQL); past it the least recently used tenants are dropped, to be rebuilt
    #[arg(
        long,
        env = "INDEX_BUDGET_MB",
        value_parser = positive("INDEX_BUDGET_MB"),
        default_value = "512"
    )]
    pub index_budget_mb: usize,
    /// where a large tenant's index keeps its exact vectors (SQLite and PostgreSQL): an
    /// unnamed file each, which the process maps and the kernel may page out under memory
    /// pressure; `memory` keeps them on the heap [default: the SQLite file's directory, or
    /// the temp directory]
    #[arg(long, env = "INDEX_VECTORS_DIR", value_parser = text)]
    pub index_vectors_dir: Option<String>,
    /// how often expired memories are deleted, in seconds (they are invisible from the
    /// moment they expire either way)
    #[arg(
        long,
        env = "EXPIRY_SWEEP_SECONDS",
        value_parser = positive("EXPIRY_SWEEP_SECONDS"),
        default_value = "60"
    )]
    pub expiry_sweep_seconds: usize,
    /// S3 Vectors bucket (S3 store) [default: unset]
    #[arg(long, env = "VECTOR_BUCKET", value_parser = text)]
    pub vector_bucket: Option<String>,
    /// S3 Vectors index (S3 store)
    #[arg(long, env = "VECTOR_INDEX", value_parser = text, default_value = "memories")]
    pub vector_index: String,
    /// S3 bucket for the recency index and counters (S3 store) [default: unset]
    #[arg(long, env = "STATE_BUCKET", value_parser = text)]
    pub state_bucket: Option<String>,
    /// how often counters are flushed, in milliseconds (S3 store) [default: 30000]
    #[arg(long, env = "STATS_FLUSH_MS", value_parser = positive("STATS_FLUSH_MS"))]
    pub stats_flush_ms: Option<usize>,
    /// counter shards that trigger compaction (S3 store) [default: 20]
    #[arg(
        long,
        env = "STATS_COMPACT_THRESHOLD",
        value_parser = positive("STATS_COMPACT_THRESHOLD")
    )]
    pub stats_compact_threshold: Option<usize>,
    /// path-style S3 addressing, for emulators
    #[arg(
        long,
        env = "S3_FORCE_PATH_STYLE",
        action = clap::ArgAction::Set,
        value_parser = flag("S3_FORCE_PATH_STYLE"),
        default_value = "false"
    )]
    pub s3_force_path_style: bool,
}

/// The store chosen.
pub enum Settings {
    #[cfg(feature = "sqlite")]
    Sqlite { path: PathBuf, indexing: Indexing },
    /// The URL holds credentials: never print it.
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        pool: super::postgres::PoolSettings,
    },
    #[cfg(feature = "s3")]
    S3(super::s3::S3Settings),
}

impl Variables {
    /// The store these variables choose; `region` is the one AWS region of the process.
    /// A setting for another store than the chosen one is ignored with a line in
    /// `warnings`.
    pub fn resolve(self, region: &str, warnings: &mut Vec<String>) -> Result<Settings, String> {
        let s3_chosen = self.database_url.is_none();
        for (name, given) in [
            ("STATS_FLUSH_MS", self.stats_flush_ms.is_some()),
            (
                "STATS_COMPACT_THRESHOLD",
                self.stats_compact_threshold.is_some(),
            ),
        ] {
            if given && !s3_chosen {
                warnings.push(format!(
                    "{name} is ignored: it applies to the S3 store only"
                ));
            }
        }
        if let Some(url) = self.database_url.clone() {
            for (name, given) in [
                ("VECTOR_BUCKET", self.vector_bucket.is_some()),
                ("STATE_BUCKET", self.state_bucket.is_some()),
            ] {
                if given {
                    warnings.push(format!("{name} is ignored: DATABASE_URL selects the store"));
                }
            }
            return self.database(url);
        }
        match (self.vector_bucket.clone(), self.state_bucket.clone()) {
            (None, None) => self.zero_setup(),
            (None, Some(_)) => Err("VECTOR_BUCKET is required".into()),
            (Some(_), None) => Err("STATE_BUCKET is required".into()),
            (Some(vector_bucket), Some(state_bucket)) => {
                self.s3(region, vector_bucket, state_bucket)
            }
        }
    }

    /// Nothing chosen: the embedded file in the user's data directory, in a build with SQLite.
    fn zero_setup(self) -> Result<Settings, String> {
        let nothing = "no storage is configured: set DATABASE_URL=sqlite:PATH for an embedded \
                       file, DATABASE_URL=postgres://… for PostgreSQL, or VECTOR_BUCKET and \
                       STATE_BUCKET for S3";
        #[cfg(feature = "sqlite")]
        if let Some(dir) = crate::variables::data_dir() {
            let path = dir.join("memory.db");
            return Ok(Settings::Sqlite {
                indexing: self.indexing(beside(&path)),
                path,
            });
        }
        Err(nothing.into())
    }

    /// Whether these variables choose the S3 store (which implies Bedrock's embeddings by
    /// default).
    pub fn chooses_s3(&self) -> bool {
        self.database_url.is_none() && (self.vector_bucket.is_some() || self.state_bucket.is_some())
    }

    /// `INDEX_BUDGET_MB` in bytes, and `INDEX_VECTORS_DIR` or else `default`.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
    fn indexing(&self, default: PathBuf) -> Indexing {
        let vectors = match self.index_vectors_dir.as_deref() {
            Some("memory") => VectorHome::Memory,
            Some(dir) => VectorHome::Files {
                dir: dir.into(),
                chosen: true,
            },
            None => VectorHome::Files {
                dir: default,
                chosen: false,
            },
        };
        Indexing {
            budget: self.index_budget_mb.saturating_mul(1 << 20),
            vectors,
            map_from: crate::search::exact::FROM_BYTES,
        }
    }

    fn database(self, url: String) -> Result<Settings, String> {
        if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(
                    "DATABASE_URL=sqlite: needs a file path, e.g. sqlite:./data/memory.db".into(),
                );
            }
            #[cfg(feature = "sqlite")]
            return Ok(Settings::Sqlite {
                indexing: self.indexing(beside(Path::new(path))),
                path: PathBuf::from(path),
            });
            #[cfg(not(feature = "sqlite"))]
            return Err(crate::variables::unavailable(
                "DATABASE_URL selects SQLite",
                "sqlite",
            ));
        }
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return self.postgres(url);
        }
        // Only the scheme: the rest may hold a password.
        let scheme = url.split(':').next().unwrap_or_default();
        Err(format!(
            "DATABASE_URL must start with sqlite:, postgres:// or postgresql://, got \"{scheme}:…\""
        ))
    }

    cfg_if::cfg_if! {
        if #[cfg(feature = "postgres")] {
            fn postgres(self, url: String) -> Result<Settings, String> {
                let max_connections = u32::try_from(self.database_pool_size).map_err(|_| {
                    format!(
                        "DATABASE_POOL_SIZE is too large, got \"{}\"",
                        self.database_pool_size
                    )
                })?;
                Ok(Settings::Postgres {
                    url,
                    pool: super::postgres::PoolSettings {
                        max_connections,
                        statement_timeout_ms: self.database_statement_timeout_ms as u64,
                        indexing: self.indexing(std::env::temp_dir()),
                    },
                })
            }
        } else {
            fn postgres(self, _: String) -> Result<Settings, String> {
                Err(crate::variables::unavailable(
                    "DATABASE_URL selects PostgreSQL",
                    "postgres",
                ))
            }
        }
    }

    cfg_if::cfg_if! {
        if #[cfg(feature = "s3")] {
            fn s3(
                self,
                region: &str,
                vector_bucket: String,
                state_bucket: String,
            ) -> Result<Settings, String> {
                for (name, value) in [
                    ("VECTOR_BUCKET", &vector_bucket),
                    ("VECTOR_INDEX", &self.vector_index),
                    ("STATE_BUCKET", &state_bucket),
                ] {
                    if !is_bucket_name(value) {
                        return Err(format!(
                            "{name} must be 3-63 characters of lowercase letters, digits, '.' \
                             and '-', starting and ending with a letter or digit, got \"{value}\""
                        ));
                    }
                }
                Ok(Settings::S3(super::s3::S3Settings {
                    vector_bucket,
                    vector_index: self.vector_index,
                    state_bucket,
                    region: region.to_owned(),
                    force_path_style: self.s3_force_path_style,
                    flush_every: std::time::Duration::from_millis(
                        self.stats_flush_ms.unwrap_or(30_000) as u64
                    ),
                    compact_threshold: self.stats_compact_threshold.unwrap_or(20),
                }))
            }
        } else {
            fn s3(self, _: &str, _: String, _: String) -> Result<Settings, String> {
                Err(crate::variables::unavailable(
                    "VECTOR_BUCKET and STATE_BUCKET select the S3 store",
                    "s3",
                ))
            }
        }
    }
}

/// The directory of the SQLite file at `path`, where its vector files go by default.
#[cfg(feature = "sqlite")]
fn beside(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
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
