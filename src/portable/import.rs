//! `mcp-memory import`: an export read into the configured store. The whole file is
//! checked first, and nothing is written unless every line passes; then it is written a
//! batch at a time. Writing skips what the store already holds (same tenant and id), so a
//! run that stops part way is finished by running it again.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::progress::Progress;
use super::{BATCH, End, FORMAT, FORMAT_WITHOUT_END, Header, Line, model_of};
use crate::config::Variables;
use crate::embed::Embedder;
use crate::memory::hex;
use crate::store::Portable;

/// Bad lines reported before the check stops listing them (it still counts them all).
const REPORTED: usize = 20;
/// The longest line read: far above any memory the checks let through (32,000 bytes of
/// content, escaped at most six-fold, and a vector of thousands of values), so a file
/// without line breaks is refused instead of read whole.
const MAX_LINE_BYTES: usize = 4 << 20;

pub async fn run(variables: Variables, input: Option<PathBuf>, reembed: bool) -> ExitCode {
    let (embedder, store) = match super::open(variables).await {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    // Read twice, so standard input is kept in a file of our own first.
    let source = match Source::open(input) {
        Ok(source) => source,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let configured = embedder.model();
    let checked = match check(&source, &configured, reembed) {
        Ok(checked) => checked,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let mut progress = Progress::new("imported", Some(checked.memories));
    let (mut written, mut read) = (0u64, 0u64);
    let mut batch: Vec<Portable> = Vec::with_capacity(BATCH);
    let mut first_line = 2;
    // The end line was checked with the rest; it holds no memory.
    let lines = match source.lines() {
        Ok(lines) => (lines.skip(1)).filter(|line| !line.as_deref().is_ok_and(End::is)),
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let mut lines = lines.peekable();
    while let Some(line) = lines.next() {
        match memory(line, checked.dimension) {
            Ok(memory) => batch.push(memory),
            Err(message) => {
                eprintln!("the file changed while it was imported: {message}");
                return ExitCode::FAILURE;
            }
        }
        if batch.len() < BATCH && lines.peek().is_some() {
            continue;
        }
        let size = batch.len() as u64;
        let stored = async {
            if reembed {
                embed_again(&embedder, &mut batch).await?;
            }
            store.import(&batch).await.map_err(|e| e.to_string())
        };
        match stored.await {
            Ok(n) => written += n as u64,
            Err(why) => {
                // What was written stays, with its counts made durable where the store
                // buffers them (S3), since a second run skips those memories.
                let _ = store.flush().await;
                eprintln!(
                    "import stopped at line {first_line}: {why}. {written} memories were written \
                     before it; importing skips what is already held, so running the same \
                     command again finishes it."
                );
                return ExitCode::FAILURE;
            }
        }
        read += size;
        first_line += size;
        progress.add(size);
        batch.clear();
    }
    if let Err(e) = store.flush().await {
        eprintln!("the store could not make the import durable: {e}");
        return ExitCode::FAILURE;
    }
    store.close().await;
    let took = progress.finish();
    eprintln!(
        "imported {written} memories ({} already held) from {} in {:.1} s",
        read - written,
        source.named,
        took.as_secs_f64()
    );
    ExitCode::SUCCESS
}

/// What the check found: how many memories, of what width.
struct Checked {
    memories: u64,
    dimension: usize,
}

/// Every line, as `Line::into_portable` checks it, against the header and the configured
/// model; the refusal lists the bad lines (line numbers from 1, the header's included).
fn check(
    source: &Source,
    configured: &crate::memory::Model,
    reembed: bool,
) -> Result<Checked, String> {
    let mut lines = source.lines()?;
    let header = match lines.next() {
        None => return Err(format!("{} is empty: nothing was imported", source.named)),
        Some(line) => line.map_err(|e| format!("line 1: {e}: nothing was imported"))?,
    };
    let mut sha = Sha256::new();
    sha.update(header.as_bytes());
    sha.update(b"\n");
    let header: Header = serde_json::from_str(&header)
        .map_err(|e| format!("line 1: not an export header ({e}): nothing was imported"))?;
    let ended = header.format == FORMAT;
    if !ended && header.format != FORMAT_WITHOUT_END {
        return Err(format!(
            "line 1: format \"{}\" is not one this release reads ({FORMAT}, \
             {FORMAT_WITHOUT_END}): nothing was imported",
            header.format
        ));
    }
    let theirs = model_of(&header);
    if theirs != *configured && !reembed {
        return Err(format!(
            "the file holds embeddings of {theirs}, but this store embeds with {configured}: \
             pass --reembed to embed every memory again with {}, or configure the file's \
             model — nothing was imported",
            configured.name
        ));
    }
    let (mut memories, mut bad) = (0u64, Vec::new());
    let mut bad_count = 0u64;
    // Each memory's tenant and id, hashed: a memory twice in one file is refused.
    let mut seen = std::collections::HashSet::new();
    let hasher =
        std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
    // Where the end line is, and what it says.
    let mut end: Option<(usize, Result<End, String>)> = None;
    let (mut last, mut memory_lines, mut stopped) = (1, 0u64, false);
    for (i, line) in lines.enumerate() {
        let number = i + 2;
        last = number;
        if let Err(message) = &line
            && message.starts_with("longer than")
        {
            bad_count += 1;
            bad.push(format!("line {number}: {message}; the check stopped there"));
            stopped = true;
            break;
        }
        if let Some((at, _)) = &end {
            bad_count += 1;
            if bad.len() < REPORTED {
                bad.push(format!(
                    "line {number}: comes after the export's end (line {at})"
                ));
            }
            continue;
        }
        if let Ok(text) = &line {
            if End::is(text) {
                end = Some((number, End::read(text)));
                continue;
            }
            sha.update(text.as_bytes());
            sha.update(b"\n");
        }
        memory_lines += 1;
        let checked = memory(line, header.dimension).and_then(|p| {
            let key = std::hash::BuildHasher::hash_one(&hasher, (p.tenant.as_str(), &p.memory.id));
            match seen.insert(key) {
                true => Ok(()),
                false => Err(format!(
                    "id: {} of tenant {} is in the file twice",
                    p.memory.id,
                    p.tenant.as_str()
                )),
            }
        });
        match checked {
            Ok(()) => memories += 1,
            Err(message) => {
                bad_count += 1;
                if bad.len() < REPORTED {
                    bad.push(format!("line {number}: {message}"));
                }
            }
        }
    }
    let (lines, digest) = (memory_lines, hex(&sha.finalize()));
    let ending = match (ended, end) {
        _ if stopped => None,
        (true, Some((at, Ok(end)))) if end.memories != lines => Some(format!(
            "line {at}: the export's end counts {} memories, but {lines} lines come before it: \
             the file lost lines",
            end.memories
        )),
        (true, Some((at, Ok(end)))) if end.sha256 != digest => Some(format!(
            "line {at}: the checksum of the export's end does not match the lines before it: \
             the file was changed or damaged"
        )),
        (true, Some((_, Ok(_)))) => None,
        (true, Some((at, Err(e)))) => Some(format!("line {at}: {e}")),
        (true, None) => Some(format!(
            "the file ends at line {last} without the export's end line (its count and \
             checksum): it was cut short after {lines} {}",
            if lines == 1 { "memory" } else { "memories" }
        )),
        (false, Some((at, _))) => Some(format!(
            "line {at}: an end line in a file of format {FORMAT_WITHOUT_END}, which has none"
        )),
        (false, None) => {
            eprintln!(
                "note: an export of format {FORMAT_WITHOUT_END} (an earlier release) has no end \
                 line, so a file cut short cannot be told from a whole one"
            );
            None
        }
    };
    if let Some(message) = ending {
        bad_count += 1;
        bad.push(message);
    }
    if bad_count > 0 {
        let more = bad_count - bad.len() as u64;
        let mut message = bad.join("\n");
        if more > 0 {
            message.push_str(&format!("\n… and {more} more"));
        }
        message.push_str(&format!("\n{bad_count} bad lines: nothing was imported"));
        return Err(message);
    }
    Ok(Checked {
        memories,
        dimension: header.dimension,
    })
}

/// The memory a line of the file holds, checked (`Line::into_portable`).
fn memory(line: Result<String, String>, dimension: usize) -> Result<Portable, String> {
    let line: Line = serde_json::from_str(&line?).map_err(|e| format!("invalid JSON: {e}"))?;
    line.into_portable(dimension)
}

/// Every memory of `batch` with a vector of the configured embedder.
async fn embed_again(embedder: &Arc<dyn Embedder>, batch: &mut [Portable]) -> Result<(), String> {
    let texts: Vec<String> = batch.iter().map(|p| p.memory.content.clone()).collect();
    let vectors = super::embed_all(embedder, texts, super::Embedding::Memory, || {}).await?;
    for (memory, vector) in batch.iter_mut().zip(vectors) {
        memory.embedding = vector;
    }
    Ok(())
}

/// The file to import, read from its start each time it is asked for.
struct Source {
    path: PathBuf,
    named: String,
    /// Standard input, kept here, removed when the import ends.
    spooled: bool,
}

impl Source {
    fn open(input: Option<PathBuf>) -> Result<Source, String> {
        if let Some(path) = input {
            std::fs::metadata(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            return Ok(Source {
                named: path.display().to_string(),
                path,
                spooled: false,
            });
        }
        let path = std::env::temp_dir().join(format!(
            "mcp-memory-import-{}-{}.jsonl",
            std::process::id(),
            crate::memory::now_ms()
        ));
        let spooled = Source {
            path,
            named: "standard input".into(),
            spooled: true,
        };
        let mut file = std::fs::File::create(&spooled.path).map_err(|e| {
            format!(
                "cannot keep standard input in {}: {e}",
                spooled.path.display()
            )
        })?;
        std::io::copy(&mut std::io::stdin().lock(), &mut file)
            .and_then(|_| file.flush())
            .map_err(|e| format!("cannot keep standard input: {e}"))?;
        Ok(spooled)
    }

    fn lines(&self) -> Result<Lines, String> {
        let file = std::fs::File::open(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.named))?;
        Ok(Lines {
            reader: BufReader::new(file),
            line: Vec::new(),
        })
    }
}

/// A file's lines, none read past `MAX_LINE_BYTES`.
struct Lines {
    reader: BufReader<std::fs::File>,
    line: Vec<u8>,
}

impl Iterator for Lines {
    type Item = Result<String, String>;

    fn next(&mut self) -> Option<Result<String, String>> {
        self.line.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        match (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.line)
        {
            Ok(0) => None,
            Err(e) => Some(Err(e.to_string())),
            Ok(_) => {
                if self.line.last() == Some(&b'\n') {
                    self.line.pop();
                } else if self.line.len() > MAX_LINE_BYTES {
                    return Some(Err(format!("longer than {MAX_LINE_BYTES} bytes")));
                }
                let line = std::mem::take(&mut self.line);
                Some(String::from_utf8(line).map_err(|_| "not UTF-8".into()))
            }
        }
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        if self.spooled {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_past_the_limit_is_refused_without_being_read_whole() {
        let dir = std::env::temp_dir().join(format!("mcp-memory-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("long.jsonl");
        let mut text = String::from("first\r\n");
        text.push_str(&"x".repeat(MAX_LINE_BYTES + 10));
        std::fs::write(&path, &text).unwrap();
        let source = Source {
            path: path.clone(),
            named: "long.jsonl".into(),
            spooled: true,
        };
        let mut lines = source.lines().unwrap();
        assert_eq!(lines.next(), Some(Ok("first\r".into())));
        let refused = lines.next().unwrap().unwrap_err();
        assert_eq!(refused, format!("longer than {MAX_LINE_BYTES} bytes"));
        drop(lines);
        drop(source);
        assert!(!path.exists(), "a spooled file is removed");
    }
}
