//! What a model's tokens cost: the configured prices, the cost of a call's usage, and the
//! worst case a call is reserved at.

use crate::config::PriceConfig;
use crate::providers::Usage;
use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

/// The most output tokens a call is reserved for (what the providers are asked to stop at).
const MAX_OUTPUT_TOKENS: i64 = crate::providers::MAX_OUTPUT_TOKENS as i64;

pub struct Prices {
    by_model: BTreeMap<String, PriceConfig>,
    /// Providers whose model runs in this process (`kind = "local"`): free unless priced.
    in_process: Vec<String>,
    /// Models already named in the log as having no price.
    flagged: Mutex<HashSet<String>>,
}

impl Prices {
    pub fn new(by_model: BTreeMap<String, PriceConfig>, in_process: Vec<String>) -> Self {
        Prices {
            by_model,
            in_process,
            flagged: Mutex::default(),
        }
    }

    /// What `usage` on `model` cost in USD; None (and one log line per model) without a
    /// price. A model run in this process costs nothing unless it is priced.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        let Some(price) = self.by_model.get(model) else {
            let provider = model.split_once('/').map_or(model, |(p, _)| p);
            if self.in_process.iter().any(|p| p == provider) {
                return Some(0.0);
            }
            if self
                .flagged
                .lock()
                .expect("flag lock")
                .insert(model.to_string())
            {
                tracing::warn!(
                    model,
                    "model has no price in [prices]: its calls are counted in tokens only"
                );
            }
            return None;
        };
        let cached = usage.cached_input_tokens.max(0);
        let written = usage.cache_write_tokens.max(0);
        let plain = (usage.input_tokens - cached - written).max(0);
        let per_token = |per_mtok: f64| per_mtok / 1_000_000.0;
        Some(
            plain as f64 * per_token(price.input_per_mtok)
                + cached as f64
                    * per_token(price.cached_input_per_mtok.unwrap_or(price.input_per_mtok))
                + written as f64
                    * per_token(price.cache_write_per_mtok.unwrap_or(price.input_per_mtok))
                + usage.output_tokens.max(0) as f64 * per_token(price.output_per_mtok),
        )
    }

    /// The most a call of `input_tokens` on `model` can cost: every input token at the
    /// dearest input rate, and the longest answer. 0 without a price.
    pub fn worst_case(&self, model: &str, input_tokens: i64) -> f64 {
        let Some(price) = self.by_model.get(model) else {
            return 0.0;
        };
        let input_rate = [
            Some(price.input_per_mtok),
            price.cached_input_per_mtok,
            price.cache_write_per_mtok,
        ]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max);
        (input_tokens.max(0) as f64 * input_rate + MAX_OUTPUT_TOKENS as f64 * price.output_per_mtok)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_and_written_tokens_are_billed_at_their_own_rates() {
        let mut by_model = BTreeMap::new();
        by_model.insert(
            "p/m".to_string(),
            PriceConfig {
                input_per_mtok: 2.0,
                output_per_mtok: 10.0,
                cached_input_per_mtok: Some(0.5),
                cache_write_per_mtok: Some(2.5),
            },
        );
        let prices = Prices::new(by_model, vec!["local".into()]);
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cached_input_tokens: 400_000,
            cache_write_tokens: 100_000,
        };
        // 500k plain at $2, 400k cached at $0.5, 100k written at $2.5, 100k out at $10.
        let cost = prices.cost("p/m", &usage).unwrap();
        assert!((cost - (1.0 + 0.2 + 0.25 + 1.0)).abs() < 1e-9, "{cost}");
        assert_eq!(prices.cost("p/other", &usage), None);
        // The in-process model is free unless priced.
        assert_eq!(prices.cost("local/smollm2-135m", &usage), Some(0.0));
        let worst = prices.worst_case("p/m", 1_000);
        assert!((worst - (1_000.0 * 2.5 + 8_192.0 * 10.0) / 1e6).abs() < 1e-12);
        assert_eq!(prices.worst_case("p/other", 1_000), 0.0);
    }
}
