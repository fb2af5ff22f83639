//! Resident memory with clients that never read (`LOAD_ONLY=stalled`, SQLite): one tenant of
//! 40 memories of about 28 KB, mostly control characters (six bytes each once escaped as
//! JSON), and 100 clients that each ask for four pages of 50 on one connection, with a receive
//! buffer as small as the kernel allows, and never read. The server's resident memory is read
//! as they wait, and after `MCP_WRITE_TIMEOUT_MS` (30 s) has passed; meanwhile another
//! client's `memory_stats` is timed, and afterwards each stalled connection is read to see
//! whether the server closed it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server::Server;
use crate::{Backend, Bench, drive, seed};

const CLIENTS: usize = 100;
const PAGES: usize = 4;
const MEMORIES: usize = 40;

impl Bench {
    pub async fn stalled(&mut self) {
        let url = self.fresh_store(Backend::Sqlite, "stalled").await;
        let tenants = vec!["load-0".to_owned()];
        let rows = seed::rows(&tenants, MEMORIES, 384).map(|mut row| {
            row.content.push(' ');
            row.content.push_str(&"\u{1}".repeat(28_000));
            row
        });
        Bench::seed(Backend::Sqlite, &url, rows, 384).await;
        let env = self.env(&url, 384, None);
        Server::start(&env, &self.client).await.stop();
        let server = Server::start(&env, &self.client).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let idle = server.rss_mib();
        let address: std::net::SocketAddr =
            server.url.trim_start_matches("http://").parse().unwrap();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "list_memories", "arguments": {"limit": 50}}})
        .to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             X-Memory-Tenant: load-0\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let began = Instant::now();
        let mut stalled = Vec::new();
        for _ in 0..CLIENTS {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(4096).unwrap();
            let mut stream = socket.connect(address).await.unwrap();
            for _ in 0..PAGES {
                stream.write_all(request.as_bytes()).await.unwrap();
            }
            stalled.push(stream);
        }
        // The answers are made within a few seconds; then the clients only wait.
        let mut samples = Vec::new();
        for at in [5u64, 15, 25, 40, 60] {
            let wait = Duration::from_secs(at).saturating_sub(began.elapsed());
            tokio::time::sleep(wait).await;
            samples.push((at, server.rss_mib()));
        }
        let asked = Instant::now();
        let stats = drive::call(
            &self.client,
            &server.url,
            "load-0",
            "memory_stats",
            json!({}),
        )
        .await;
        let stats_ms = asked.elapsed().as_secs_f64() * 1000.0;
        assert!(stats.is_ok(), "{stats:?}");
        let peak = server.peak_rss_mib();
        let mut closed = 0;
        for mut stream in stalled {
            let mut sink = vec![0; 1 << 16];
            // A closed connection ends (or resets) once what was sent is read; an open one
            // has nothing more to give after a moment.
            let read = async {
                loop {
                    match stream.read(&mut sink).await {
                        Ok(0) | Err(_) => return true,
                        Ok(_) => {}
                    }
                }
            };
            closed += usize::from(
                tokio::time::timeout(Duration::from_millis(200), read)
                    .await
                    .unwrap_or(false),
            );
        }
        server.stop();
        let at = |s: u64| {
            samples
                .iter()
                .find(|(t, _)| *t == s)
                .map_or(0.0, |(_, r)| *r)
        };
        println!(
            "\n## {CLIENTS} clients that never read ({PAGES} pages of {MEMORIES} memories of ~28 KB of control characters each, SQLite)\n"
        );
        println!(
            "| idle RSS MiB | RSS at 5 / 15 / 25 / 40 / 60 s | peak RSS MiB | connections closed by the server | memory_stats meanwhile ms |"
        );
        println!("|---|---|---|---|---|");
        println!(
            "| {idle:.0} | {:.0} / {:.0} / {:.0} / {:.0} / {:.0} | {peak:.0} | {closed} of {CLIENTS} | {stats_ms:.1} |",
            at(5),
            at(15),
            at(25),
            at(40),
            at(60)
        );
        let row: Value = json!({
            "stalled": true, "clients": CLIENTS, "pages": PAGES, "idle_rss_mib": idle,
            "rss_mib_at_seconds": samples.iter().map(|(t, r)| json!({"s": t, "mib": r})).collect::<Vec<_>>(),
            "peak_rss_mib": peak, "closed_by_server": closed, "memory_stats_ms": stats_ms,
        });
        self.results.push(row);
    }
}
