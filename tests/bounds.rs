//! What the server holds stays bounded whatever its clients and dependencies do, through
//! the binary (docs/operations.md, "Timeouts" and "Memory use"): a client that never reads
//! its answers is cut off and its answers freed, requests past `MCP_MAX_CONNECTIONS` are
//! answered 503 while probes still answer, silent connections never lock a caller out, one answer carries at most
//! `MAX_ANSWER_BYTES` of memories and a list goes on at its cursor, a burst of calls opens
//! at most `EMBEDDING_MAX_REQUESTS` requests to the embedding service, and `/metrics`
//! keeps to the Origin rule `/mcp` has. Every other caller is served meanwhile.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::process::{Running, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ACME: [(&str, &str); 1] = [("x-memory-tenant", "acme")];

/// A memory of distinct words, padded with control characters, which JSON escapes to six
/// bytes each: about 340 KB of answer for 28 KB stored.
fn heavy(n: usize) -> String {
    let words: Vec<String> = (0..40).map(|w| format!("w{n}x{w}")).collect();
    format!("{} {}", words.join(" "), "\u{1}".repeat(28_000))
}

async fn remember_heavy(server: &Running, count: usize) {
    for n in 0..count {
        let stored = server
            .call(&ACME, "remember", json!({"content": heavy(n)}))
            .await;
        assert!(stored.starts_with("[MEMORY] Stored as "), "{stored}");
    }
}

/// A raw HTTP request to `/mcp` for `tool`.
fn request(tool: &str, arguments: Value) -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         X-Memory-Tenant: acme\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A connection whose receive buffer is as small as the kernel allows, so that what the
/// server sends piles up on its side.
async fn small_window(server: &Running) -> tokio::net::TcpStream {
    let address = server.url.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(address).await.unwrap()
}

/// Polls `probe` until it holds, for at most 60 s: the wait is for an event, never a time.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut probe: impl FnMut() -> F) {
    for _ in 0..1200 {
        if probe().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} never happened within 60 s");
}

#[tokio::test]
async fn a_client_that_never_reads_is_cut_off_and_every_other_is_served() {
    let served = serve(&[("MCP_WRITE_TIMEOUT_MS", "2000")]).await;
    let server = &served.server;
    remember_heavy(server, 12).await;
    // Ten clients ask for pages of every memory, eight in a row on each connection (about
    // 8 MB each, more than any socket buffers), and never read.
    let mut stalled = Vec::new();
    for _ in 0..10 {
        let mut stream = small_window(server).await;
        for _ in 0..8 {
            let asked = request("list_memories", json!({"limit": 50}));
            stream.write_all(&asked).await.unwrap();
        }
        stalled.push(stream);
    }
    // Meanwhile everyone else is served.
    let stats = server.call(&ACME, "memory_stats", json!({})).await;
    assert_eq!(
        stats.lines().next().unwrap(),
        "[MEMORY] 12 memories for this project (project: 12)."
    );
    assert_eq!(
        reqwest::get(format!("{}/health", server.url))
            .await
            .unwrap()
            .status(),
        200
    );
    // Their connections are closed at the write deadline, and their answers freed with them:
    // every one, so that only the scrape asking is open (it counts itself).
    until("the stalled connections closing", || async move {
        server.metric("mcp_memory_connections_open").await <= 1.0
    })
    .await;
    for mut stream in stalled {
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut got));
        let read = read.await.expect("the server closed the connection");
        // Reset or ended: either way, far less than the eight answers asked for.
        assert!(read.is_err() || got.len() < 4 << 20, "{} bytes", got.len());
    }
    let stats = server.call(&ACME, "memory_stats", json!({})).await;
    assert_eq!(
        stats.lines().next().unwrap(),
        "[MEMORY] 12 memories for this project (project: 12)."
    );
}

