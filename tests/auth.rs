//! Authentication through the binary (docs/protocol.md#authentication), against a real
//! authorization server (`oidc-provider`, tests/auth/provider.sh) and a real keys file: the
//! tenant a request may touch is what its credential proves, every forged or stale token is
//! refused, the issuer's keys are followed through a rotation and outlive an outage, and a
//! key removed from the file is refused after SIGHUP.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::oauth::{Provider, RESOURCE, claims, now, signed, signing_key};
use support::process::{BINARY, Running, Served, free_port, serve};

struct Answer {
    status: u16,
    challenge: String,
    body: Value,
}

impl Answer {
    /// What `request` was answered: its status, its challenge, its JSON body (or null).
    async fn of(request: reqwest::RequestBuilder) -> Answer {
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let challenge = (response.headers().get("www-authenticate"))
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = response.json().await.unwrap_or(Value::Null);
        Answer {
            status,
            challenge,
            body,
        }
    }
}

/// One JSON-RPC request to `/mcp` with `token` and `headers`.
async fn post(
    server: &Running,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Value,
) -> Answer {
    let mut request = reqwest::Client::new()
        .post(format!("{}/mcp", server.url))
        .header("content-type", "application/json")
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    Answer::of(request).await
}

async fn call(
    server: &Running,
    token: Option<&str>,
    headers: &[(&str, &str)],
    tool: &str,
    args: Value,
) -> Answer {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}});
    post(server, token, headers, body).await
}

/// A tool result's text and error flag; panics on anything else.
fn result(answer: &Answer) -> (String, bool) {
    assert_eq!(answer.status, 200, "{}", answer.body);
    let text = answer.body["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("not a tool result: {}", answer.body))
        .to_owned();
    (text, answer.body["result"]["isError"] == true)
}

/// A tool call's text and error flag, as `result` reads it.
async fn ask(
    server: &Running,
    token: Option<&str>,
    headers: &[(&str, &str)],
    name: &str,
    args: Value,
) -> (String, bool) {
    result(&call(server, token, headers, name, args).await)
}

fn tenant(name: &str) -> [(&str, &str); 1] {
    [("x-memory-tenant", name)]
}

async fn serve_oauth(issuer: &str) -> Served {
    serve(&[("OAUTH_ISSUER", issuer), ("OAUTH_RESOURCE", RESOURCE)]).await
}

/// A fresh authorization server (its keys in a file of a directory that lives as long as
/// the first value), and a server taking its tokens.
async fn issuer_and_server() -> (tempfile::TempDir, PathBuf, Provider, Served) {
    let (dir, keys) = keys_file();
    let provider = Provider::start(&keys, 0, false).await;
    let served = serve_oauth(&provider.issuer).await;
    (dir, keys, provider, served)
}

fn keys_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provider-keys.json");
    (dir, path)
}

#[tokio::test]
async fn the_metadata_names_the_issuer_and_a_request_without_a_token_is_told_where_it_is() {
    let (_keys_dir, _, provider, served) = issuer_and_server().await;
    let url = &served.server.url;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let metadata: Value = reqwest::get(format!("{url}{path}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(metadata["resource"], RESOURCE, "{path}");
        assert_eq!(metadata["authorization_servers"], json!([provider.issuer]));
        assert_eq!(
            metadata["scopes_supported"],
            json!(["memory:read", "memory:write", "memory:any-tenant"])
        );
    }
    let refused = call(
        &served.server,
        None,
        &tenant("alpha"),
        "memory_stats",
        json!({}),
    )
    .await;
    assert_eq!(refused.status, 401);
    assert!(
        refused.challenge.starts_with(
            "Bearer resource_metadata=\"https://memory.test/.well-known/oauth-protected-resource/mcp\""
        ),
        "{}",
        refused.challenge
    );
    assert!(
        !refused.challenge.contains("error="),
        "no token, no error code: {}",
        refused.challenge
    );
    // A handshake needs a token too.
    let listed = post(
        &served.server,
        None,
        &[],
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    )
    .await;
    assert_eq!(listed.status, 401);

    // --check-config fetches the issuer's keys, and fails when it cannot.
    // (tokio's process: the embedding stub answering it runs on this test's runtime.)
    let check = |issuer: String| {
        let mut env = support::base_env(&served.stub, &served.dir.path().join("check.db"));
        env.insert("OAUTH_ISSUER".into(), issuer);
        env.insert("OAUTH_RESOURCE".into(), RESOURCE.into());
        async move {
            let mut command = tokio::process::Command::new(BINARY);
            command.env_clear().envs(env).arg("--check-config");
            command.output().await.unwrap()
        }
    };
    let checked = check(provider.issuer.clone()).await;
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success() && said.contains("signing keys: 1"),
        "{said}"
    );
    let dead = check(format!("http://127.0.0.1:{}", free_port())).await;
    let said = String::from_utf8_lossy(&dead.stderr);
    assert!(
        !dead.status.success() && said.contains("signing keys cannot be fetched"),
        "{said}"
    );
    provider.stop().await;
}

