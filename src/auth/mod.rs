//! Who may call over HTTP, for which tenants, and to do what (docs/protocol.md#authentication).
//!
//! A bearer credential is one of: the shared `MCP_API_KEY` (any tenant, reads and writes, as
//! before), a key of the keys file (`keys`: its tenants, read-only or not), or an access token
//! of the configured authorization server (`oauth`: its tenant claim and scopes). What it
//! proves is a `Credential`; the tenant a request names must be one it may use
//! (`context::resolve`). With none of them configured every caller is admitted, for any
//! tenant. stdio has no credential: its identity is its configuration.

mod jwks;
pub mod keys;
mod oauth;
mod verified;

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::log;
use crate::variables::text;

pub use oauth::ResourceServer;

/// Every variable of authentication.
#[derive(clap::Args, Debug, Clone)]
#[group(id = "auth")]
pub struct Variables {
    /// one shared bearer token, good for any tenant [default: unset]
    #[arg(long, env = "MCP_API_KEY", value_parser = text, hide_env_values = true)]
    pub mcp_api_key: Option<String>,
    /// the keys file: keys bound to tenants, made by `mcp-memory keys add` and re-read on
    /// SIGHUP [default: unset]
    #[arg(long, env = "MCP_KEYS_FILE", value_parser = text)]
    pub mcp_keys_file: Option<String>,
    /// the authorization server whose access tokens are accepted (its issuer URL); needs
    /// OAUTH_RESOURCE [default: unset]
    #[arg(long, env = "OAUTH_ISSUER", value_parser = text)]
    pub oauth_issuer: Option<String>,
    /// this server's resource URI, as clients reach it (e.g. https://memory.example.com/mcp):
    /// what tokens must be issued for [default: unset]
    #[arg(long, env = "OAUTH_RESOURCE", value_parser = text)]
    pub oauth_resource: Option<String>,
    /// the `aud` tokens carry, when the authorization server does not use the resource URI
    /// (Entra ID: the application's client id) [default: OAUTH_RESOURCE]
    #[arg(long, env = "OAUTH_AUDIENCE", value_parser = text)]
    pub oauth_audience: Option<String>,
    /// the claim holding the tenant or the list of tenants a token may use; a dotted path
    /// reaches into objects
    #[arg(long, env = "OAUTH_TENANT_CLAIM", value_parser = text, default_value = "tenants")]
    pub oauth_tenant_claim: String,
    /// the scope that lets a token recall, list and count memories and search the docs
    #[arg(long, env = "OAUTH_READ_SCOPE", value_parser = text, default_value = "memory:read")]
    pub oauth_read_scope: String,
    /// the scope that lets a token remember and forget
    #[arg(long, env = "OAUTH_WRITE_SCOPE", value_parser = text, default_value = "memory:write")]
    pub oauth_write_scope: String,
    /// the scope that lets a token act for any tenant (a platform's gateway)
    #[arg(
        long,
        env = "OAUTH_ANY_TENANT_SCOPE",
        value_parser = text,
        default_value = "memory:any-tenant"
    )]
    pub oauth_any_tenant_scope: String,
    /// where the issuer's signing keys are, when its metadata does not say [default: from
    /// the issuer's RFC 8414 or OpenID metadata]
    #[arg(long, env = "OAUTH_JWKS_URI", value_parser = text)]
    pub oauth_jwks_uri: Option<String>,
}

/// What a credential lets a caller do with the memories of its tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub read: bool,
    pub write: bool,
}

impl Access {
    pub const FULL: Access = Access {
        read: true,
        write: true,
    };

    /// Whether a tool that `writes` (or only reads) may run.
    pub fn allows(self, writes: bool) -> bool {
        match writes {
            true => self.write,
            false => self.read,
        }
    }
}

/// What a request's credential proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// Who it is, as memories record it and logs name it (`key:NAME`, `oauth:SUB`); None for
    /// the shared key and for an open server.
    pub name: Option<String>,
    pub tenants: Tenants,
    pub access: Access,
}

/// The tenants a credential may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tenants {
    Any,
    Only(Vec<String>),
}

impl Credential {
    /// An open server's caller, and the shared key's: any tenant, reads and writes.
    pub fn anyone() -> Credential {
        Credential {
            name: None,
            tenants: Tenants::Any,
            access: Access::FULL,
        }
    }
}

/// The longest credential name memories record, in bytes: a subject past it is cut (at a
/// character), which keeps it within every store's bounds.
pub const MAX_NAME_BYTES: usize = 256;