#[tokio::test]
async fn an_answer_is_bounded_and_a_list_goes_on_at_its_cursor() {
    let served = serve(&[]).await;
    let server = &served.server;
    remember_heavy(server, 12).await;
    let mut cursor: Option<String> = None;
    let mut seen = std::collections::BTreeSet::new();
    let mut pages = 0;
    loop {
        let mut arguments = json!({"limit": 50});
        if let Some(cursor) = &cursor {
            arguments["cursor"] = json!(cursor);
        }
        let reply = reqwest::Client::new()
            .post(format!("{}/mcp", server.url))
            .header("x-memory-tenant", "acme")
            // A version with structured results.
            .header("mcp-protocol-version", "2025-11-25")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "list_memories", "arguments": arguments}}))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        assert!(
            reply.len() <= (1 << 20) + (64 << 10),
            "an answer of {} bytes",
            reply.len()
        );
        let reply: Value = serde_json::from_slice(&reply).unwrap();
        let result = &reply["result"];
        let page = result["structuredContent"]["memories"].as_array().unwrap();
        assert!(!page.is_empty(), "{reply}");
        for memory in page {
            assert!(seen.insert(memory["id"].as_str().unwrap().to_owned()));
        }
        pages += 1;
        match result["structuredContent"]["nextCursor"].as_str() {
            Some(next) => {
                let text = result["content"][0]["text"].as_str().unwrap();
                assert!(
                    text.contains("fewer than asked: one answer carries at most 1048576 bytes"),
                    "{text}"
                );
                cursor = Some(next.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), 12, "every memory, in {pages} pages");
    assert!(pages >= 4, "pages of about three: {pages}");
}

/// A `ping` to `/mcp` on a connection of its own.
async fn ping(server: &Running) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/mcp", server.url))
        .header("x-memory-tenant", "acme")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap()
}

/// A request to `/mcp` whose body is still arriving: it holds a place among
/// `MCP_MAX_CONNECTIONS` for as long as the body is awaited.
async fn hold_a_place(server: &Running) -> tokio::net::TcpStream {
    let address = server.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              X-Memory-Tenant: acme\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"",
        )
        .await
        .unwrap();
    stream
}