#[tokio::test]
async fn a_token_reaches_its_own_tenants_and_does_only_what_its_scopes_allow() {
    let (_keys_dir, keys, provider, served) = issuer_and_server().await;
    let server = &served.server;
    let writer = provider
        .token("alpha-writer", "memory:read memory:write")
        .await;
    let reader = provider.token("alpha-reader", "memory:read").await;
    let beta = provider
        .token("beta-writer", "memory:read memory:write")
        .await;
    let both = provider.token("both-reader", "memory:read").await;
    let gateway = provider
        .token("gateway", "memory:read memory:write memory:any-tenant")
        .await;

    // A token of one tenant needs no header; the memory records who wrote it.
    let (stored, failed) = ask(
        server,
        Some(&writer),
        &[],
        "remember",
        json!({"content": "alpha deploys with helm"}),
    )
    .await;
    assert!(
        !failed && stored.starts_with("[MEMORY] Stored as "),
        "{stored}"
    );
    let (listed, _) = ask(
        server,
        Some(&writer),
        &tenant("alpha"),
        "list_memories",
        json!({}),
    )
    .await;
    assert!(
        listed.contains("written by \"oauth:alpha-writer\""),
        "{listed}"
    );
    let structured = call(
        server,
        Some(&writer),
        &[("mcp-protocol-version", "2025-06-18")],
        "list_memories",
        json!({}),
    )
    .await;
    assert_eq!(
        structured.body["result"]["structuredContent"]["memories"][0]["author"],
        "oauth:alpha-writer"
    );
    ask(
        server,
        Some(&beta),
        &[],
        "remember",
        json!({"content": "beta deploys with nomad"}),
    )
    .await;

    // The header of another tenant is refused by name, and nothing of it is read.
    for (token, tool) in [
        (&writer, "recall"),
        (&writer, "remember"),
        (&reader, "list_memories"),
    ] {
        let (text, failed) = ask(
            server,
            Some(token),
            &tenant("beta"),
            tool,
            json!({"query": "deploys", "content": "x"}),
        )
        .await;
        assert!(failed, "{tool}: {text}");
        assert!(
            text.contains("may not use tenant \"beta\""),
            "{tool}: {text}"
        );
        assert!(!text.contains("nomad"));
    }

    // A read-only token reads, and may not write: 403 insufficient_scope, nothing stored.
    let (recalled, _) = ask(
        server,
        Some(&reader),
        &[],
        "recall",
        json!({"query": "how does alpha deploy"}),
    )
    .await;
    assert!(recalled.contains("helm"), "{recalled}");
    for (tool, args) in [
        ("remember", json!({"content": "alpha uses kubectl"})),
        ("forget", json!({"id": "01J0000000000000000000000A"})),
    ] {
        let refused = call(server, Some(&reader), &[], tool, args).await;
        assert_eq!(refused.status, 403, "{tool}: {}", refused.body);
        assert!(
            refused.challenge.contains("error=\"insufficient_scope\""),
            "{}",
            refused.challenge
        );
        assert!(
            refused.challenge.contains("scope=\"memory:write\""),
            "{}",
            refused.challenge
        );
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("needs write access")
        );
    }
    let (stats, _) = ask(server, Some(&reader), &[], "memory_stats", json!({})).await;
    assert!(stats.contains("1 memor"), "{stats}");

    // A token of two tenants reads either, by its header, and must name one.
    for (name, fact) in [("alpha", "helm"), ("beta", "nomad")] {
        let (text, _) = ask(
            server,
            Some(&both),
            &tenant(name),
            "recall",
            json!({"query": "how do we deploy"}),
        )
        .await;
        assert!(text.contains(fact), "{name}: {text}");
    }
    let (text, failed) = ask(
        server,
        Some(&both),
        &[],
        "recall",
        json!({"query": "deploy"}),
    )
    .await;
    assert!(failed && text.contains("header is required"), "{text}");

    // Resources and prompts that read memories need read access, as recall does.
    let write_only = signed(
        &keys,
        &claims(&provider.issuer, &["alpha"], |c| {
            c["scope"] = json!("memory:write")
        }),
    );
    for method in ["resources/list", "prompts/get"] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method,
                          "params": {"name": "review-memories"}});
        let refused = post(server, Some(&write_only), &[], body).await;
        assert_eq!(refused.status, 403, "{method}: {}", refused.body);
        assert!(
            refused.challenge.contains("scope=\"memory:read\""),
            "{}",
            refused.challenge
        );
    }
    let listed = post(
        server,
        Some(&write_only),
        &[],
        json!({"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}),
    )
    .await;
    assert_eq!(listed.status, 200, "the prompts' list holds no memory");

    // The gateway's scope lets it act for any tenant its header stamps.
    let stamped = [("x-tenant-id", "gamma")];
    let (stored, failed) = ask(
        server,
        Some(&gateway),
        &stamped,
        "remember",
        json!({"content": "gamma runs on fridays"}),
    )
    .await;
    assert!(!failed, "{stored}");

    let exited = served.server.terminate().await;
    let said = format!("{}\n{}", exited.stdout.join("\n"), exited.stderr);
    for token in [&writer, &reader, &beta, &both, &gateway] {
        let signature = token.rsplit('.').next().unwrap();
        assert!(!said.contains(signature), "a token reached the log");
    }
    assert!(
        said.contains("\"credential\":\"oauth:alpha-writer\""),
        "{said}"
    );
    assert!(said.contains("auth: OAuth access tokens of"), "{said}");

    // The export carries who wrote each memory.
    let export = std::process::Command::new(BINARY)
        .env_clear()
        .env(
            "DATABASE_URL",
            format!("sqlite:{}", served.dir.path().join("memory.db").display()),
        )
        .env("EMBEDDING_PROVIDER", "openai")
        .env("EMBEDDING_BASE_URL", "http://127.0.0.1:9/v1")
        .env("EMBEDDING_API_KEY", "unused")
        .env("EMBEDDING_MODEL", "fake-64")
        .env("EMBEDDING_DIM", "64")
        .args(["export", "--tenant", "alpha"])
        .output()
        .unwrap();
    let lines = String::from_utf8(export.stdout).unwrap();
    assert!(
        lines.contains("\"author\":\"oauth:alpha-writer\""),
        "{lines}"
    );
    provider.stop().await;
}

#[tokio::test]
async fn forged_stale_and_misdirected_tokens_are_refused_and_change_nothing() {
    let (_keys_dir, keys, provider, served) = issuer_and_server().await;
    let server = &served.server;
    let issuer = provider.issuer.clone();
    let gateway = provider
        .token("gateway", "memory:read memory:write memory:any-tenant")
        .await;
    let genuine = provider
        .token("alpha-writer", "memory:read memory:write")
        .await;
    let honest = signed(&keys, &claims(&issuer, &["alpha"], |_| {}));
    let (ok, failed) = ask(
        server,
        Some(&honest),
        &[],
        "remember",
        json!({"content": "the forger's control"}),
    )
    .await;
    assert!(
        !failed,
        "a token signed with the issuer's key is good: {ok}"
    );

    let [header, payload, signature]: [&str; 3] =
        genuine.split('.').collect::<Vec<_>>().try_into().unwrap();
    let mut tampered: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
    tampered["tenants"] = json!(["beta"]);
    let tampered = format!(
        "{header}.{}.{signature}",
        URL_SAFE_NO_PAD.encode(tampered.to_string())
    );
    let none = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(claims(&issuer, &["alpha"], |_| {}).to_string())
    );
    // HS256 with the issuer's public key as the secret: the classic confusion.
    let published: Value = reqwest::get(format!("{issuer}/jwks"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let public = serde_json::to_vec(&published["keys"][0]).unwrap();
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = published["keys"][0]["kid"].as_str().map(str::to_owned);
    let confused = jsonwebtoken::encode(
        &hs,
        &claims(&issuer, &["alpha"], |_| {}),
        &EncodingKey::from_secret(&public).unwrap(),
    )
    .unwrap();
    let unknown_kid = {
        let (_, key) = signing_key(&keys);
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("not-a-key-of-the-issuer".into());
        jsonwebtoken::encode(&header, &claims(&issuer, &["alpha"], |_| {}), &key).unwrap()
    };
    let refused = [
        (
            "expired",
            signed(
                &keys,
                &claims(&issuer, &["alpha"], |c| c["exp"] = json!(now() - 3600)),
            ),
            "has expired",
        ),
        (
            "not yet valid",
            signed(
                &keys,
                &claims(&issuer, &["alpha"], |c| c["nbf"] = json!(now() + 3600)),
            ),
            "not valid yet",
        ),
        (
            "wrong audience",
            signed(
                &keys,
                &claims(&issuer, &["alpha"], |c| {
                    c["aud"] = json!("https://other.test/mcp")
                }),
            ),
            "not for this resource",
        ),
        (
            "no audience",
            signed(
                &keys,
                &claims(&issuer, &["alpha"], |c| {
                    c.as_object_mut().unwrap().remove("aud");
                }),
            ),
            "no aud claim",
        ),
        (
            "wrong issuer",
            signed(&keys, &claims("https://evil.test", &["alpha"], |_| {})),
            "is not from",
        ),
        ("alg none", none, "public-key algorithm"),
        (
            "HS256 with the public key",
            confused,
            "public-key algorithm",
        ),
        (
            "unknown kid",
            unknown_kid,
            "key the issuer does not publish",
        ),
        ("tampered payload", tampered, "signature does not verify"),
        (
            "an ID token",
            signed(
                &keys,
                &claims(&issuer, &["alpha"], |c| c["nonce"] = json!("n-0S6")),
            ),
            "is an ID token",
        ),
        (
            "another type",
            {
                let (kid, key) = signing_key(&keys);
                let mut header = Header::new(Algorithm::RS256);
                (header.kid, header.typ) = (Some(kid), Some("dpop+jwt".into()));
                jsonwebtoken::encode(&header, &claims(&issuer, &["alpha"], |_| {}), &key).unwrap()
            },
            "not an access token (typ)",
        ),
        (
            "no subject",
            signed(
                &keys,
                &claims(&issuer, &["alpha"], |c| {
                    let c = c.as_object_mut().unwrap();
                    c.remove("sub");
                    c.remove("client_id");
                }),
            ),
            "no sub or client_id claim",
        ),
        ("garbage", "a.b.c".to_owned(), "cannot be read"),
        (
            "not a JWT",
            "mcpm_guess".to_owned(),
            "not a key this server knows",
        ),
    ];
    for (case, token, why) in &refused {
        for tool in ["remember", "list_memories"] {
            let answer = call(
                server,
                Some(token),
                &tenant("alpha"),
                tool,
                json!({"content": format!("{case} wrote this")}),
            )
            .await;
            assert_eq!(answer.status, 401, "{case}: {}", answer.body);
            assert!(
                answer.challenge.contains("error=\"invalid_token\""),
                "{case}: {}",
                answer.challenge
            );
            let message = answer.body["error"]["message"].as_str().unwrap();
            assert!(message.contains(why), "{case}: {message}");
        }
    }
    // Only the control was stored.
    let (listed, _) = ask(
        server,
        Some(&gateway),
        &tenant("alpha"),
        "list_memories",
        json!({}),
    )
    .await;
    assert!(
        listed.contains("the forger's control") && !listed.contains("wrote this"),
        "{listed}"
    );
    assert!(listed.starts_with("[MEMORY] 1 memory"), "{listed}");
    provider.stop().await;
}

#[tokio::test]
async fn a_rotation_is_followed_an_outage_is_ridden_out_and_a_dead_issuer_is_a_clear_error() {
    let (_keys_dir, keys) = keys_file();
    let provider = Provider::start(&keys, 0, false).await;
    let port = provider.port;
    let served = serve_oauth(&provider.issuer).await;
    let server = &served.server;
    let old = provider
        .token("alpha-writer", "memory:read memory:write")
        .await;
    ask(
        server,
        Some(&old),
        &[],
        "remember",
        json!({"content": "before the rotation"}),
    )
    .await;

    // The issuer restarts with a new signing key first; the server, not restarted, follows.
    provider.stop().await;
    let provider = Provider::start(&keys, port, true).await;
    let new = provider
        .token("alpha-writer", "memory:read memory:write")
        .await;
    let (kid_old, kid_new) = (kid(&old), kid(&new));
    assert_ne!(kid_old, kid_new);
    // A key it does not hold is fetched at most every few seconds (docs/protocol.md#oauth):
    // until then the new token is refused, and then taken.
    let mut answer = call(
        server,
        Some(&new),
        &[],
        "remember",
        json!({"content": "after the rotation"}),
    )
    .await;
    for _ in 0..600 {
        if answer.status != 401 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = call(
            server,
            Some(&new),
            &[],
            "remember",
            json!({"content": "after the rotation"}),
        )
        .await;
    }
    let (text, failed) = result(&answer);
    assert!(!failed, "{text}");
    ask(
        server,
        Some(&old),
        &[],
        "recall",
        json!({"query": "rotation"}),
    )
    .await;

    // The issuer goes away: tokens of the keys held keep working.
    provider.stop().await;
    let (text, failed) = ask(server, Some(&new), &[], "list_memories", json!({})).await;
    assert!(
        !failed && text.contains("after the rotation") && text.contains("before the rotation"),
        "{text}"
    );
    let fresh = signed(
        &keys,
        &claims(&format!("http://127.0.0.1:{port}"), &["alpha"], |_| {}),
    );
    ask(server, Some(&fresh), &[], "memory_stats", json!({})).await;

    // A server whose issuer was never reached says so, at once, as its own outage.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let lonely = serve_oauth(&dead).await;
    let started = std::time::Instant::now();
    let answer = call(
        &lonely.server,
        Some(&new),
        &tenant("alpha"),
        "memory_stats",
        json!({}),
    )
    .await;
    assert_eq!(answer.status, 503, "{}", answer.body);
    let message = answer.body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("signing keys could not be fetched"),
        "{message}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "it hung: {:?}",
        started.elapsed()
    );
}

fn kid(token: &str) -> String {
    jsonwebtoken::decode_header(token).unwrap().kid.unwrap()
}

/// `mcp-memory keys …` on `file`, its stdout.
fn keys_command(file: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(BINARY)
        .env_clear()
        .arg("keys")
        .args(args)
        .arg("--file")
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "keys {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn keys_bound_to_tenants_and_one_removed_is_refused_after_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.json");
    let writer = keys_command(&file, &["add", "--name", "ci", "--tenant", "alpha"])
        .trim()
        .to_owned();
    let reader = keys_command(
        &file,
        &[
            "add",
            "--name",
            "dash",
            "--tenant",
            "alpha",
            "--tenant",
            "beta",
            "--read-only",
        ],
    )
    .trim()
    .to_owned();
    let scraper = keys_command(
        &file,
        &["add", "--name", "prometheus", "--any-tenant", "--read-only"],
    )
    .trim()
    .to_owned();
    assert!(writer.starts_with("mcpm_") && writer.len() > 40, "{writer}");
    let stored = std::fs::read_to_string(&file).unwrap();
    assert!(
        !stored.contains(&writer) && !stored.contains(&reader),
        "the file holds a key"
    );
    let listed = keys_command(&file, &["list"]);
    assert!(
        listed.contains("ci\tread and write\talpha")
            && listed.contains("dash\tread only\talpha, beta"),
        "{listed}"
    );

    let served = serve(&[("MCP_KEYS_FILE", file.to_str().unwrap())]).await;
    let server = &served.server;
    let (text, failed) = ask(
        server,
        Some(&writer),
        &[],
        "remember",
        json!({"content": "ci caches cargo"}),
    )
    .await;
    assert!(!failed, "{text}");
    let (text, _) = ask(
        server,
        Some(&reader),
        &tenant("alpha"),
        "list_memories",
        json!({}),
    )
    .await;
    assert!(text.contains("written by \"key:ci\""), "{text}");
    let (text, failed) = ask(
        server,
        Some(&writer),
        &tenant("beta"),
        "recall",
        json!({"query": "cargo"}),
    )
    .await;
    assert!(
        failed && text.contains("key:ci may not use tenant \"beta\""),
        "{text}"
    );
    let refused = call(
        server,
        Some(&reader),
        &tenant("alpha"),
        "remember",
        json!({"content": "x"}),
    )
    .await;
    assert_eq!(refused.status, 403);
    assert!(
        refused.challenge.contains("insufficient_scope"),
        "{}",
        refused.challenge
    );
    assert_eq!(
        call(
            server,
            Some("mcpm_not-a-key"),
            &tenant("alpha"),
            "memory_stats",
            json!({})
        )
        .await
        .status,
        401
    );
    // /metrics: a key of any tenant scrapes; a key bound to tenants does not.
    let scrape = |key: String| {
        let url = format!("{}/metrics", server.url);
        async move {
            reqwest::Client::new()
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    assert_eq!(scrape(scraper.clone()).await, 200);
    assert_eq!(scrape(writer.clone()).await, 403);

    // Removed from the file, the key works until the server re-reads it.
    keys_command(&file, &["remove", "ci"]);
    ask(server, Some(&writer), &[], "memory_stats", json!({})).await;
    support::process::signal(server.pid(), "HUP");
    let mut status = 200;
    for _ in 0..2400 {
        status = call(server, Some(&writer), &[], "memory_stats", json!({}))
            .await
            .status;
        if status == 401 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        status, 401,
        "the removed key still works a minute after SIGHUP"
    );
    ask(
        server,
        Some(&reader),
        &tenant("beta"),
        "memory_stats",
        json!({}),
    )
    .await;
    let exited = served.server.terminate().await;
    assert_eq!(exited.code, Some(0), "SIGHUP must not have ended it");
    assert!(
        exited
            .stdout
            .iter()
            .any(|l| l.contains("\"event\":\"keys_reloaded\""))
    );
    for key in [&writer, &reader, &scraper] {
        assert!(
            !exited.stdout.join("\n").contains(key.as_str())
                && !exited.stderr.contains(key.as_str())
        );
    }
}

#[tokio::test]
async fn an_issuer_that_never_answers_costs_waiting_requests_one_fetch_not_one_each() {
    // It accepts connections and never answers: every fetch runs to its timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let served = serve_oauth(&issuer).await;
    let token = {
        let (_dir, keys) = keys_file();
        let provider = Provider::start(&keys, 0, false).await;
        let token = provider
            .token("alpha-writer", "memory:read memory:write")
            .await;
        provider.stop().await;
        token
    };
    let started = std::time::Instant::now();
    let calls = (0..12).map(|_| call(&served.server, Some(&token), &[], "memory_stats", json!({})));
    for answer in futures_util::future::join_all(calls).await {
        assert_eq!(answer.status, 503, "{}", answer.body);
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(
            !message.contains(&issuer),
            "the cause is for the log: {message}"
        );
    }
    // One fetch is at most two metadata places and the key set, 5 s each; twelve requests
    // that each fetched in turn would take minutes.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    held.abort();
}

/// A request to the memory browser with `token` as its HTTP Basic password (any user name).
async fn page(server: &Running, path: &str, token: Option<&str>, body: Option<Value>) -> Answer {
    let url = format!("{}{path}", server.url);
    let client = reqwest::Client::new();
    let mut request = match &body {
        Some(body) => client.post(url).json(body),
        None => client.get(url),
    };
    if let Some(token) = token {
        request = request.basic_auth("anyone", Some(token));
    }
    Answer::of(request).await
}

#[tokio::test]
async fn the_memory_browser_takes_an_access_token_as_its_password_and_its_scopes_decide() {
    let (_keys_dir, _keys, provider, served) = issuer_and_server().await;
    let server = &served.server;
    let writer = provider
        .token("alpha-writer", "memory:read memory:write")
        .await;
    let reader = provider.token("alpha-reader", "memory:read").await;
    let (stored, _) = ask(
        server,
        Some(&writer),
        &[],
        "remember",
        json!({"content": "alpha's page shows this memory"}),
    )
    .await;
    let id = stored["[MEMORY] Stored as ".len()..][..26].to_owned();

    // No token, or one that proves nothing: the browser's login challenge, never data.
    for token in [None, Some("eyJhbGciOiJSUzI1NiJ9.e30.c2ln")] {
        let refused = page(server, "/ui/access", token, None).await;
        assert_eq!(refused.status, 401, "{token:?}");
        assert!(refused.challenge.starts_with("Basic realm=\"mcp-memory\""));
    }
    let access = page(server, "/ui/access", Some(&reader), None).await;
    assert_eq!(access.body, json!({"read": true, "write": false}));
    let access = page(server, "/ui/access", Some(&writer), None).await;
    assert_eq!(access.body, json!({"read": true, "write": true}));

    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "list_memories", "arguments": {}}});
    let listed = page(server, "/ui/mcp", Some(&reader), Some(list)).await;
    assert!(
        listed
            .body
            .to_string()
            .contains("alpha's page shows this memory"),
        "{}",
        listed.body
    );
    let forget = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                        "params": {"name": "forget", "arguments": {"id": id}}});
    let refused = page(server, "/ui/mcp", Some(&reader), Some(forget.clone())).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let forgot = page(server, "/ui/mcp", Some(&writer), Some(forget)).await;
    let text = forgot.body["result"]["content"][0]["text"].as_str();
    assert!(
        text.is_some_and(|t| t.starts_with("[MEMORY] Deleted")),
        "{}",
        forgot.body
    );
}
