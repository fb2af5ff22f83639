//! `mcp-memory stdio` through the binary: both eras on stdin and stdout, nothing but
//! protocol messages on stdout, bad lines answered without stopping, the identity from the
//! configuration, a clean end on EOF and SIGTERM (and when a client that stopped reading closes
//! stdin), and several processes on one SQLite file.

mod support;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::process::command;
use support::{EmbeddingStub, base_env};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// A stdio process and its pipes; every line it writes to stdout must be a JSON-RPC message.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Client {
    fn start(env: &HashMap<String, String>) -> Client {
        let mut child = command(env)
            .arg("stdio")
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        Client {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
        }
    }

    async fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
    }

    /// The next line of stdout, which must be one JSON object.
    async fn answer(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line())
            .await
            .expect("an answer within 30 s")
            .unwrap()
            .expect("stdout is still open");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON on stdout ({e}): {line}"))
    }

    async fn request(&mut self, message: Value) -> Value {
        self.send_line(&message.to_string()).await;
        let answer = self.answer().await;
        assert_eq!(answer["id"], message["id"], "{answer}");
        answer
    }

    async fn call(&mut self, id: u64, tool: &str, arguments: Value) -> Value {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        self.request(call).await["result"].clone()
    }

    async fn initialize(&mut self, version: &str) -> Value {
        let answer = self
            .request(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "tests", "version": "1"}}}),
            )
            .await;
        self.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await;
        answer
    }

    /// Closes stdin and waits for the exit: (code, what is left on stdout, stderr).
    async fn close(mut self) -> (Option<i32>, Vec<String>, String) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the process ends after EOF")
            .unwrap();
        let mut rest = Vec::new();
        while let Some(line) = self.stdout.next_line().await.unwrap() {
            rest.push(line);
        }
        let mut stderr = String::new();
        let mut pipe = self.child.stderr.take().unwrap();
        pipe.read_to_string(&mut stderr).await.unwrap();
        (status.code(), rest, stderr)
    }
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap()
}

fn env_for(stub: &EmbeddingStub, db: &std::path::Path, tenant: &str) -> HashMap<String, String> {
    let mut env = base_env(stub, db);
    env.insert("MEMORY_TENANT".into(), tenant.into());
    env
}

#[tokio::test]
async fn both_eras_are_served_line_by_line_and_bad_lines_do_not_stop_it() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = env_for(&stub, &dir.path().join("memory.db"), "acme");
    env.insert("MCP_BODY_LIMIT_BYTES".into(), "4096".into());
    let mut client = Client::start(&env);

    let hello = client.initialize("2025-06-18").await;
    assert_eq!(hello["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(hello["result"]["serverInfo"]["name"], "mcp-memory");
    let listed = client
        .request(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "recall" && t["outputSchema"].is_object())
    );
    let stored = client
        .call(
            2,
            "remember",
            json!({"content": "deploys go out on fridays"}),
        )
        .await;
    assert!(text(&stored).starts_with("[MEMORY] Stored as "), "{stored}");
    // The version initialize agreed has structured results.
    assert_eq!(stored["structuredContent"]["outcome"], "stored");

    // A line that is not JSON, and one over the body limit: each answered, and it goes on.
    client.send_line("this is not json").await;
    let refused = client.answer().await;
    assert_eq!(refused["error"]["code"], -32700, "{refused}");
    assert!(refused.get("id").is_none());
    client
        .send_line(&format!("{{\"padding\": \"{}\"}}", "x".repeat(10_000)))
        .await;
    let refused = client.answer().await;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4096 bytes"),
        "{refused}"
    );
    let recalled = client
        .call(3, "recall", json!({"query": "when do deploys go out"}))
        .await;
    assert!(
        text(&recalled).contains("deploys go out on fridays"),
        "{recalled}"
    );

    // The 2026-07-28 era on the same stdin: no headers to send, the body's _meta is enough.
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}});
    let discovered = client
        .request(
            json!({"jsonrpc": "2.0", "id": 4, "method": "server/discover",
            "params": {"_meta": meta}}),
        )
        .await;
    assert_eq!(
        discovered["result"]["supportedVersions"],
        json!(["2026-07-28"])
    );
    let modern = client
        .request(
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "memory_stats", "arguments": {}, "_meta": meta}}),
        )
        .await;
    assert_eq!(modern["result"]["resultType"], "complete", "{modern}");
    assert!(text(&modern["result"]).contains("1 memor"), "{modern}");
    let unsupported = client
        .request(
            json!({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                      "io.modelcontextprotocol/clientCapabilities": {}}}}),
        )
        .await;
    assert_eq!(unsupported["error"]["code"], -32022, "{unsupported}");

    // A client of 2025-03-26 gets text alone.
    client.initialize("2025-03-26").await;
    let plain = client.call(7, "memory_stats", json!({})).await;
    assert!(plain.get("structuredContent").is_none(), "{plain}");

    // A call sent just before stdin closes is still answered, then the process ends.
    client
        .send_line(
            &json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
            "name": "remember", "arguments": {"content": "the last word before EOF"}}})
            .to_string(),
        )
        .await;
    let (code, rest, stderr) = client.close().await;
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(rest.len(), 1, "{rest:?}");
    let last: Value = serde_json::from_str(&rest[0]).unwrap();
    assert_eq!(last["id"], 8);
    assert!(
        text(&last["result"]).starts_with("[MEMORY] Stored as "),
        "{last}"
    );
    // Logs and the startup lines went to stderr.
    assert!(
        stderr.contains("serving MCP on stdio for tenant acme"),
        "{stderr}"
    );
    assert!(stderr.contains("\"event\":\"tool_call\""), "{stderr}");
}

