//! The real binary as a child process: started on a free loopback port, called over MCP,
//! stopped with SIGTERM, with everything it printed collected.

use std::collections::HashMap;
use std::process::Stdio;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

pub const BINARY: &str = env!("CARGO_BIN_EXE_mcp-memory");

/// Sends SIGTERM to the process `pid`, as an orchestrator stopping it would.
pub fn sigterm(pid: u32) {
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
}

/// Sends `signal` (`HUP`, `TERM`…) to the process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One JSON-RPC message POSTed to `{url}/mcp` with `headers`, and the JSON answer.
pub async fn rpc(url: &str, headers: &[(&str, &str)], message: &Value) -> Value {
    let mut request = reqwest::Client::new()
        .post(format!("{url}/mcp"))
        .json(message);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.send().await.unwrap().json().await.unwrap()
}

pub fn command(env: &HashMap<String, String>) -> Command {
    let mut cmd = Command::new(BINARY);
    cmd.env_clear()
        .envs(env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

pub struct Running {
    pub url: String,
    child: Child,
    /// Every stdout line, collected until the process exits.
    stdout: JoinHandle<Vec<String>>,
}

pub struct Exited {
    pub code: Option<i32>,
    pub stdout: Vec<String>,
    pub stderr: String,
}

pub async fn start(env: &mut HashMap<String, String>) -> Running {
    env.insert("HOST".into(), "127.0.0.1".into());
    start_as_given(env).await
}

/// `start` with `HOST` as `env` has it: unset, the server's default.
pub async fn start_as_given(env: &mut HashMap<String, String>) -> Running {
    let port = free_port();
    env.insert("PORT".into(), port.to_string());
    let mut child = command(env).spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let stdout = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            all.push(line);
        }
        all
    });
    let url = format!("http://127.0.0.1:{port}");
    // Up to a minute: a loaded machine may take long to load a model; a server that exits
    // instead fails at once, with what it said.
    for _ in 0..2400 {
        if reqwest::get(format!("{url}/health"))
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            return Running { child, url, stdout };
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr).await;
            }
            panic!("the server exited ({status}) before it was healthy: {stderr}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the server never became healthy within a minute");
}

impl Running {
    /// A tool call's text; see `call_tool` for the error flag too.
    pub async fn call(&self, headers: &[(&str, &str)], tool: &str, args: Value) -> String {
        self.call_tool(headers, tool, args).await.0
    }

    /// A tool call's text and error flag. Panics on anything but a tool result: a
    /// dependency failure must never become a protocol error.
    pub async fn call_tool(
        &self,
        headers: &[(&str, &str)],
        tool: &str,
        args: Value,
    ) -> (String, bool) {
        let mut request = reqwest::Client::new()
            .post(format!("{}/mcp", self.url))
            .header("content-type", "application/json")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}}));
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let reply: Value = request.send().await.unwrap().json().await.unwrap();
        let text = reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("not a tool result: {reply}"))
            .to_owned();
        (text, reply["result"]["isError"] == true)
    }

    /// A gauge or counter of `GET /metrics` without labels; panics if it is not there.
    pub async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
            .parse()
            .unwrap()
    }

    /// The process id, to signal it.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// The names `tools/list` offers, in order.
    pub async fn tool_names(&self) -> Vec<String> {
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let reply = rpc(&self.url, &[], &list).await;
        reply["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("not a tool list: {reply}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    pub async fn terminate(mut self) -> Exited {
        sigterm(self.child.id().unwrap());
        let status = self.child.wait().await.unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .await
            .unwrap();
        Exited {
            code: status.code(),
            stdout: self.stdout.await.unwrap(),
            stderr,
        }
    }
}

/// A server on its own SQLite file and embedding stub, with `extra` variables.
pub struct Served {
    pub server: Running,
    pub stub: super::EmbeddingStub,
    pub dir: tempfile::TempDir,
}

pub async fn serve(extra: &[(&str, &str)]) -> Served {
    let stub = super::EmbeddingStub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = super::base_env(&stub, &dir.path().join("memory.db"));
    for (k, v) in extra {
        env.insert((*k).into(), (*v).into());
    }
    Served {
        server: start(&mut env).await,
        stub,
        dir,
    }
}
