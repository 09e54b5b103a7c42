//! Reading a running service's `/metrics` with a Prometheus text parser.

use prometheus_parse::{Sample, Scrape, Value as Metric};

/// Every sample `base`/metrics serves (panics on text that is not valid Prometheus).
pub async fn scrape(base: &str) -> Vec<Sample> {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid Prometheus text")
        .samples
}

/// The value of the sample `metric` whose labels include `labels` (0 when there is none).
pub fn value(samples: &[Sample], metric: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.metric == metric)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Metric::Counter(v) | Metric::Gauge(v) | Metric::Untyped(v) => *v,
            other => panic!("{metric} is not a number: {other:?}"),
        })
        .unwrap_or(0.0)
}
