//! Back-off between failed long polls: only real errors back off (an idle poll is not one).

use std::time::Duration;

/// Exponential back-off for real polling errors (never for an idle poll): 0.5 s doubling
/// to 30 s, back to the start on the next success.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
}

impl Backoff {
    pub(crate) fn failed(&mut self) -> u32 {
        self.failures = self.failures.saturating_add(1);
        self.failures
    }

    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }

    pub(crate) fn delay(&self) -> Duration {
        let exp = self.failures.saturating_sub(1).min(6);
        (Duration::from_millis(500) * 2u32.pow(exp)).min(Duration::from_secs(30))
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_from_half_a_second_to_thirty_and_resets_on_success() {
        let mut b = Backoff::default();
        let delays: Vec<Duration> = (0..9)
            .map(|_| {
                b.failed();
                b.delay()
            })
            .collect();
        assert_eq!(delays[0], Duration::from_millis(500));
        assert_eq!(delays[1], Duration::from_secs(1));
        assert_eq!(delays[5], Duration::from_secs(16));
        assert_eq!(delays[6], Duration::from_secs(30));
        assert_eq!(delays[8], Duration::from_secs(30));
        b.reset();
        b.failed();
        assert_eq!(b.delay(), Duration::from_millis(500));
    }
}
