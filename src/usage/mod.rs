//! Cost control (SPEC section 16): every model call's usage and cost recorded, spending caps
//! held with a reservation before each call, the limits on one message's reach, the rate
//! limits on one person's messages, and `/usage`.
//!
//! Plugs into the engine as a policy gate ([`CostGate`]) and a component ([`UsageComponent`]),
//! both built by `crate::features`; reads and writes through `storage::UsageStore`. Knows
//! prices, caps and the call's facts; not the tool loop, not a provider's protocol.

mod budgets;
mod component;
mod gate;
mod prices;
mod reach;
mod writer;

pub use component::{COMMANDS, UsageComponent};
pub use gate::CostGate;
pub use prices::Prices;

/// `$1.2345` for costs (four decimals: a call costs fractions of a cent).
pub fn dollars(usd: f64) -> String {
    format!("${usd:.4}")
}

/// A wait as words: `42 s`, `7 min`, `3 h 5 min`.
pub fn wait_words(ms: i64) -> String {
    let secs = (ms.max(0) + 999) / 1000;
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", (secs + 59) / 60),
        _ => format!("{} h {} min", secs / 3600, (secs % 3600) / 60),
    }
}