#[tokio::test]
async fn the_identity_comes_from_the_configuration_and_a_bad_one_stops_it_at_start() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    for (tenant, conversation, named) in [
        (None, None, "MEMORY_TENANT is required"),
        (
            Some("not a slug"),
            None,
            "MEMORY_TENANT must start with a letter",
        ),
        (
            Some("acme"),
            Some("has spaces in it"),
            "MEMORY_CONVERSATION may carry",
        ),
    ] {
        let mut env = base_env(&stub, &db);
        env.extend(tenant.map(|t| ("MEMORY_TENANT".to_owned(), t.to_owned())));
        env.extend(conversation.map(|c| ("MEMORY_CONVERSATION".to_owned(), c.to_owned())));
        let (code, rest, stderr) = Client::start(&env).close().await;
        assert_eq!(code, Some(1), "{stderr}");
        assert!(rest.is_empty(), "stdout stays the protocol's: {rest:?}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(named), "{stderr}");
    }

    // A conversation's note is that conversation's alone, as with the header.
    let mut in_chat = env_for(&stub, &db, "acme");
    in_chat.insert("MEMORY_CONVERSATION".into(), "chat:1".into());
    let mut chat = Client::start(&in_chat);
    let noted = chat
        .call(
            1,
            "remember",
            json!({"content": "this chat is about the release", "scope": "conversation"}),
        )
        .await;
    assert!(text(&noted).starts_with("[MEMORY] Stored as "), "{noted}");
    assert_eq!(chat.close().await.0, Some(0));
    let mut project = Client::start(&env_for(&stub, &db, "acme"));
    let listed = project.call(1, "list_memories", json!({})).await;
    assert!(!text(&listed).contains("this chat is about"), "{listed}");
    let mut other = Client::start(&env_for(&stub, &db, "globex"));
    let listed = other.call(1, "memory_stats", json!({})).await;
    assert!(text(&listed).contains("no memories yet"), "{listed}");
    assert_eq!(project.close().await.0, Some(0));
    assert_eq!(other.close().await.0, Some(0));
}

#[tokio::test]
async fn three_processes_share_one_sqlite_file() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let env = env_for(&stub, &dir.path().join("memory.db"), "acme");
    let mut windows: Vec<Client> = (0..3).map(|_| Client::start(&env)).collect();
    let facts = [
        "the api gateway runs on port 8443",
        "integration tests need docker compose up first",
        "release notes live in docs/changes",
    ];
    let writes = windows
        .iter_mut()
        .zip(facts)
        .enumerate()
        .map(|(i, (w, fact))| async move {
            w.call(i as u64, "remember", json!({"content": fact})).await
        });
    for stored in futures_util::future::join_all(writes).await {
        assert!(text(&stored).starts_with("[MEMORY] Stored as "), "{stored}");
    }
    for (i, window) in windows.iter_mut().enumerate() {
        let listed = window.call(10 + i as u64, "list_memories", json!({})).await;
        for fact in facts {
            assert!(text(&listed).contains(fact), "window {i}: {listed}");
        }
        let recalled = window
            .call(
                20 + i as u64,
                "recall",
                json!({"query": "which port does the api gateway use"}),
            )
            .await;
        assert!(text(&recalled).contains(facts[0]), "window {i}: {recalled}");
    }
    for window in windows {
        assert_eq!(window.close().await.0, Some(0));
    }
}

#[tokio::test]
async fn sigterm_ends_it_cleanly() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut client = Client::start(&env_for(&stub, &dir.path().join("memory.db"), "acme"));
    client.initialize("2025-11-25").await;
    support::process::sigterm(client.child.id().unwrap());
    let status = tokio::time::timeout(Duration::from_secs(30), client.child.wait())
        .await
        .expect("it ends on SIGTERM with stdin still open")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Bytes written to `pipe` and not yet read, and how many it holds at most.
