//! Export and import of a large store (`LOAD_ONLY=portable`): 100k memories at width 384 in
//! 10 tenants, seeded directly, exported to a file by the binary, then imported by it into
//! a fresh store of the same backend, which `reembed` then embeds again with another model
//! (the stub at width 256); and a small store re-embedded by the local model. Each command's
//! wall time and peak resident memory (VmHWM, polled while it runs).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Backend, Bench, seed};

const TENANTS: usize = 10;
const PER_TENANT: usize = 10_000;
/// Memories the local model embeds again: enough for a steady rate.
const LOCAL_MEMORIES: usize = 2_000;

/// Runs the binary with `env` and `args` to its end, which must say `expected` on stderr:
/// seconds taken, peak RSS in MiB, and what it said.
fn timed(env: &[(&str, String)], args: &[&str], expected: &str) -> (f64, f64, String) {
    let binary = std::env::var("LOAD_BINARY")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-memory").to_owned());
    let began = Instant::now();
    let mut child = std::process::Command::new(binary)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0.0f64;
    loop {
        if let Some(kib) = std::fs::read_to_string(&status).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        }) {
            peak_kib = peak_kib.max(kib);
        }
        if let Some(exit) = child.try_wait().unwrap() {
            let mut said = String::new();
            use std::io::Read;
            let _ = child.stderr.take().unwrap().read_to_string(&mut said);
            assert!(exit.success(), "{args:?} failed: {said}");
            assert!(said.contains(expected), "{args:?}: {said}");
            return (began.elapsed().as_secs_f64(), peak_kib / 1024.0, said);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Bench {
    pub async fn portable(&mut self, backends: &[Backend]) {
        let total = TENANTS * PER_TENANT;
        println!("\n## Export and import, {total} memories at width 384 ({TENANTS} tenants)\n");
        println!(
            "| store | command | seconds | memories/s | peak RSS MiB |\n|---|---|---|---|---|"
        );
        for backend in backends {
            let source = self.fresh_store(*backend, "portable-source").await;
            let tenants: Vec<String> = (0..TENANTS).map(|t| format!("load-{t}")).collect();
            let rows = seed::rows(&tenants, PER_TENANT, 384);
            Bench::seed(*backend, &source, rows, 384).await;
            // Opened once first: the seed leaves out the rows' terms, which the first open of
            // the store adds, and that is not the export's time.
            timed(&self.env(&source, 384, None), &["--check-config"], "");
            let file = self
                .scratch
                .path()
                .join(format!("{}.jsonl", backend.name()));
            let file = file.to_str().unwrap().to_owned();
            let target = self.fresh_store(*backend, "portable-target").await;
            let exported = format!("exported {total} memories of {TENANTS} tenants");
            let imported = format!("imported {total} memories (0 already held)");
            let runs = [
                (
                    "export",
                    source.clone(),
                    vec!["export", "--out", &file],
                    exported,
                ),
                (
                    "import",
                    target.clone(),
                    vec!["import", "--in", &file],
                    imported,
                ),
            ];
            for (command, url, args, expected) in runs {
                let (seconds, peak, _) = timed(&self.env(&url, 384, None), &args, &expected);
                let rate = total as f64 / seconds;
                println!(
                    "| {} | {command} | {seconds:.1} | {rate:.0} | {peak:.0} |",
                    backend.name()
                );
                let row: Value = json!({"part": "portable", "store": backend.name(),
                    "command": command, "memories": total, "seconds": seconds,
                    "memories_per_second": rate, "peak_rss_mib": peak});
                self.results.push(row);
            }
            // The imported store, embedded again by another model (the stub at width 256):
            // the store's side of `reembed`, the embedder costing next to nothing.
            self.reembed(*backend, &target, 256, None, total);
            // A small store embedded by the local model: what bounds a real re-embedding.
            if let Some(model) = crate::local_model() {
                let small = self.fresh_store(*backend, "portable-local").await;
                let rows: Vec<seed::Row> = seed::rows(&tenants[..1], LOCAL_MEMORIES, 384).collect();
                let texts: Vec<String> = rows.iter().map(|r| r.content.clone()).collect();
                Bench::seed(*backend, &small, rows.into_iter(), 384).await;
                self.reembed(*backend, &small, 384, Some(&model), LOCAL_MEMORIES);
                self.embedder_alone(*backend, &model, texts).await;
            }
        }
    }

    /// The local model embedding the same texts in this process, as many in flight as
    /// `reembed` keeps: the rate a re-embedding is bounded by.
    async fn embedder_alone(&mut self, backend: Backend, model: &str, texts: Vec<String>) {
        use futures_util::StreamExt;
        let unused = format!("sqlite:{}", self.scratch.path().join("unused.db").display());
        let env = self.env(&unused, 384, Some(model));
        let config = mcp_memory::config::Config::from_vars(|k| {
            env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        })
        .unwrap();
        let embedder = mcp_memory::embed::build(&config.embedder).unwrap();
        let (count, began) = (texts.len(), Instant::now());
        let embedder = &embedder;
        futures_util::stream::iter(texts)
            .map(|text| async move { embedder.embed(&text).await.unwrap() })
            .buffered(16)
            .collect::<Vec<_>>()
            .await;
        let seconds = began.elapsed().as_secs_f64();
        let rate = count as f64 / seconds;
        println!(
            "| {} | the local model alone, same {count} texts, 16 in flight | {seconds:.1} | {rate:.0} | — |",
            backend.name()
        );
        self.results
            .push(json!({"part": "portable", "store": backend.name(),
            "command": "local model alone", "memories": count, "seconds": seconds,
            "memories_per_second": rate}));
    }

    /// `mcp-memory reembed` of the `memories` at `url` with the stub at `width`, or the local
    /// `model`: one table row.
    fn reembed(
        &mut self,
        backend: Backend,
        url: &str,
        width: usize,
        model: Option<&str>,
        memories: usize,
    ) {
        let expected = format!("re-embedded {memories} memories");
        let (seconds, peak, said) = timed(&self.env(url, width, model), &["reembed"], &expected);
        // The summary's "(the switch took <s> s)": how long writes waited.
        let switch: f64 = (said.split("the switch took ").nth(1))
            .and_then(|rest| rest.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN);
        let rate = memories as f64 / seconds;
        let by = match model {
            Some(_) => "local model",
            None => "stub embedder",
        };
        println!(
            "| {} | reembed {memories} ({by}; the switch {switch:.1} s) | {seconds:.1} | {rate:.0} | {peak:.0} |",
            backend.name()
        );
        self.results
            .push(json!({"part": "portable", "store": backend.name(),
            "command": format!("reembed ({by})"), "memories": memories, "seconds": seconds,
            "memories_per_second": rate, "peak_rss_mib": peak, "switch_seconds": switch}));
    }
}
