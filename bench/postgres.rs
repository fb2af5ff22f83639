//! What the PostgreSQL benchmarks share: a fresh database on the throw-away server that
//! `scripts/with-postgres.sh` starts (TEST_DATABASE_URL).

use sqlx::Connection;

/// A new, empty database on `server` (a URL ending in a database name); returns its URL.
pub async fn fresh_database(server: &str) -> String {
    let name = format!(
        "bench_{}",
        mcp_memory::memory::new_id(mcp_memory::memory::now_ms()).to_lowercase()
    );
    let mut admin = sqlx::postgres::PgConnection::connect(server).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    format!("{}/{name}", server.rsplit_once('/').unwrap().0)
}
