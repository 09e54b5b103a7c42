//! Back-off for a receiver that failed or was restarted: exponential with jitter (backon),
//! so several processes or channels that failed together do not come back in lock-step.
//! Only real failures back off; an idle long poll is not one.

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use std::time::Duration;

/// Delays that start at `min`, double up to `max`, each with up to its own length again of
/// random jitter; back to the start on [`Backoff::reset`].
#[derive(Debug)]
pub struct Backoff {
    builder: ExponentialBuilder,
    delays: ExponentialBackoff,
    failures: u32,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        let builder = ExponentialBuilder::new()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_jitter()
            .without_max_times();
        Backoff {
            builder,
            delays: builder.build(),
            failures: 0,
        }
    }

    /// One more failure; how many there have been in a row.
    pub fn failed(&mut self) -> u32 {
        self.failures = self.failures.saturating_add(1);
        self.failures
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The wait before the next try.
    pub fn delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(Duration::from_secs(1))
    }

    /// It worked: the next failure waits the shortest time again.
    pub fn reset(&mut self) {
        self.failures = 0;
        self.delays = self.builder.build();
    }
}

impl Default for Backoff {
    /// Half a second doubling to thirty.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(30))
    }
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn delays_grow_with_jitter_up_to_the_cap_and_start_again_after_a_success() {
        let mut b = Backoff::default();
        let delays: Vec<Duration> = (0..10)
            .map(|_| {
                b.failed();
                b.delay()
            })
            .collect();
        assert!(delays[0] >= Duration::from_millis(500) && delays[0] < Duration::from_secs(1));
        assert!(delays[3] >= Duration::from_secs(4), "{delays:?}");
        for d in &delays {
            assert!(*d < Duration::from_secs(60), "{delays:?}");
        }
        assert!(delays[9] >= Duration::from_secs(30), "{delays:?}");
        assert_eq!(b.failures(), 10);
        // Jitter: ten tries in a row do not all wait exactly a power of two.
        assert!(
            delays.iter().any(|d| d.subsec_millis() % 500 != 0),
            "{delays:?}"
        );
        b.reset();
        b.failed();
        assert!(b.delay() < Duration::from_secs(1));
        assert_eq!(b.failures(), 1);
    }
}
