//! The real binary as the system under test: its own process, started with an environment,
//! watched through /proc (resident memory, CPU time), stopped with SIGTERM.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// This build's binary; `LOAD_BINARY` names another, to compare two builds under one bench.
const BINARY: &str = env!("CARGO_BIN_EXE_mcp-memory");
/// Linux's USER_HZ on every architecture Rust targets here (`getconf CLK_TCK`).
const TICKS_PER_SECOND: f64 = 100.0;

pub struct Server {
    pub url: String,
    child: Child,
    /// From spawn to the first 200 on `/health`.
    pub startup: Duration,
}

impl Server {
    pub async fn start(env: &[(&str, String)], client: &reqwest::Client) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let began = Instant::now();
        let binary = std::env::var("LOAD_BINARY").unwrap_or_else(|_| BINARY.to_owned());
        let mut child = Command::new(binary)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("HOST", "127.0.0.1")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let url = format!("http://127.0.0.1:{port}");
        let deadline = began + Duration::from_secs(300);
        while Instant::now() < deadline {
            let healthy = client
                .get(format!("{url}/health"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200);
            if healthy {
                return Server {
                    url,
                    child,
                    startup: began.elapsed(),
                };
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("the server never became healthy");
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn proc_file(&self, name: &str) -> String {
        std::fs::read_to_string(format!("/proc/{}/{name}", self.child.id())).unwrap_or_default()
    }

    /// Resident set size in MiB.
    pub fn rss_mib(&self) -> f64 {
        self.status_mib("VmRSS:")
    }

    /// The most it was ever resident, in MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        self.status_mib("VmHWM:")
    }

    /// Resident anonymous memory (the heap's, which the kernel cannot drop), in MiB.
    pub fn anon_mib(&self) -> f64 {
        self.status_mib("RssAnon:")
    }

    /// Resident pages of mapped files (the index's vector files among them), in MiB.
    pub fn file_mib(&self) -> f64 {
        self.status_mib("RssFile:")
    }

    fn status_mib(&self, field: &str) -> f64 {
        self.proc_file("status")
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    }

    /// User + system CPU time of every thread so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = self.proc_file("stat");
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime are fields 14 and 15 of stat(5): 11 and 12 after the name.
        (ticks(11) + ticks(12)) / TICKS_PER_SECOND
    }

    pub fn stop(self) {
        drop(self);
    }
}

/// A server never outlives the benchmark, even one that panics.
impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
