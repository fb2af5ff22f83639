//! How far a command has got: a bar (indicatif) when stderr is a terminal, otherwise a
//! plain line every few seconds, for logs.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a plain line is written.
const EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    verb: &'static str,
    bar: Option<ProgressBar>,
    done: u64,
    started: Instant,
    said: Instant,
}

impl Progress {
    /// `verb` ("exported", "imported") of `total` memories, when known.
    pub fn new(verb: &'static str, total: Option<u64>) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = match total {
                Some(total) => ProgressBar::new(total),
                None => ProgressBar::new_spinner(),
            };
            bar.set_draw_target(ProgressDrawTarget::stderr());
            let template = match total {
                Some(_) => "{bar:40} {pos}/{len} memories {msg} ({per_sec}, {eta} left)",
                None => "{spinner} {pos} memories {msg} ({per_sec})",
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar.set_message(verb);
            bar
        });
        let now = Instant::now();
        Progress {
            verb,
            bar,
            done: 0,
            started: now,
            said: now,
        }
    }

    /// Starts from `n` done already (by an earlier run).
    pub fn resume(&mut self, n: u64) {
        self.done = n;
        if let Some(bar) = &self.bar {
            bar.set_position(n);
        }
    }

    pub fn add(&mut self, n: u64) {
        self.done += n;
        match &self.bar {
            Some(bar) => bar.inc(n),
            None if self.said.elapsed() >= EVERY => {
                eprintln!("{} {} memories…", self.verb, self.done);
                self.said = Instant::now();
            }
            None => {}
        }
    }

    /// Clears the bar; the caller writes the summary.
    pub fn finish(self) -> Duration {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
        self.started.elapsed()
    }
}
