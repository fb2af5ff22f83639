//! `LOAD_AUTH=oauth`: the server takes only access tokens of a real authorization server
//! (tests/auth/provider.sh, `make test` installs it), and every call carries one, so that a
//! run measures what validating a token costs against the same run without
//! (BENCHMARKS.md, "Issue 34").

use std::process::Stdio;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The resource the token is for, and the server says it is.
pub const RESOURCE: &str = "https://memory.bench/mcp";

pub struct Issuer {
    _child: tokio::process::Child,
    pub url: String,
    /// A gateway's token: any tenant, reads and writes, valid ten minutes.
    pub token: String,
}

pub async fn start(keys: &std::path::Path) -> Issuer {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/auth/provider.sh");
    let mut child = tokio::process::Command::new("bash")
        .args([script, "run", "--port", "0", "--keys"])
        .arg(keys)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines
        .next_line()
        .await
        .unwrap()
        .expect("the issuer started");
    let url = format!(
        "http://127.0.0.1:{}",
        line.strip_prefix("listening ").unwrap()
    );
    let reply: Value = reqwest::Client::new()
        .post(format!("{url}/token"))
        .basic_auth("gateway", Some("gateway-secret"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("scope", "memory:read memory:write memory:any-tenant"),
            ("resource", RESOURCE),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    Issuer {
        _child: child,
        url,
        token: reply["access_token"].as_str().unwrap().to_owned(),
    }
}
