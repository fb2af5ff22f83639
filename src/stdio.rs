//! MCP over stdio (docs/protocol.md#stdio), for clients that start the server as a child
//! process: one JSON-RPC message per line on stdin, each answer one line on stdout, both
//! eras as over HTTP. Stdout carries protocol messages and nothing else. The caller's
//! identity is the configuration's (`MEMORY_TENANT`, `MEMORY_CONVERSATION`), checked once at
//! start, since there are no headers.

use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use crate::app::App;
use crate::context::RequestContext;
use crate::log;
use crate::mcp::{self, Arrival};

/// Messages handled at once; past it, stdin is not read until one is answered.
const IN_FLIGHT: usize = 16;

/// How long the answers already made may take to be written once a drain ran out its time.
const LAST_WRITES: std::time::Duration = std::time::Duration::from_secs(1);

/// A line of stdin.
enum Line {
    Message(Vec<u8>),
    /// Longer than the limit: skipped to its end, never held whole.
    Oversized,
}

/// Serves stdin until it ends or `stop` resolves, then lets the calls under way finish and
/// their answers be written, all within `drain`: past it, the calls still running are
/// abandoned, and so are answers a client that stopped reading never took, so the process
/// always ends (docs/protocol.md#stdio). A client that closed stdin and has left an answer
/// untaken for `MCP_WRITE_TIMEOUT_MS` is gone: reading stops there too, though the end of
/// stdin may still be behind lines it sent.
pub async fn serve(
    app: Arc<App>,
    caller: RequestContext,
    stop: impl std::future::Future<Output = ()>,
    drain: Duration,
) {
    let (lines, mut incoming) = mpsc::channel(IN_FLIGHT);
    read_lines(std::io::stdin(), app.body_limit, lines);
    let (answers, outgoing) = mpsc::channel::<Vec<u8>>(IN_FLIGHT);
    let stalled = Stalled::default();
    let written = write_lines(std::io::stdout(), outgoing, stalled.clone());
    let gone = client_gone(hung_up(), stalled, app.timeouts.write);
    tokio::pin!(gone);
    // Tells the calls waiting to answer that nobody will take their answers.
    let (left, leaving) = watch::channel(false);
    let mut client_left = false;
    let identity = Ok(caller);
    let negotiated: Arc<Mutex<Option<String>>> = Arc::default();
    let turns = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut running = tokio::task::JoinSet::new();
    tokio::pin!(stop);
    loop {
        let line = tokio::select! {
            line = incoming.recv() => line,
            () = &mut stop => None,
            () = &mut gone => {
                client_left = true;
                None
            }
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
                // A client that stopped reading cannot hold the signal up.
                tokio::select! {
                        _ = answers.send(refusal.to_string().into_bytes()) => {}
                        () = &mut stop => break,
                        () = &mut gone => {
                    client_left = true;
                    break;
                }
                    }
                continue;
            }
        };
        // A signal while every turn is taken ends the reading too.
        let turn = tokio::select! {
            turn = Arc::clone(&turns).acquire_owned() => turn,
            () = &mut stop => break,
            () = &mut gone => {
                client_left = true;
                break;
            }
        };
        let Ok(turn) = turn else { break };
        let (app, identity, negotiated, answers, mut leaving) = (
            Arc::clone(&app),
            identity.clone(),
            Arc::clone(&negotiated),
            answers.clone(),
            leaving.clone(),
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
                tokio::select! {
                    _ = answers.send(body.to_string().into_bytes()) => {}
                    _ = leaving.wait_for(|gone| *gone) => {}
                }
            }
        });
        while running.try_join_next().is_some() {}
    }
    if client_left {
        let _ = left.send(true);
    }
    // Stdin ended or a signal came: the calls under way finish and are answered.
    let deadline = tokio::time::Instant::now() + drain;
    let finished = async { while running.join_next().await.is_some() {} };
    if tokio::time::timeout_at(deadline, finished).await.is_err() {
        log::error(
            "stdio_drain_timed_out",
            "calls still running at the deadline were abandoned",
            &log::Fields::default(),
        );
        running.abort_all();
        while running.join_next().await.is_some() {}
    }
    drop(answers);
    // The answers of calls that finished get their moment even when others ran out the drain.
    let writing = deadline.max(tokio::time::Instant::now() + LAST_WRITES);
    if tokio::time::timeout_at(writing, written).await.is_err() {
        log::error(
            "stdio_answers_not_taken",
            "the client stopped reading standard output; answers it never took were dropped",
            &log::Fields::default(),
        );
    }
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

