//! The configuration, read once and validated before the port is bound
//! (docs/configuration.md#configuration-rules). Each part owns its variables and the rules that
//! pick its implementation: `store::Variables`, `embed::Variables`, `library::Variables`;
//! this module declares the server's own, puts them together, and reads them all through
//! clap, so one declaration gives a variable its default, its refusal and its `--help` line.
//! Every refusal is one line naming the variable.
//!
//! Values are trimmed (but for a model's prompts, whose spaces count) and blank means
//! unset. To make that so, the environment is never read by clap itself: each set variable
//! becomes its flag (`PORT=8080` → `--port=8080`) ahead of the command line, which
//! therefore wins; tests pass their own variables the same way (`Config::from_vars`).

use std::net::IpAddr;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use sha2::Digest;

use crate::embed::Numbers;
use crate::library::{self, KnowledgeBase};
use crate::variables::{flag, positive, positive_at_most, text};
pub use crate::variables::{read, refusal};
use crate::{auth, embed, store};

/// Every variable the server reads.
#[derive(clap::Args, Debug, Clone)]
#[group(id = "server")]
pub struct Variables {
    /// port to listen on
    #[arg(long, env = "PORT", value_parser = port, default_value = "3000")]
    pub port: u16,
    /// address to listen on: loopback unless told, so a laptop's memories do not answer its
    /// network (the images set 0.0.0.0)
    #[arg(long, env = "HOST", value_parser = host, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// comma-separated browser origins allowed to call [default: empty]
    #[arg(long, env = "MCP_ALLOWED_ORIGINS", value_parser = text)]
    pub mcp_allowed_origins: Option<String>,
    /// largest request body accepted, in bytes
    #[arg(
        long,
        env = "MCP_BODY_LIMIT_BYTES",
        value_parser = positive("MCP_BODY_LIMIT_BYTES"),
        default_value = "1048576"
    )]
    pub mcp_body_limit_bytes: usize,
    /// how long a client may take to send a request's headers, in milliseconds; a slower one
    /// is disconnected (it also bounds how long an idle connection is kept)
    #[arg(
        long,
        env = "MCP_HEADER_TIMEOUT_MS",
        value_parser = positive("MCP_HEADER_TIMEOUT_MS"),
        default_value = "30000"
    )]
    pub mcp_header_timeout_ms: usize,
    /// how long a client may take to send a request's body, in milliseconds; a slower one is
    /// answered 408
    #[arg(
        long,
        env = "MCP_BODY_TIMEOUT_MS",
        value_parser = positive("MCP_BODY_TIMEOUT_MS"),
        default_value = "30000"
    )]
    pub mcp_body_timeout_ms: usize,
    /// how long a client may take to read an answer, in milliseconds, from the moment the
    /// server must wait for it; past it the connection is closed and the answer freed
    #[arg(
        long,
        env = "MCP_WRITE_TIMEOUT_MS",
        value_parser = positive("MCP_WRITE_TIMEOUT_MS"),
        default_value = "30000"
    )]
    pub mcp_write_timeout_ms: usize,
    /// connections served at once (a request being read, run or answered); past it a
    /// request gets 503 (only /health and /metrics are still answered, a few at a time)
    #[arg(
        long,
        env = "MCP_MAX_CONNECTIONS",
        value_parser = positive_at_most("MCP_MAX_CONNECTIONS", MAX_CONNECTIONS),
        default_value = "256"
    )]
    pub mcp_max_connections: usize,
    /// connections waiting for a request (new, or kept alive between requests); past it
    /// the one waiting longest is closed to make room
    #[arg(
        long,
        env = "MCP_MAX_IDLE_CONNECTIONS",
        value_parser = positive_at_most("MCP_MAX_IDLE_CONNECTIONS", MAX_CONNECTIONS),
        default_value = "4096"
    )]
    pub mcp_max_idle_connections: usize,
    /// how long one tool call may take in all, in milliseconds; past it the call answers a
    /// tool error (each dependency has its own, shorter, timeout)
    #[arg(
        long,
        env = "MCP_REQUEST_TIMEOUT_MS",
        value_parser = positive("MCP_REQUEST_TIMEOUT_MS"),
        default_value = "60000"
    )]
    pub mcp_request_timeout_ms: usize,
    /// the secret that seals what a question to the user carries to its answer (a
    /// conflicting memory, 2026-07-28 clients that can be asked); replicas behind one address
    /// must share it, at least 32 characters [default: random, for this process only]
    #[arg(long, env = "MCP_STATE_KEY", value_parser = state_key, hide_env_values = true)]
    pub mcp_state_key: Option<String>,
    /// region of S3, Bedrock and the knowledge base
    #[arg(long, env = "AWS_REGION", value_parser = text, default_value = "ap-northeast-2")]
    pub aws_region: String,
    /// similarity floor of recall, in (0, 1] [default: measured for each local model
    /// (0.78 multilingual-e5-small, 0.2 all-MiniLM-L6-v2 and others), 0.1 otherwise]
    #[arg(long, env = "RECALL_MIN_SIMILARITY", value_parser = similarity("RECALL_MIN_SIMILARITY"))]
    pub recall_min_similarity: Option<f64>,
    /// top similarity that makes recall confident (HIGH), in (0, 1], at least the floor
    /// [default: 0.87 with multilingual-e5-small, 3x the floor otherwise]
    #[arg(long, env = "RECALL_HIGH_SIMILARITY", value_parser = similarity("RECALL_HIGH_SIMILARITY"))]
    pub recall_high_similarity: Option<f64>,
    /// weight of words against meaning in recall, 0-1 (0 = meaning only); chosen on the
    /// LoCoMo benchmark (BENCHMARKS.md)
    #[arg(
        long,
        env = "RECALL_KEYWORD_WEIGHT",
        value_parser = keyword_weight,
        default_value = "0.5"
    )]
    pub recall_keyword_weight: f64,
    /// label tool-call metrics with the tenant
    #[arg(
        long,
        env = "METRICS_TENANT_LABEL",
        action = clap::ArgAction::Set,
        value_parser = flag("METRICS_TENANT_LABEL"),
        default_value = "false"
    )]
    pub metrics_tenant_label: bool,
    #[command(flatten, next_help_heading = "Authentication")]
    pub auth: auth::Variables,
    #[command(flatten, next_help_heading = "Store")]
    pub store: store::Variables,
    #[command(flatten, next_help_heading = "Embedder")]
    pub embedder: embed::Variables,
    #[command(flatten, next_help_heading = "Documentation library")]
    pub library: library::Variables,
    #[command(flatten, next_help_heading = "Traces")]
    pub traces: crate::traces::Variables,
}

