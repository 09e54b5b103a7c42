//! A running child's status message, edited as it works (current tool).

use super::texts;
use crate::outbox::StatusCard;
use crate::spawn::StepObserver;
use async_trait::async_trait;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct RunProgress {
    /// The run's status message (`status_message` its id).
    card: StatusCard,
    label: String,
    status_message: Option<i64>,
    last: Mutex<String>,
    /// What the run is doing now (read by the status page).
    activity: Arc<Mutex<String>>,
    /// The tail of the running tool's output, and when it was last shown (None: not since
    /// it changed).
    output: Mutex<(String, Option<Instant>)>,
}

/// Lines of a running command's output the status message shows.
const OUTPUT_LINES: usize = 5;
/// Bytes of a running command's output kept for the status (the last ones): a command
/// printing megabytes with no newline must cost neither CPU per chunk nor memory.
const OUTPUT_TAIL_BYTES: usize = 1024;
/// How often the status message is edited for new output.
const OUTPUT_EVERY: Duration = Duration::from_secs(1);

impl RunProgress {
    pub(crate) fn new(
        card: StatusCard,
        label: String,
        status_message: Option<i64>,
        activity: Arc<Mutex<String>>,
    ) -> Self {
        RunProgress {
            card,
            label,
            status_message,
            last: Mutex::new(String::new()),
            output: Mutex::new((String::new(), None)),
            activity,
        }
    }

    /// Replace the status message's text (unchanged text is not sent again).
    async fn show(&self, text: String) {
        let Some(id) = self.status_message else {
            return;
        };
        {
            let mut last = self.last.lock().expect("progress lock");
            if *last == text {
                return;
            }
            last.clone_from(&text);
        }
        if let Err(e) = self.card.show(Some(id), text).await {
            tracing::warn!(error = %e, "could not update a subagent's status message");
        }
    }
}

#[async_trait]
impl StepObserver for RunProgress {
    /// The child is about to run these tools.
    async fn tools(&self, names: &[&str]) {
        self.output.lock().expect("progress lock").0.clear();
        *self.activity.lock().expect("activity lock") = names.join(", ");
        let text = texts::status(&self.label, &format!("running — {}", names.join(", ")));
        self.show(text).await;
    }

    /// A running command printed this: the last lines show under the status, at most once a
    /// second.
    async fn output(&self, chunk: &str) {
        let tail = {
            let mut output = self.output.lock().expect("progress lock");
            let tail = tail_of(&output.0, chunk);
            output.0.clone_from(&tail);
            if output.1.is_some_and(|at| at.elapsed() < OUTPUT_EVERY) {
                return;
            }
            output.1 = Some(Instant::now());
            tail
        };
        self.show(output_status(&self.label, &tail)).await;
    }

    async fn output_end(&self) {
        let tail = self.output.lock().expect("progress lock").0.clone();
        if !tail.is_empty() {
            self.show(output_status(&self.label, &tail)).await;
        }
    }
}

fn output_status(label: &str, tail: &str) -> String {
    texts::status(label, &format!("running — exec\n```\n{tail}\n```"))
}

/// The status's output tail after `chunk`: the last [`OUTPUT_LINES`] lines of the last
/// [`OUTPUT_TAIL_BYTES`] bytes of `kept` + `chunk` (only the end of a large chunk is looked
/// at).
fn tail_of(kept: &str, chunk: &str) -> String {
    let end = |text: &str, bytes: usize| -> usize {
        let mut at = text.len().saturating_sub(bytes);
        while !text.is_char_boundary(at) {
            at += 1;
        }
        at
    };
    let chunk = &chunk[end(chunk, OUTPUT_TAIL_BYTES)..];
    let mut joined = String::with_capacity(kept.len() + chunk.len());
    joined.push_str(kept);
    joined.push_str(chunk);
    let joined = &joined[end(&joined, OUTPUT_TAIL_BYTES)..];
    let lines: Vec<&str> = joined.lines().collect();
    lines[lines.len().saturating_sub(OUTPUT_LINES)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_tail_stays_small_whatever_is_printed() {
        // 20 MB with no newline, in 8 KiB chunks (#33.7): the tail never grows.
        let chunk = "x".repeat(8 * 1024);
        let mut kept = String::new();
        for _ in 0..2_560 {
            kept = tail_of(&kept, &chunk);
            assert!(kept.len() <= OUTPUT_TAIL_BYTES, "{}", kept.len());
        }
        assert_eq!(kept.len(), OUTPUT_TAIL_BYTES);
        // Lines: the last five; multi-byte characters are never cut.
        let kept = tail_of("a\nb\nc\n", "d\ne\nf\ng");
        assert_eq!(kept, "c\nd\ne\nf\ng");
        let kept = tail_of("", &"é".repeat(5_000));
        assert!(kept.len() <= OUTPUT_TAIL_BYTES && kept.chars().all(|c| c == 'é'));
    }
}
