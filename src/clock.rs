//! Wall-clock time as unix milliseconds, the one time format the store uses (the helper
//! itself lives in `ferroclaw_channel_core::clock`, shared with the adapters).

pub use ferroclaw_channel_core::clock::now_ms;