/// Since when the answer being written has made no progress (None while nothing waits to
/// be written): what tells a client that stopped reading from a slow one.
#[derive(Clone, Default)]
struct Stalled(Arc<Mutex<Option<Instant>>>);

impl Stalled {
    fn set(&self, since: Option<Instant>) {
        *lock(&self.0) = since;
    }

    fn since(&self) -> Option<Instant> {
        *lock(&self.0)
    }
}

/// Writes each answer as one line of `output`, flushed, until every sender is gone, on a
/// thread of its own: a write to a client that stopped reading never returns, and on the
/// runtime's blocking pool it would hold up the runtime's shutdown, and so the exit. The
/// receiver resolves when the writing ends; a closed output (the client went away) ends it
/// too, and the calls still finish. `stalled` follows each write's progress.
fn write_lines(
    output: impl std::io::Write + Send + 'static,
    mut outgoing: mpsc::Receiver<Vec<u8>>,
    stalled: Stalled,
) -> oneshot::Receiver<()> {
    let (done, ended) = oneshot::channel();
    std::thread::spawn(move || {
        let mut output = output;
        while let Some(mut line) = outgoing.blocking_recv() {
            line.push(b'\n');
            if write_line(&mut output, &line, &stalled).is_err() {
                break;
            }
        }
        let _ = done.send(());
    });
    ended
}

/// `write_all` and a flush, noting each piece the client took.
fn write_line(
    output: &mut impl std::io::Write,
    line: &[u8],
    stalled: &Stalled,
) -> std::io::Result<()> {
    let mut rest = line;
    stalled.set(Some(Instant::now()));
    while !rest.is_empty() {
        match output.write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                rest = &rest[n..];
                stalled.set(Some(Instant::now()));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let flushed = output.flush();
    stalled.set(None);
    flushed
}

/// Resolves when the client has closed stdin (its end of the pipe) and an answer has waited
/// `limit` for it without progress: it stopped reading and will send nothing more. Never
/// resolves while it takes its answers, however long stdin stays behind them.
async fn client_gone(hung_up: oneshot::Receiver<()>, stalled: Stalled, limit: Duration) {
    if hung_up.await.is_err() {
        return std::future::pending().await;
    }
    loop {
        let wait = match stalled.since() {
            Some(since) if since.elapsed() >= limit => return,
            Some(since) => limit - since.elapsed(),
            None => limit,
        };
        tokio::time::sleep(wait).await;
    }
}

/// Resolves when the other end of stdin is closed, even while lines it sent are still
/// unread (a pipe reports the hang-up at once; the end of its data only once read up to).
/// A file or a terminal never resolves it: for them the end of the data is the end.
fn hung_up() -> oneshot::Receiver<()> {
    let (hung_up, hang_up) = oneshot::channel();
    #[cfg(unix)]
    std::thread::spawn(move || {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let events = libc::POLLRDHUP;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let events = 0;
        let mut stdin = libc::pollfd {
            fd: 0,
            events,
            revents: 0,
        };
        loop {
            // SAFETY: one pollfd of this frame; fd 0 is only polled, never closed here.
            let ready = unsafe { libc::poll(&mut stdin, 1, -1) };
            if ready < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {
                continue;
            }
            if ready < 0 || stdin.revents & libc::POLLNVAL != 0 {
                return; // not a descriptor poll can watch: leave it to the end of the data
            }
            if stdin.revents & (libc::POLLHUP | libc::POLLERR | events) != 0 {
                let _ = hung_up.send(());
                return;
            }
        }
    });
    #[cfg(not(unix))]
    std::mem::forget(hung_up);
    hang_up
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