/// What the variables chose. No `Debug`: it holds the API keys.
pub struct Config {
    pub host: IpAddr,
    pub port: u16,
    /// Who may call over HTTP (`auth`).
    pub gate: auth::Gate,
    /// The key sealing a question's state (`tools::conflict`).
    pub state_key: [u8; 32],
    pub allowed_origins: Vec<String>,
    pub body_limit: usize,
    pub timeouts: Timeouts,
    pub max_connections: usize,
    pub max_idle_connections: usize,
    pub store: store::Settings,
    /// How often expired memories are deleted (`store::sweep`).
    pub expiry_sweep: Duration,
    pub embedder: embed::Settings,
    pub knowledge_base: Option<KnowledgeBase>,
    /// What the model is judged by unless the store records a fit for it.
    pub numbers: Numbers,
    pub keyword_weight: f64,
    /// Whether tool-call metrics carry the tenant (one series per tenant: opt-in).
    pub metrics_tenant_label: bool,
    /// Where traces go, if anywhere (`traces`).
    pub traces: crate::traces::Variables,
    /// Settings that were ignored, one line each, for the operator.
    pub warnings: Vec<String>,
}

/// How long the HTTP edge waits for a client, and a tool call for its answer.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub header: Duration,
    pub body: Duration,
    pub write: Duration,
    pub request: Duration,
}

/// The variables alone, without the command line's own flags.
#[derive(Parser)]
#[command(no_binary_name = true)]
struct Environment {
    #[command(flatten)]
    variables: Variables,
}

impl Config {
    pub fn from_env() -> Result<Config, String> {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let environment: Environment = read(Vec::new(), var).map_err(|e| refusal(&e))?;
        environment.variables.resolve()
    }
}

