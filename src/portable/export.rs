//! `mcp-memory export`: every memory of the configured store (or of some tenants), a page
//! at a time, so resident memory stays flat however large the store.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use sha2::{Digest, Sha256};

use super::progress::Progress;
use super::{BATCH, End, FORMAT, Header, Line};
use crate::config::Variables;
use crate::memory::{Tenant, hex, iso, now_ms};

pub async fn run(variables: Variables, tenants: Vec<String>, out: Option<PathBuf>) -> ExitCode {
    let only: Vec<Tenant> = match (tenants.into_iter())
        .map(|t| crate::memory::Tenant::parse("--tenant", t))
        .collect()
    {
        Ok(only) => only,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let (embedder, store) = match super::open(variables).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let (mut sink, named): (Box<dyn Write>, String) = match &out {
        Some(path) => match std::fs::File::create(path) {
            Ok(file) => (Box::new(file), path.display().to_string()),
            Err(e) => {
                eprintln!("cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        },
        None => (Box::new(std::io::stdout().lock()), "standard output".into()),
    };
    let mut sink = Hashed {
        inner: std::io::BufWriter::new(&mut sink),
        sha: Sha256::new(),
    };
    let at = now_ms();
    let model = embedder.model();
    let header = Header {
        format: FORMAT.into(),
        model: model.name,
        dimension: model.dimension,
        exported_at: iso(at),
    };
    let mut progress = Progress::new("exported", None);
    let (mut written, mut tenants_seen) = (0u64, std::collections::BTreeSet::new());
    let mut from: Option<String> = None;
    let failed = |written: u64, why: String| {
        eprintln!("export failed after {written} memories: {why}");
        ExitCode::FAILURE
    };
    if let Err(e) = writeln!(sink, "{}", json(&header)) {
        return failed(0, e.to_string());
    }
    loop {
        let page = match store.export(&only, at, from.as_deref(), BATCH).await {
            Ok(page) => page,
            Err(e) => return failed(written, e.to_string()),
        };
        for memory in &page.memories {
            if let Err(e) = writeln!(sink, "{}", json(&Line::of(memory))) {
                return failed(written, e.to_string());
            }
            tenants_seen.insert(memory.tenant.as_str().to_owned());
            written += 1;
        }
        progress.add(page.memories.len() as u64);
        match page.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    let end = End {
        memories: written,
        sha256: hex(&sink.sha.finalize_reset()),
    };
    if let Err(e) = writeln!(sink.inner, "{}", end.line()).and_then(|()| sink.flush()) {
        return failed(written, e.to_string());
    }
    let took = progress.finish();
    eprintln!(
        "exported {written} memories of {} tenants to {named} in {:.1} s",
        tenants_seen.len(),
        took.as_secs_f64()
    );
    ExitCode::SUCCESS
}

fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// A writer that hashes what it writes, for the end line.
struct Hashed<W> {
    inner: W,
    sha: Sha256,
}

impl<W: Write> Write for Hashed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
