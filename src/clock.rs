//! Wall-clock time as unix milliseconds, the one time format the store uses (the helper
//! itself lives in `ferroclaw_channel_core::clock`, shared with the adapters).

pub use ferroclaw_channel_core::clock::now_ms;

/// The UTC date of unix-ms `at_ms`: `YYYY-MM-DD` (usage and spending caps count by it).
pub fn utc_day(at_ms: i64) -> String {
    let date = utc_date(at_ms);
    format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day())
}

/// Milliseconds from `at_ms` to the next UTC midnight (a daily cap's reset), and to the
/// first of the next UTC month (a monthly cap's).
pub fn utc_resets(at_ms: i64) -> (i64, i64) {
    let date = utc_date(at_ms);
    let start = |d: jiff::civil::Date| {
        d.to_zoned(jiff::tz::TimeZone::UTC)
            .map(|z| z.timestamp().as_millisecond())
            .unwrap_or(at_ms)
    };
    let tomorrow = date.tomorrow().unwrap_or(date);
    let next_month = date
        .first_of_month()
        .checked_add(jiff::Span::new().months(1))
        .unwrap_or(date);
    (start(tomorrow) - at_ms, start(next_month) - at_ms)
}

fn utc_date(at_ms: i64) -> jiff::civil::Date {
    jiff::Timestamp::from_millisecond(at_ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date()
}

#[cfg(test)]
mod tests {
    #[test]
    fn days_and_resets_are_utc() {
        // 2026-12-03T23:30:00Z
        let at = 1_796_340_600_000;
        assert_eq!(super::utc_day(at), "2026-12-03");
        let (day, month) = super::utc_resets(at);
        assert_eq!(day, 30 * 60 * 1000);
        assert_eq!(month, (28 * 24 * 60 + 30) * 60 * 1000);
    }
}
