//! A real authorization server for tests (`oidc-provider`, tests/auth/provider.sh), and
//! tokens signed with its own key, for claims it would not issue (expired, another audience…).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The resource the tests' servers are, and their tokens are for.
pub const RESOURCE: &str = "https://memory.test/mcp";

/// The authorization server, a child process.
pub struct Provider {
    child: tokio::process::Child,
    pub port: u16,
    pub issuer: String,
}

impl Provider {
    /// Starts it on `port` (0: any) with the keys of `keys` (made if missing; `rotate` puts a
    /// new one first), once it says it listens.
    pub async fn start(keys: &Path, port: u16, rotate: bool) -> Provider {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/auth/provider.sh");
        let mut command = tokio::process::Command::new("bash");
        command
            .args([script, "run", "--port", &port.to_string(), "--keys"])
            .arg(keys)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if rotate {
            command.arg("--rotate");
        }
        let mut child = command.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the provider did not start within a minute")
            .unwrap()
            .unwrap_or_else(|| {
                panic!("the provider exited: is it installed? `bash {script} --install` (make test does)")
            });
        let port: u16 = line.strip_prefix("listening ").unwrap().parse().unwrap();
        Provider {
            child,
            port,
            issuer: format!("http://127.0.0.1:{port}"),
        }
    }

    /// An access token for `client` with `scope`, for this server's resource.
    pub async fn token(&self, client: &str, scope: &str) -> String {
        let reply: Value = reqwest::Client::new()
            .post(format!("{}/token", self.issuer))
            .basic_auth(client, Some(format!("{client}-secret")))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", scope),
                ("resource", RESOURCE),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        reply["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token for {client}: {reply}"))
            .to_owned()
    }

    pub async fn stop(mut self) {
        self.child.kill().await.unwrap();
    }
}

/// The first (signing) key of a provider's keys file: its id and its private key.
pub fn signing_key(keys: &Path) -> (String, EncodingKey) {
    let all: Value = serde_json::from_str(&std::fs::read_to_string(keys).unwrap()).unwrap();
    let kid = all[0]["jwk"]["kid"].as_str().unwrap().to_owned();
    let pem = all[0]["pem"].as_str().unwrap();
    (kid, EncodingKey::from_rsa_pem(pem.as_bytes()).unwrap())
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Claims as the provider issues them, for `tenants`, changed by `change`.
pub fn claims(issuer: &str, tenants: &[&str], change: impl FnOnce(&mut Value)) -> Value {
    let mut claims = json!({
        "iss": issuer, "aud": RESOURCE, "sub": "forger", "client_id": "forger",
        "scope": "memory:read memory:write", "tenants": tenants,
        "iat": now(), "exp": now() + 600,
    });
    change(&mut claims);
    claims
}

/// A token signed with the provider's own key (as a thief of it, or a broken issuer, would).
pub fn signed(keys: &Path, claims: &Value) -> String {
    let (kid, key) = signing_key(keys);
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid);
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}