impl Variables {
    /// Each part's choice, and the rules across parts.
    pub fn resolve(self) -> Result<Config, String> {
        let mut warnings = Vec::new();
        let region = self.aws_region;
        let expiry_sweep = Duration::from_secs(self.store.expiry_sweep_seconds as u64);
        let s3 = self.store.chooses_s3();
        let store = self.store.resolve(&region, &mut warnings)?;
        let knowledge_base = self.library.resolve(&region, &mut warnings)?;
        let embedder = self.embedder.resolve(&region, s3)?;
        let (calibration, shipped) = embedder.calibration();
        let (recall_floor, recall_high) = (self.recall_min_similarity, self.recall_high_similarity);
        if let (Some(floor), Some(high)) = (recall_floor, recall_high)
            && high < floor
        {
            return Err(format!(
                "RECALL_HIGH_SIMILARITY ({high}) must be at least RECALL_MIN_SIMILARITY ({floor})"
            ));
        }
        let gate = auth::Gate::open(self.auth)?;
        let state_key = match &self.mcp_state_key {
            Some(secret) => sha2::Sha256::digest(secret.as_bytes()).into(),
            None => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key)
                    .map_err(|e| format!("no randomness for a state key: {e}"))?;
                key
            }
        };
        let allowed_origins = (self.mcp_allowed_origins.iter())
            .flat_map(|raw| raw.split(','))
            .map(|o| o.trim().to_owned())
            .filter(|o| !o.is_empty())
            .collect();
        Ok(Config {
            host: self.host,
            port: self.port,
            gate,
            state_key,
            allowed_origins,
            body_limit: self.mcp_body_limit_bytes,
            timeouts: Timeouts {
                header: milliseconds(self.mcp_header_timeout_ms),
                body: milliseconds(self.mcp_body_timeout_ms),
                write: milliseconds(self.mcp_write_timeout_ms),
                request: milliseconds(self.mcp_request_timeout_ms),
            },
            max_connections: self.mcp_max_connections,
            max_idle_connections: self.mcp_max_idle_connections,
            store,
            expiry_sweep,
            embedder,
            knowledge_base,
            numbers: Numbers {
                calibration,
                shipped,
                floor: recall_floor,
                high: recall_high,
            },
            keyword_weight: self.recall_keyword_weight,
            metrics_tenant_label: self.metrics_tenant_label,
            traces: self.traces,
            warnings,
        })
    }
}

/// The most `MCP_MAX_CONNECTIONS` may be: more than a process could hold open (a file
/// descriptor each).
const MAX_CONNECTIONS: usize = 1_000_000;

fn milliseconds(ms: usize) -> Duration {
    Duration::from_millis(ms as u64)
}

/// The help, listing every variable with its default and, for an operator at the console,
/// never a secret's value.
pub fn help<P: CommandFactory>() -> String {
    P::command()
        .mut_args(|arg| arg.hide_env_values(true))
        .render_help()
        .to_string()
}

fn port(raw: &str) -> Result<u16, String> {
    let raw = raw.trim();
    raw.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("PORT must be an integer between 1 and 65535, got \"{raw}\""))
}

fn host(raw: &str) -> Result<IpAddr, String> {
    let raw = raw.trim();
    raw.parse()
        .map_err(|_| format!("HOST must be an IP address to listen on, got \"{raw}\""))
}

fn similarity(name: &'static str) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |raw| {
        let raw = raw.trim();
        raw.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0 && *v <= 1.0)
            .ok_or_else(|| format!("{name} must be greater than 0 and at most 1, got \"{raw}\""))
    }
}

fn state_key(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    match raw.chars().count() >= 32 {
        true => Ok(raw.to_owned()),
        false => Err("MCP_STATE_KEY must be at least 32 characters (a random secret)".into()),
    }
}

fn keyword_weight(raw: &str) -> Result<f64, String> {
    let raw = raw.trim();
    raw.parse::<f64>()
        .ok()
        .filter(|v| (0.0..=1.0).contains(v))
        .ok_or_else(|| format!("RECALL_KEYWORD_WEIGHT must be between 0 and 1, got \"{raw}\""))
}

#[cfg(all(test, feature = "sqlite", feature = "openai"))]
mod tests;
