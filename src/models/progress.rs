//! How a download's progress is shown: a bar in a terminal (`chat`, `model fetch`), a log
//! line every tenth in `serve`.

use super::Progress;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static BAR: AtomicBool = AtomicBool::new(false);

/// This process is interactive (`chat`): fetches on first use draw a bar.
pub fn prefer_bar() {
    BAR.store(true, Ordering::Relaxed);
}

/// The progress display for fetching `what` on first use: a bar in `chat` (when stderr is a
/// terminal), log lines otherwise.
pub fn for_first_use(what: &str) -> Box<dyn Progress> {
    if BAR.load(Ordering::Relaxed) && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        Box::new(Bar::new(what))
    } else {
        Box::new(Lines::new(what))
    }
}

/// An `indicatif` progress bar on stderr (hidden when stderr is not a terminal).
pub struct Bar(indicatif::ProgressBar);

impl Bar {
    pub fn new(what: &str) -> Self {
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta})",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_message(format!("fetching {what}"));
        Bar(bar)
    }
}

impl Progress for Bar {
    fn advance(&self, done: u64, total: Option<u64>) {
        if let Some(total) = total
            && self.0.length() != Some(total)
        {
            self.0.set_length(total);
        }
        self.0.set_position(done);
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// One INFO line per tenth of the download (for `serve`'s log).
pub struct Lines {
    what: String,
    last_tenth: AtomicU64,
}

impl Lines {
    pub fn new(what: &str) -> Self {
        Lines {
            what: what.into(),
            last_tenth: AtomicU64::new(0),
        }
    }
}

impl Progress for Lines {
    fn advance(&self, done: u64, total: Option<u64>) {
        let Some(total) = total.filter(|t| *t > 0) else {
            return;
        };
        let tenth = done * 10 / total;
        if tenth > self.last_tenth.swap(tenth, Ordering::Relaxed) {
            tracing::info!(model = %self.what, "fetching the model: {}% of {:.0} MB", tenth * 10, total as f64 / 1e6);
        }
    }
}
