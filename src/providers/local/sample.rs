//! Choosing the next token from a model's logits: the `k` likeliest (found by partial
//! selection, not a sort of the whole vocabulary), scaled by a temperature, cut to the
//! smallest set holding `p` of the probability, then drawn with a seeded generator (the same
//! seed and logits give the same tokens). Knows numbers only.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub struct Sampler {
    rng: StdRng,
    k: usize,
    p: f32,
    temperature: f32,
    /// Token ids, kept between draws (a vocabulary-sized buffer).
    order: Vec<u32>,
}

impl Sampler {
    pub fn new(seed: u64, k: usize, p: f32, temperature: f32) -> Self {
        Sampler {
            rng: StdRng::seed_from_u64(seed),
            k: k.max(1),
            p,
            temperature,
            order: Vec::new(),
        }
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if logits.is_empty() {
            return 0;
        }
        self.order.clear();
        self.order.extend(0..logits.len() as u32);
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        let k = self.k.min(logits.len());
        if k < logits.len() {
            self.order.select_nth_unstable_by(k - 1, by_logit);
        }
        let top = &mut self.order[..k];
        top.sort_unstable_by(by_logit);
        if self.temperature <= 0.0 {
            return top[0];
        }
        let best = logits[top[0] as usize];
        let mut weights: Vec<f32> = top
            .iter()
            .map(|&i| ((logits[i as usize] - best) / self.temperature).exp())
            .collect();
        let total: f32 = weights.iter().sum();
        // The smallest head of the list whose share reaches `p`.
        let mut kept = 0.0;
        let mut cut = weights.len();
        for (n, w) in weights.iter().enumerate() {
            kept += w / total;
            if kept >= self.p {
                cut = n + 1;
                break;
            }
        }
        weights.truncate(cut);
        let mut draw = self.rng.random::<f32>() * weights.iter().sum::<f32>();
        for (n, w) in weights.iter().enumerate() {
            draw -= w;
            if draw <= 0.0 {
                return top[n];
            }
        }
        top[cut - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::Sampler;

    #[test]
    fn draws_stay_among_the_likeliest_and_repeat_with_the_seed() {
        let logits: Vec<f32> = (0..1_000).map(|i| (i % 97) as f32 / 10.0).collect();
        let mut a = Sampler::new(7, 3, 0.95, 0.7);
        let mut b = Sampler::new(7, 3, 0.95, 0.7);
        let drawn: Vec<u32> = (0..50).map(|_| a.sample(&logits)).collect();
        assert_eq!(
            drawn,
            (0..50).map(|_| b.sample(&logits)).collect::<Vec<_>>()
        );
        // The three largest logits are 9.6 (ids 96, 193, ...): only ids ≡ 96 mod 97 come out.
        assert!(drawn.iter().all(|id| id % 97 == 96), "{drawn:?}");
        // A zero temperature is greedy.
        let mut greedy = Sampler::new(1, 40, 0.9, 0.0);
        assert_eq!(logits[greedy.sample(&logits) as usize], 9.6);
        // One clear favourite within p: always it.
        let mut sharp = vec![0.0f32; 100];
        sharp[42] = 50.0;
        let mut s = Sampler::new(3, 40, 0.9, 0.7);
        assert!((0..20).all(|_| s.sample(&sharp) == 42));
    }
}
