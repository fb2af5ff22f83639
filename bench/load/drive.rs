//! The load generator: `concurrency` clients, each sending one MCP `tools/call` at a time
//! over a kept-alive connection for a fixed time, as an agent platform's pods would.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::corpus::{Corpus, Rng};

#[derive(Clone, Copy, PartialEq)]
pub enum Mix {
    /// 90 % recall, 10 % remember.
    RecallHeavy,
    RememberOnly,
}

impl Mix {
    pub fn name(self) -> &'static str {
        match self {
            Mix::RecallHeavy => "recall-90/remember-10",
            Mix::RememberOnly => "remember-only",
        }
    }
}

#[derive(Default)]
pub struct Outcome {
    /// Microseconds, per tool.
    pub latencies: HashMap<&'static str, Vec<u32>>,
    pub errors: Vec<String>,
    /// Ids the server said it stored, per tenant.
    pub stored: HashMap<String, Vec<String>>,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn requests(&self) -> usize {
        self.latencies.values().map(Vec::len).sum()
    }
}

/// One tool call; the text of its result, or why it is not a successful one.
pub async fn call(
    client: &reqwest::Client,
    url: &str,
    tenant: &str,
    tool: &str,
    arguments: Value,
) -> Result<String, String> {
    let reply = client
        .post(format!("{url}/mcp"))
        .header("x-memory-tenant", tenant)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": arguments}}))
        .send()
        .await
        .map_err(|e| format!("{tool}: {e}"))?;
    let status = reply.status();
    let body: Value = reply.json().await.map_err(|e| format!("{tool}: {e}"))?;
    let text = body["result"]["content"][0]["text"].as_str();
    match text {
        Some(text) if status == 200 && body["result"]["isError"] != true => Ok(text.to_owned()),
        _ => Err(format!("{tool}: HTTP {status}: {body}")),
    }
}

/// One run of the load: `concurrency` clients send `mix` for `warmup` unmeasured and then
/// `duration` measured; `seed` makes the calls differ from other runs'.
pub struct Load {
    pub mix: Mix,
    pub concurrency: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
}

/// Runs `load` against `tenants`, one drawn at random per call.
pub async fn run(client: &reqwest::Client, url: &str, tenants: &[String], load: &Load) -> Outcome {
    let Load {
        mix,
        concurrency,
        warmup,
        duration,
        seed,
    } = *load;
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let corpus = Arc::new(Corpus::new());
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + duration;
    let workers: Vec<_> = (0..concurrency)
        .map(|w| {
            let (client, url, tenants) = (client.clone(), url.to_owned(), tenants.to_vec());
            let (outcome, corpus) = (Arc::clone(&outcome), Arc::clone(&corpus));
            tokio::spawn(async move {
                let mut rng = Rng::new(seed * 1000 + w as u64);
                let mut n = 0;
                let mut mine = Outcome::default();
                while Instant::now() < end {
                    let tenant = &tenants[rng.below(tenants.len())];
                    let remember = mix == Mix::RememberOnly || rng.below(10) == 0;
                    let (tool, arguments) = if remember {
                        n += 1;
                        let marker = format!("load{seed}w{w}n{n}");
                        let content = corpus.memory(&mut rng, &marker);
                        ("remember", json!({"content": content, "type": "project"}))
                    } else {
                        ("recall", json!({"query": corpus.question(&mut rng)}))
                    };
                    let sent = Instant::now();
                    let result = call(&client, &url, tenant, tool, arguments).await;
                    let took = sent.elapsed();
                    match result {
                        Ok(text) => {
                            if let Some(id) = text.strip_prefix("[MEMORY] Stored as ") {
                                let id = id.chars().take(26).collect();
                                mine.stored.entry(tenant.clone()).or_default().push(id);
                            } else if remember {
                                mine.errors.push(format!("remember did not store: {text}"));
                            }
                        }
                        Err(e) => mine.errors.push(e),
                    }
                    if sent >= measure_from {
                        let micros = took.as_micros().min(u32::MAX as u128) as u32;
                        mine.latencies.entry(tool).or_default().push(micros);
                    }
                }
                let mut all = outcome.lock().unwrap();
                for (tool, l) in mine.latencies {
                    all.latencies.entry(tool).or_default().extend(l);
                }
                all.errors.extend(mine.errors);
                for (tenant, ids) in mine.stored {
                    all.stored.entry(tenant).or_default().extend(ids);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.unwrap();
    }
    let mut outcome = Arc::try_unwrap(outcome).ok().unwrap().into_inner().unwrap();
    outcome.elapsed = end.saturating_duration_since(measure_from);
    outcome
}

/// p-th percentile (0–100) of `micros`, in milliseconds.
pub fn percentile(micros: &mut [u32], p: f64) -> f64 {
    if micros.is_empty() {
        return 0.0;
    }
    micros.sort_unstable();
    let rank = ((p / 100.0) * (micros.len() - 1) as f64).round() as usize;
    f64::from(micros[rank]) / 1000.0
}