/// `kind:who`, at most `MAX_NAME_BYTES`, its control characters replaced (U+FFFD): a name is
/// written to every store and export as it is, and none of them takes a NUL.
fn name_of(kind: &str, who: &str) -> String {
    let who: String = (who.chars())
        .map(|c| {
            if c.is_control() {
                char::REPLACEMENT_CHARACTER
            } else {
                c
            }
        })
        .collect();
    let mut name = format!("{kind}:{who}");
    if name.len() > MAX_NAME_BYTES {
        let mut end = MAX_NAME_BYTES;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token: 401 without an error code (RFC 6750, section 3.1).
    Missing,
    /// A token that proves nothing: 401 `invalid_token`, with why.
    Invalid(String),
    /// The authorization server's keys could not be had: 503, the deployment's fault, not
    /// the caller's.
    Unavailable(String),
}

/// The configured credentials, checked once per request at the HTTP edge.
pub struct Gate {
    /// The SHA-256 of `MCP_API_KEY`: compared with the token's, so the comparison takes the
    /// same time whatever the token's length.
    shared: Option<[u8; 32]>,
    keys: Option<keys::Keyring>,
    oauth: Option<ResourceServer>,
}

impl Gate {
    /// The variables' choice, checked before the port is bound: the keys file read, the
    /// issuer's and the resource's URLs valid. The issuer itself is asked later (`warm`).
    pub fn open(variables: Variables) -> Result<Gate, String> {
        let keys = (variables.mcp_keys_file.as_ref())
            .map(|path| keys::Keyring::open(PathBuf::from(path)))
            .transpose()?;
        let oauth = oauth::Settings::resolve(&variables)?.map(ResourceServer::new);
        Ok(Gate {
            shared: (variables.mcp_api_key.as_deref()).map(|key| Sha256::digest(key).into()),
            keys,
            oauth,
        })
    }

    /// A gate that admits everyone: stdio's, and commands'.
    pub fn none() -> Gate {
        Gate {
            shared: None,
            keys: None,
            oauth: None,
        }
    }

    pub fn is_open(&self) -> bool {
        self.shared.is_none() && self.keys.is_none() && self.oauth.is_none()
    }

    /// The OAuth resource server, when one is configured.
    pub fn resource_server(&self) -> Option<&ResourceServer> {
        self.oauth.as_ref()
    }

    /// What `authorization` (the header's value, `Bearer <token>`) proves.
    pub async fn admit(&self, authorization: Option<&[u8]>) -> Result<Credential, Refusal> {
        self.admit_token(authorization.and_then(bearer)).await
    }

    /// What the key or access token `token` proves, however it was sent (a bearer header,
    /// or the memory browser's Basic password: `basic_password`).
    pub async fn admit_token(&self, token: Option<&str>) -> Result<Credential, Refusal> {
        if self.is_open() {
            return Ok(Credential::anyone());
        }
        let token = token.ok_or(Refusal::Missing)?;
        // Each check is in constant time in the token (`ct_eq`, the hash of `keys`); a token
        // of one kind is then tried as the next.
        if let Some(shared) = &self.shared
            && bool::from(Sha256::digest(token).as_slice().ct_eq(shared))
        {
            return Ok(Credential::anyone());
        }
        if let Some(keys) = &self.keys
            && let Some(credential) = keys.admit(token)
        {
            return Ok(credential);
        }
        match &self.oauth {
            Some(oauth) if oauth::looks_like_jwt(token) => oauth.admit(token).await,
            _ => Err(Refusal::Invalid(
                "the bearer token is not a key this server knows".into(),
            )),
        }
    }

    /// Reads the keys file again (SIGHUP): how many keys it now holds, or why the keys in
    /// force were kept.
    pub fn reload(&self) -> Option<Result<usize, String>> {
        self.keys.as_ref().map(keys::Keyring::reload)
    }

    /// Fetches the issuer's keys once at start, so the first request does not wait for them;
    /// a failure is reported and tried again when a token arrives.
    pub async fn warm(&self) -> Option<Result<usize, String>> {
        Some(self.oauth.as_ref()?.warm().await)
    }

    /// The startup line: which credentials are accepted.
    pub fn describe(&self) -> String {
        let mut modes = Vec::new();
        if self.shared.is_some() {
            modes.push("MCP_API_KEY (one shared key, any tenant)".to_owned());
        }
        if let Some(keys) = &self.keys {
            modes.push(keys.describe());
        }
        if let Some(oauth) = &self.oauth {
            modes.push(oauth.describe());
        }
        format!("auth: {}", modes.join("; "))
    }

    /// RFC 9728's Protected Resource Metadata, when OAuth is configured.
    pub fn metadata(&self) -> Option<Value> {
        self.oauth.as_ref().map(ResourceServer::metadata)
    }
}

/// Keeps the credentials current while the server runs: the issuer's keys fetched at start,
/// the keys file re-read on each SIGHUP. The SIGHUP handler is in place when this returns,
/// before the port is announced, so a reload sent from then on never ends the process.
pub fn upkeep(gate: Arc<Gate>) -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let hangups = (gate.keys.is_some())
        .then(|| {
            let registered = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
            registered
                .map_err(|e| {
                    log::error(
                        "sighup_unavailable",
                        &e.to_string(),
                        &log::Fields::default(),
                    )
                })
                .ok()
        })
        .flatten();
    async move {
        let reloads = async {
            #[cfg(unix)]
            if let Some(mut hangups) = hangups {
                while hangups.recv().await.is_some() {
                    match gate.reload() {
                        Some(Ok(_)) => log::info("keys_reloaded", &log::Fields::default()),
                        Some(Err(e)) => {
                            log::error("keys_reload_failed", &e, &log::Fields::default())
                        }
                        None => {}
                    }
                }
            }
        };
        let warm = async {
            // A failure is logged where it happens (`jwks`), and tried again on a token.
            if let Some(Ok(_)) = gate.warm().await {
                log::info("oauth_keys_fetched", &log::Fields::default());
            }
        };
        tokio::join!(reloads, warm);
    }
}

