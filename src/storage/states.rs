//! Every state the store keeps as text, as a closed type: one `as_str` for writing, one
//! `parse` for reading (an unknown value read back is corrupt data, never a silent default).

/// Declares an enum stored as text, with its `as_str` and `parse`.
macro_rules! stored_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// The stored text.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }

            /// The value for stored text, if it is one.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

stored_enum! {
    /// A journal entry: waiting for its turn, or answered.
    JournalState { Pending = "pending", Done = "done" }
}

stored_enum! {
    /// An outbox row: to deliver, delivered, or given up (the platform refused it, or it
    /// failed too often).
    OutboxState { Pending = "pending", Delivered = "delivered", Rejected = "rejected" }
}

stored_enum! {
    /// A pairing row: a code waiting for the operator, or an approved user.
    PairingState { Pending = "pending", Approved = "approved" }
}

stored_enum! {
    /// Who wrote a transcript entry.
    TranscriptRole { User = "user", Assistant = "assistant", Tool = "tool" }
}

stored_enum! {
    /// A subagent run: reports once and ends (`run`), or stays for more instructions.
    RunMode { Run = "run", Session = "session" }
}

stored_enum! {
    /// Where a subagent run is in its life.
    RunState {
        Queued = "queued",
        Running = "running",
        Done = "done",
        Failed = "failed",
        TimedOut = "timed_out",
        Killed = "killed",
        /// The service stopped while it ran; announced as such on the next start.
        Interrupted = "interrupted",
    }
}

impl RunState {
    /// The run has ended (its outcome is, or will be, announced).
    pub fn is_final(self) -> bool {
        !matches!(self, RunState::Queued | RunState::Running)
    }

    /// How the chat shows it.
    pub fn word(self) -> &'static str {
        match self {
            RunState::TimedOut => "timed out",
            other => other.as_str(),
        }
    }
}

/// Read a stored state, naming the column when it is not one.
pub(crate) fn parse_stored<T>(
    column: &str,
    text: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, super::StoreError> {
    parse(text).ok_or_else(|| super::StoreError::Corrupt(format!("unknown {column} `{text}`")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_as_itself_and_unknown_text_is_refused() {
        for s in [
            RunState::Queued,
            RunState::Running,
            RunState::Done,
            RunState::Failed,
            RunState::TimedOut,
            RunState::Killed,
            RunState::Interrupted,
        ] {
            assert_eq!(RunState::parse(s.as_str()), Some(s));
        }
        assert_eq!(RunState::parse("finished"), None);
        assert_eq!(TranscriptRole::parse("tool"), Some(TranscriptRole::Tool));
        assert_eq!(RunState::TimedOut.word(), "timed out");
        assert!(RunState::Killed.is_final() && !RunState::Running.is_final());
    }
}

stored_enum! {
    /// A team task: waiting (maybe blocked), being worked, or finished.
    TeamTaskStatus { Open = "open", InProgress = "in_progress", Done = "done" }
}

stored_enum! {
    /// A scheduled job: waiting for its next run, finished (a one-shot that ran), or cancelled.
    JobState { Active = "active", Done = "done", Cancelled = "cancelled" }
}

stored_enum! {
    /// A job's schedule: one time, or a cron expression.
    JobKind { Once = "once", Cron = "cron" }
}

stored_enum! {
    /// What a run missed while the service was down does: run once now, or not at all.
    MissedPolicy { RunOnce = "run_once", Skip = "skip" }
}