fn pipe_fill(pipe: &ChildStdout) -> (usize, usize) {
    use std::os::fd::AsRawFd;
    let fd = pipe.as_raw_fd();
    let mut unread: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int; F_GETPIPE_SZ reads nothing. Both on a pipe we own.
    let (read, size) = unsafe {
        (
            libc::ioctl(fd, libc::FIONREAD, &mut unread),
            libc::fcntl(fd, libc::F_GETPIPE_SZ),
        )
    };
    assert!(read == 0 && size > 0, "the pipe cannot be inspected");
    (unread as usize, size as usize)
}

/// Stores three long memories (each page of them is about 180 KB of answer), then asks for a
/// page of them under each of `ids` and reads nothing more, until stdout's pipe is full.
async fn ask_pages_unread(client: &mut Client, ids: std::ops::Range<u64>) {
    for n in 0..3 {
        let words: Vec<String> = (0..3_000).map(|w| format!("w{n}x{w}")).collect();
        let stored = client
            .call(10 + n, "remember", json!({"content": words.join(" ")}))
            .await;
        assert!(text(&stored).starts_with("[MEMORY] Stored as "), "{stored}");
    }
    for id in ids {
        let list = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "list_memories", "arguments": {"limit": 50}}});
        client.send_line(&list.to_string()).await;
    }
    let stdout = client.stdout.get_ref().get_ref();
    for _ in 0..1200 {
        let (unread, size) = pipe_fill(stdout);
        if unread >= size {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (unread, size) = pipe_fill(stdout);
    panic!("stdout never filled: {unread} of {size} bytes");
}

/// A client that stops reading while answers are due: the process still ends, on SIGTERM
/// or at the end of its input, within the drain deadline (10 s) and a second, exit code 0,
/// and the final flush runs: the use a recall counted before is kept.
#[tokio::test]
async fn it_ends_in_time_when_its_client_stops_reading() {
    for ending in ["SIGTERM", "the end of stdin"] {
        let stub = EmbeddingStub::start().await;
        let dir = tempfile::tempdir().unwrap();
        let env = env_for(&stub, &dir.path().join("memory.db"), "acme");
        let mut client = Client::start(&env);
        client.initialize("2025-11-25").await;
        let fact = "the api gateway listens on port 8443";
        client.call(1, "remember", json!({"content": fact})).await;
        let question = json!({"query": "which port does the api gateway use"});
        let recalled = client.call(2, "recall", question).await;
        assert!(text(&recalled).contains(fact), "{recalled}");
        // Then it asks for four pages and reads nothing more.
        ask_pages_unread(&mut client, 20..24).await;
        match ending {
            "SIGTERM" => support::process::sigterm(client.child.id().unwrap()),
            _ => drop(client.stdin.take()),
        }
        let status = tokio::time::timeout(Duration::from_secs(60), client.child.wait())
            .await
            .unwrap_or_else(|_| panic!("still running 60 s after {ending}"))
            .unwrap();
        assert_eq!(status.code(), Some(0), "after {ending}");
        let mut stderr = String::new();
        let mut pipe = client.child.stderr.take().unwrap();
        pipe.read_to_string(&mut stderr).await.unwrap();
        assert!(stderr.contains("stdio_answers_not_taken"), "{stderr}");
        // The use the recall counted was flushed before the exit.
        let exported = dir.path().join("export.jsonl");
        let out = command(&env)
            .args(["export", "--out", exported.to_str().unwrap()])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let export = std::fs::read_to_string(&exported).unwrap();
        let line = export
            .lines()
            .find(|l| l.contains("8443"))
            .expect("the fact is exported");
        let memory: Value = serde_json::from_str(line).unwrap();
        assert_eq!(memory["access_count"], 1, "after {ending}: {line}");
    }
}

/// A client that sends more calls than are handled at once (16) and queued (16), stops reading
/// and closes stdin: the end of stdin is behind lines never read, yet the process ends once an
/// answer has waited `MCP_WRITE_TIMEOUT_MS` for it, not only on a signal; exit 0.
#[tokio::test]
async fn it_ends_when_its_client_closes_stdin_with_every_call_waiting_to_answer() {
    let stub = EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = env_for(&stub, &dir.path().join("memory.db"), "acme");
    env.insert("MCP_WRITE_TIMEOUT_MS".into(), "1000".into());
    let mut client = Client::start(&env);
    client.initialize("2025-11-25").await;
    // 64 pages, none read: more than are handled at once and queued.
    ask_pages_unread(&mut client, 100..164).await;
    drop(client.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(60), client.child.wait())
        .await
        .expect("still running 60 s after its stdin closed")
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let mut stderr = String::new();
    let mut pipe = client.child.stderr.take().unwrap();
    pipe.read_to_string(&mut stderr).await.unwrap();
    assert!(stderr.contains("stdio_answers_not_taken"), "{stderr}");
}
