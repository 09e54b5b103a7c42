//! Output captured with a cap per stream; what is beyond it is dropped and reported.

pub use crate::exec::OUTPUT_CAP;

#[derive(Debug, Default)]
pub struct Capture {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub truncated: bool,
}

impl Capture {
    /// Keep what fits of `bytes`; true when something was dropped.
    pub fn push(&mut self, stderr: bool, bytes: &[u8]) {
        let buffer = if stderr {
            &mut self.stderr
        } else {
            &mut self.stdout
        };
        let room = OUTPUT_CAP.saturating_sub(buffer.len());
        if bytes.len() > room {
            self.truncated = true;
        }
        buffer.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    pub fn into_texts(self) -> (String, String, bool) {
        (
            String::from_utf8_lossy(&self.stdout).into_owned(),
            String::from_utf8_lossy(&self.stderr).into_owned(),
            self.truncated,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stream_keeps_at_most_the_cap() {
        let mut c = Capture::default();
        c.push(false, &vec![b'a'; OUTPUT_CAP - 1]);
        c.push(false, b"bcd");
        c.push(true, b"err");
        let (out, err, truncated) = c.into_texts();
        assert_eq!(out.len(), OUTPUT_CAP);
        assert!(out.ends_with("ab"));
        assert_eq!(err, "err");
        assert!(truncated);
    }
}
