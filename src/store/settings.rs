//! Which store serves this process, as the configuration chose it.

#[cfg(feature = "sqlite")]
use std::path::PathBuf;

pub enum Settings {
    #[cfg(feature = "sqlite")]
    Sqlite { path: PathBuf },
    /// The URL holds credentials: never print it.
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
        pool: super::postgres::PoolSettings,
    },
    #[cfg(feature = "s3")]
    S3(super::s3::S3Settings),
}

impl Settings {
    /// The S3 store: only it reads `STATS_*`.
    pub fn is_s3(&self) -> bool {
        match self {
            #[cfg(feature = "s3")]
            Settings::S3(_) => true,
            #[allow(unreachable_patterns)] // in a build whose only store is S3
            _ => false,
        }
    }
}
