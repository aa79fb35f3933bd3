//! A progress bar for the harnesses: an `indicatif` bar on a terminal, and one plain line per
//! step on stderr otherwise (CI logs), each with the step's name and the time elapsed.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Instant;

/// Progress over a known number of steps.
pub struct Progress {
    bar: ProgressBar,
    plain: bool,
    start: Instant,
    total: u64,
    done: u64,
}

impl Progress {
    /// Starts a bar of `total` steps titled `what`.
    pub fn new(what: &str, total: u64) -> Progress {
        let plain = !std::io::stderr().is_terminal();
        let bar = if plain {
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden())
        } else {
            ProgressBar::new(total)
        };
        let style = ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} {msg} (eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(what.to_string());
        Progress {
            bar,
            plain,
            start: Instant::now(),
            total,
            done: 0,
        }
    }

    /// Announces the step that starts now.
    pub fn step(&mut self, msg: &str) {
        if self.plain {
            eprintln!(
                "[{:>5.1}s] {}/{} {msg}",
                self.start.elapsed().as_secs_f64(),
                self.done + 1,
                self.total
            );
        }
        self.bar.set_message(msg.to_string());
    }

    /// Marks one step done.
    pub fn inc(&mut self) {
        self.done += 1;
        self.bar.inc(1);
    }

    /// Prints a line above the bar.
    pub fn println(&self, line: &str) {
        if self.plain {
            eprintln!("{line}");
        } else {
            self.bar.println(line);
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