/// What follows `scheme` in an Authorization value: the scheme case-insensitive, spaces
/// after it ignored.
fn after_scheme<'a>(value: &'a [u8], scheme: &[u8]) -> Option<&'a [u8]> {
    let space = value.iter().position(|b| *b == b' ')?;
    let (sent, rest) = value.split_at(space);
    sent.eq_ignore_ascii_case(scheme)
        .then(|| rest.trim_ascii_start())
}

/// The token of `Bearer <token>`: spaces after it are not ignored (no credential ends in
/// one).
fn bearer(value: &[u8]) -> Option<&str> {
    let token = std::str::from_utf8(after_scheme(value, b"bearer")?).ok()?;
    (!token.is_empty()).then_some(token)
}

/// The password of `Basic base64(user:password)`, which the memory browser takes as the key
/// or token (the user name is not used); spaces before it ignored, as before a bearer token.
pub fn basic_password(value: &[u8]) -> Option<String> {
    let encoded = after_scheme(value, b"basic")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim_ascii_end())
        .ok()?;
    let pair = String::from_utf8(decoded).ok()?;
    let (_, password) = pair.split_once(':')?;
    let password = password.trim_start_matches(|c: char| c.is_ascii_whitespace());
    (!password.is_empty()).then(|| password.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(key: &str) -> Gate {
        Gate {
            shared: Some(Sha256::digest(key).into()),
            ..Gate::none()
        }
    }

    async fn check(gate: &Gate, value: &str) -> Result<Credential, Refusal> {
        gate.admit(Some(value.as_bytes())).await
    }

    #[tokio::test]
    async fn the_shared_key_is_accepted_in_any_case_of_the_scheme() {
        let gate = shared("s3cret");
        for ok in ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret"] {
            assert_eq!(check(&gate, ok).await, Ok(Credential::anyone()), "{ok}");
        }
    }

    #[tokio::test]
    async fn anything_else_is_refused() {
        let gate = shared("s3cret");
        let long = format!("Bearer {}", "x".repeat(500));
        for bad in ["Bearer wrong", "Bearer s3cret ", "Bearer s", long.as_str()] {
            assert!(
                matches!(check(&gate, bad).await, Err(Refusal::Invalid(_))),
                "{bad}"
            );
        }
        for missing in ["s3cret", "Basic s3cret", "Bearer "] {
            assert_eq!(
                check(&gate, missing).await,
                Err(Refusal::Missing),
                "{missing}"
            );
        }
        assert_eq!(gate.admit(None).await, Err(Refusal::Missing));
    }

    #[test]
    fn a_name_keeps_no_control_character_and_no_more_than_its_bound() {
        assert_eq!(name_of("oauth", "a\u{0}b\nc"), "oauth:a\u{fffd}b\u{fffd}c");
        let long = name_of("oauth", &"가".repeat(200));
        assert!(long.len() <= MAX_NAME_BYTES && long.len() > MAX_NAME_BYTES - 3);
    }

    #[test]
    fn a_basic_credential_gives_its_password() {
        let encode = |pair: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        };
        assert_eq!(
            basic_password(encode("me:s3cret:x").as_bytes()).as_deref(),
            Some("s3cret:x")
        );
        assert_eq!(
            basic_password(encode(":키").as_bytes()).as_deref(),
            Some("키")
        );
        for refused in [
            encode("me:"),
            encode("no-colon"),
            "Bearer abc".into(),
            "Basic !!".into(),
        ] {
            assert_eq!(basic_password(refused.as_bytes()), None, "{refused}");
        }
    }

    #[tokio::test]
    async fn an_open_gate_admits_anyone() {
        assert_eq!(Gate::none().admit(None).await, Ok(Credential::anyone()));
    }
}
