//! mcp-memory: an MCP server that gives an agent platform's projects a memory that
//! outlives a run. docs/architecture.md describes the layers; each module's own docs say
//! what it owns.

pub mod app;
pub mod auth;
#[cfg(any(feature = "s3", feature = "bedrock", feature = "kb"))]
pub mod aws;
pub mod calibrate;
pub mod cli;
pub mod config;
pub mod context;
pub mod dedup;
pub mod embed;
pub mod http;
pub mod library;
pub mod log;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod portable;
pub mod ranking;
pub mod search;
pub mod shutdown;
pub mod stdio;
pub mod store;
pub mod tools;
pub mod traces;
pub mod ui;
pub mod variables;

/// The server's name, as `serverInfo` and `--version` give it.
pub const SERVER_NAME: &str = env!("CARGO_PKG_NAME");
/// The one version of the server: Cargo.toml's.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");
