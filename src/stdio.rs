//! MCP over stdio (docs/behavior.md#stdio), for clients that start the server as a child
//! process: one JSON-RPC message per line on stdin, each answer one line on stdout, both
//! eras as over HTTP. Stdout carries protocol messages and nothing else. The caller's
//! identity is the configuration's (`MEMORY_TENANT`, `MEMORY_CONVERSATION`), checked once at
//! start, since there are no headers.

use std::io::BufRead;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use crate::app::App;
use crate::context::RequestContext;
use crate::log;
use crate::mcp::{self, Arrival};

/// Messages handled at once; past it, stdin is not read until one is answered.
const IN_FLIGHT: usize = 16;

/// A line of stdin.
enum Line {
    Message(Vec<u8>),
    /// Longer than the limit: skipped to its end, never held whole.
    Oversized,
}

/// Serves stdin until it ends or `stop` resolves, then waits for the calls under way (up
/// to `drain`) and for their answers to be written.
pub async fn serve(
    app: Arc<App>,
    caller: RequestContext,
    stop: impl std::future::Future<Output = ()>,
    drain: std::time::Duration,
) {
    let (lines, mut incoming) = mpsc::channel(IN_FLIGHT);
    read_lines(std::io::stdin(), app.body_limit, lines);
    let (answers, outgoing) = mpsc::channel::<Vec<u8>>(IN_FLIGHT);
    let writer = tokio::spawn(write_lines(outgoing));
    let identity = Ok(caller);
    let negotiated: Arc<Mutex<Option<String>>> = Arc::default();
    let turns = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut running = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        let line = tokio::select! {
            line = incoming.recv() => line,
            () = &mut stop => None,
        };
        let Some(line) = line else { break };
        let message = match line {
            Line::Message(message) => message,
            Line::Oversized => {
                let refusal = mcp::refusal(
                    -32600,
                    &format!(
                        "Request too large: a message is at most {} bytes",
                        app.body_limit
                    ),
                );
                let _ = answers.send(refusal.to_string().into_bytes()).await;
                continue;
            }
        };
        // A signal while every turn is taken ends the reading too.
        let turn = tokio::select! {
            turn = Arc::clone(&turns).acquire_owned() => turn,
            () = &mut stop => break,
        };
        let Ok(turn) = turn else { break };
        let (app, identity, negotiated, answers) = (
            Arc::clone(&app),
            identity.clone(),
            Arc::clone(&negotiated),
            answers.clone(),
        );
        running.spawn(async move {
            let _turn = turn;
            let agreed = lock(&negotiated).clone();
            let arrival = Arrival::Stdio {
                negotiated: agreed.as_deref(),
            };
            let reply = mcp::handle(&app.tools, arrival, &identity, &message).await;
            if let Some(version) = mcp::negotiated(&reply) {
                *lock(&negotiated) = Some(version.to_owned());
            }
            if let Some(body) = reply.body {
                let _ = answers.send(body.to_string().into_bytes()).await;
            }
        });
        while running.try_join_next().is_some() {}
    }
    // Stdin ended or a signal came: the calls under way finish and are answered.
    let finished = async { while running.join_next().await.is_some() {} };
    if tokio::time::timeout(drain, finished).await.is_err() {
        log::error(
            "stdio_drain_timed_out",
            "calls still running at the deadline were abandoned",
            &log::Fields::default(),
        );
    }
    drop(answers);
    let _ = writer.await;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reads `input` on a thread of its own (a read that never returns cannot hold up the
/// runtime's shutdown), a line at a time of at most `limit` bytes, until it ends.
fn read_lines(input: impl std::io::Read + Send + 'static, limit: usize, lines: mpsc::Sender<Line>) {
    std::thread::spawn(move || {
        let mut input = std::io::BufReader::new(input);
        loop {
            match next_line(&mut input, limit) {
                Ok(Some(line)) => {
                    if lines.blocking_send(line).is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    log::error("stdin_unreadable", &e.to_string(), &log::Fields::default());
                    return;
                }
            }
        }
    });
}

/// The next non-blank line without its line break (`\n` or `\r\n`), or None at the end of
/// the input. A last line without a line break still counts.
fn next_line(input: &mut impl BufRead, limit: usize) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut oversized = false;
    loop {
        let buffer = input.fill_buf()?;
        if buffer.is_empty() {
            return Ok(match (oversized, blank(&line)) {
                (true, _) => Some(Line::Oversized),
                (false, true) => None,
                (false, false) => Some(Line::Message(line)),
            });
        }
        let (taken, ended) = match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (buffer.len(), false),
        };
        if !oversized {
            let piece = &buffer[..taken - usize::from(ended)];
            if line.len() + piece.len() > limit {
                oversized = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(piece);
            }
        }
        input.consume(taken);
        if ended {
            if oversized {
                return Ok(Some(Line::Oversized));
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if !blank(&line) {
                return Ok(Some(Line::Message(line)));
            }
            line.clear();
        }
    }
}

fn blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Writes each answer as one line of stdout, flushed, until every sender is gone. A
/// closed stdout (the client went away) ends it; the calls still finish.
async fn write_lines(mut outgoing: mpsc::Receiver<Vec<u8>>) {
    let mut stdout = tokio::io::stdout();
    while let Some(mut line) = outgoing.recv().await {
        line.push(b'\n');
        if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], limit: usize) -> Vec<Option<Vec<u8>>> {
        let mut reader = std::io::BufReader::with_capacity(4, input);
        let mut seen = Vec::new();
        while let Some(line) = next_line(&mut reader, limit).unwrap() {
            seen.push(match line {
                Line::Message(m) => Some(m),
                Line::Oversized => None,
            });
        }
        seen
    }

    #[test]
    fn lines_end_at_line_breaks_skip_blanks_and_refuse_what_is_too_long() {
        let input = b"{\"a\":1}\r\n\n  \n0123456789abc\n{}\nlast";
        assert_eq!(
            lines(input, 10),
            [
                Some(b"{\"a\":1}".to_vec()),
                None,
                Some(b"{}".to_vec()),
                Some(b"last".to_vec())
            ]
        );
        // Exactly the limit passes; one byte more does not, and the next line is whole.
        assert_eq!(lines(b"0123456789\n", 10), [Some(b"0123456789".to_vec())]);
        assert_eq!(lines(b"0123456789a\nok", 10), [None, Some(b"ok".to_vec())]);
        assert!(lines(b"", 10).is_empty());
    }
}
