//! mcp-memory: an MCP server that gives an agent platform's projects a memory that
//! outlives a run. See DESIGN.md for the layout; each module's own docs say what it owns.

pub mod app;
#[cfg(any(feature = "s3", feature = "bedrock", feature = "kb"))]
pub mod aws;
pub mod cli;
pub mod config;
pub mod context;
pub mod dedup;
pub mod docs;
pub mod embed;
pub mod http;
pub mod keywords;
pub mod log;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod ranking;
pub mod shutdown;
pub mod store;
pub mod tools;
