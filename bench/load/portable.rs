//! Export and import of a large store (`LOAD_ONLY=portable`): 100k memories at width 384 in
//! 10 tenants, seeded directly, exported to a file by the binary, then imported by it into
//! a fresh store of the same backend. Each command's wall time and peak resident memory
//! (VmHWM, polled while it runs).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{Backend, Bench, seed};

const TENANTS: usize = 10;
const PER_TENANT: usize = 10_000;

/// Runs the binary with `env` and `args` to its end, which must say `expected` on stderr:
/// seconds taken and peak RSS in MiB.
fn timed(env: &[(&str, String)], args: &[&str], expected: &str) -> (f64, f64) {
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
            return (began.elapsed().as_secs_f64(), peak_kib / 1024.0);
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
                ("import", target, vec!["import", "--in", &file], imported),
            ];
            for (command, url, args, expected) in runs {
                let (seconds, peak) = timed(&self.env(&url, 384, None), &args, &expected);
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
        }
    }
}
