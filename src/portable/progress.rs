//! How far a command has got: a bar (indicatif) when stderr is a terminal, otherwise a
//! plain line every few seconds, for logs.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a plain line is written.
const EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    verb: &'static str,
    noun: &'static str,
    bar: Option<ProgressBar>,
    done: u64,
    started: Instant,
    said: Instant,
}

impl Progress {
    /// `verb` ("exported", "imported") of `total` memories, when known.
    pub fn new(verb: &'static str, total: Option<u64>) -> Progress {
        Progress::of("memories", verb, total)
    }

    /// `verb` of `total` `noun` ("texts"), when known.
    pub fn of(noun: &'static str, verb: &'static str, total: Option<u64>) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = match total {
                Some(total) => ProgressBar::new(total),
                None => ProgressBar::new_spinner(),
            };
            bar.set_draw_target(ProgressDrawTarget::stderr());
            let template = match total {
                Some(_) => {
                    format!("{{bar:40}} {{pos}}/{{len}} {noun} {{msg}} ({{per_sec}}, {{eta}} left)")
                }
                None => format!("{{spinner}} {{pos}} {noun} {{msg}} ({{per_sec}})"),
            };
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style);
            }
            bar.set_message(verb);
            bar
        });
        let now = Instant::now();
        Progress {
            verb,
            noun,
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
                eprintln!("{} {} {}…", self.verb, self.done, self.noun);
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