#[tokio::test]
async fn past_the_connection_cap_a_caller_gets_503_and_probes_still_answer() {
    let served = serve(&[
        ("MCP_MAX_CONNECTIONS", "3"),
        ("MCP_BODY_TIMEOUT_MS", "600000"),
    ])
    .await;
    let server = &served.server;
    // Three requests whose bodies never finish take every place.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(hold_a_place(server).await);
    }
    // A scrape takes a free place while it is answered, so one that comes before a held
    // request's headers were read takes that request's place, and the request is refused.
    // Only a scrape refused a place itself (answered past the cap, with `Connection: close`,
    // and not counting itself open) shows that the three hold them all; a held request
    // refused meanwhile is sent again.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let scrape = reqwest::get(format!("{}/metrics", server.url))
            .await
            .unwrap();
        let past_the_cap = scrape
            .headers()
            .get("connection")
            .is_some_and(|c| c == "close");
        let text = scrape.text().await.unwrap();
        if past_the_cap && text.contains("\nmcp_memory_connections_open 3\n") {
            break;
        }
        for stream in &mut held {
            // Answered (refused) or closed: no longer holding a place.
            if !matches!(stream.try_read(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
            {
                *stream = hold_a_place(server).await;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "three held requests never held every place within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = ping(server).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(refused.headers()["connection"], "close");
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MCP_MAX_CONNECTIONS"),
        "{body}"
    );
    // Probes and scrapes are still answered, and say why.
    let health = reqwest::get(format!("{}/health", server.url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(server.metric("mcp_memory_connections_open").await, 3.0);
    assert!(server.metric("mcp_memory_connections_refused_total").await >= 3.0);
    // One goes away: its place is served again.
    drop(held.pop());
    until("a place freed", || async move {
        ping(server).await.status() == 200
    })
    .await;
}

/// Raises this process's open-file limit to its hard limit, for tests that hold many sockets.
fn many_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a struct of this frame.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    assert!(
        limit.rlim_cur >= 4096,
        "open files: at most {}",
        limit.rlim_cur
    );
}

#[tokio::test]
async fn idle_and_half_open_connections_never_lock_callers_out() {
    many_files();
    let served = serve(&[
        ("MCP_MAX_IDLE_CONNECTIONS", "1000"),
        ("MCP_HEADER_TIMEOUT_MS", "600000"),
    ])
    .await;
    let server = &served.server;
    let address = server.url.trim_start_matches("http://");
    // 1,500 sockets that send nothing, or half a header, and hold on.
    let mut silent = Vec::new();
    for n in 0..1500 {
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        if n % 2 == 1 {
            stream
                .write_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Ty")
                .await
                .unwrap();
        }
        silent.push(stream);
    }
    // Every one was taken in, and the oldest closed to keep within the bound.
    until("the silent connections taken in", || async move {
        server
            .metric("mcp_memory_connections_waiting_closed_total")
            .await
            >= 500.0
    })
    .await;
    assert!(server.metric("mcp_memory_connections_waiting").await <= 1000.0);
    let health = reqwest::get(format!("{}/health", server.url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // 32 clients make 128 calls between them: every one is answered.
    let callers = (0..32).map(|c| async move {
        let client = reqwest::Client::new();
        for n in 0..4 {
            let reply: Value = client
                .post(format!("{}/mcp", server.url))
                .header("x-memory-tenant", "acme")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "remember", "arguments":
                                  {"content": format!("caller {c} call {n}: port 80{c:02}{n}")}}}))
                .send()
                .await
                .unwrap_or_else(|e| panic!("caller {c}, call {n}: {e}"))
                .json()
                .await
                .unwrap();
            let text = reply["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            assert!(text.starts_with("[MEMORY] Stored as "), "{reply}");
        }
    });
    futures_util::future::join_all(callers).await;
    assert!(server.metric("mcp_memory_connections_waiting").await <= 1000.0);
    assert!(server.metric("mcp_memory_connections_open").await <= 256.0);
    // What was closed to make room was ours, the longest waiting.
    let silent = &silent;
    until("500 of the silent connections closed", || async move {
        let closed = (silent.iter())
            .filter(|s| matches!(s.try_read(&mut [0; 1]), Ok(0)))
            .count();
        closed >= 500
    })
    .await;
}

#[tokio::test]
async fn a_burst_of_calls_opens_at_most_the_configured_requests_to_the_embedder() {
    let served = serve(&[("EMBEDDING_MAX_REQUESTS", "3")]).await;
    let (server, stub) = (&served.server, &served.stub);
    stub.hold();
    let calls = (0..10).map(|n| {
        let fact = format!("burst fact {n} of ten, its own words {n}{n}");
        async move {
            server
                .call(&ACME, "remember", json!({"content": fact}))
                .await
        }
    });
    // Every call is in the server, and the embedder holds as many requests as it may get;
    // then it answers them all.
    let watch = async {
        until("ten calls in flight", || async move {
            server.metric("mcp_memory_requests_in_flight").await == 10.0
        })
        .await;
        until("three requests at the embedder", || async move {
            stub.requests_now() == 3
        })
        .await;
        stub.release();
    };
    let (answers, ()) = tokio::join!(futures_util::future::join_all(calls), watch);
    for text in answers {
        assert!(text.starts_with("[MEMORY] Stored as "), "{text}");
    }
    assert_eq!(stub.requests_at_most(), 3);
}

#[tokio::test]
async fn metrics_refuse_a_foreign_origin_as_mcp_does() {
    let served = serve(&[("MCP_ALLOWED_ORIGINS", "https://console.example")]).await;
    let server = &served.server;
    let scrape = |origin: Option<&'static str>| {
        let mut request = reqwest::Client::new().get(format!("{}/metrics", server.url));
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(scrape(Some("https://evil.example")).await, 403);
    assert_eq!(scrape(Some("https://console.example")).await, 200);
    assert_eq!(scrape(None).await, 200);
}
