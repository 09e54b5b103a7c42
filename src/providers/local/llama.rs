//! A llama-architecture forward pass over a GGUF file's quantized weights (candle's
//! quantized matrix products), with a key/value cache allocated once per generation.
//!
//! Written for the one thing the local provider needs — one sequence, generated token by
//! token on the CPU — so each step writes its keys and values into place and attends over a
//! view of the cache: no copy grows with the answer (a cache grown by concatenation copied
//! every earlier key and value at every token: half the time of a 1,000-token answer), and
//! grouped-query attention reads each key/value head once for the query heads that share it
//! instead of repeating it. Knows tensors and the file's layout; not tokens' text, not
//! sampling, not threads.

use candle_core::quantized::{QMatMul, gguf_file};
use candle_core::{DType, Device, Module, Result, Tensor};

/// One transformer block's weights.
struct Block {
    attn_norm: Tensor,
    wq: QMatMul,
    wk: QMatMul,
    wv: QMatMul,
    wo: QMatMul,
    ffn_norm: Tensor,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
}

/// A loaded model: shared by every generation (the tensors are reference-counted).
pub struct Weights {
    /// Token embeddings, dequantized (rows are picked per token).
    embed: Tensor,
    blocks: Vec<Block>,
    norm: Tensor,
    output: QMatMul,
    /// Rotary tables, `[max positions, head_dim / 2]`.
    cos: Tensor,
    sin: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f32,
    /// Positions the rotary tables cover (the most a generation can hold).
    pub max_positions: usize,
}

/// One generation's keys and values, `[kv_heads, capacity, head_dim]` per block, and how many
/// positions are filled.
pub struct Cache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    len: usize,
    capacity: usize,
}

fn metadata_u32(content: &gguf_file::Content, key: &str) -> Result<usize> {
    match content.metadata.get(key) {
        Some(value) => Ok(value.to_u32()? as usize),
        None => candle_core::bail!("the file has no `{key}`"),
    }
}

impl Weights {
    /// Read a llama-architecture model's tensors from `content` (the file's header) and
    /// `reader`; `max_positions` bounds the context.
    pub fn load<R: std::io::Read + std::io::Seek>(
        content: &gguf_file::Content,
        reader: &mut R,
        max_positions: usize,
    ) -> Result<Self> {
        let cpu = &Device::Cpu;
        let heads = metadata_u32(content, "llama.attention.head_count")?;
        let kv_heads = metadata_u32(content, "llama.attention.head_count_kv")?;
        let blocks = metadata_u32(content, "llama.block_count")?;
        let width = metadata_u32(content, "llama.embedding_length")?;
        let rope_dim = metadata_u32(content, "llama.rope.dimension_count")?;
        let eps = content
            .metadata
            .get("llama.attention.layer_norm_rms_epsilon")
            .map_or(Ok(1e-5), |v| v.to_f32())?;
        let freq_base = content
            .metadata
            .get("llama.rope.freq_base")
            .map_or(Ok(10_000.0), |v| v.to_f32())?;
        if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 || width % heads != 0 {
            candle_core::bail!("unusual attention heads ({heads} query, {kv_heads} key/value)");
        }
        let head_dim = width / heads;
        let mut tensor = |name: &str| content.tensor(reader, name, cpu);
        let embed_q = tensor("token_embd.weight")?;
        let embed = embed_q.dequantize(cpu)?;
        let norm = tensor("output_norm.weight")?.dequantize(cpu)?;
        // Small models share the embedding matrix with the output layer.
        let output = match tensor("output.weight") {
            Ok(output) => QMatMul::from_qtensor(output)?,
            Err(_) => QMatMul::from_qtensor(embed_q)?,
        };
        let mut all = Vec::with_capacity(blocks);
        for i in 0..blocks {
            let mut matmul = |part: &str| {
                content
                    .tensor(reader, &format!("blk.{i}.{part}.weight"), cpu)
                    .and_then(QMatMul::from_qtensor)
            };
            let wq = matmul("attn_q")?;
            let wk = matmul("attn_k")?;
            let wv = matmul("attn_v")?;
            let wo = matmul("attn_output")?;
            let gate = matmul("ffn_gate")?;
            let up = matmul("ffn_up")?;
            let down = matmul("ffn_down")?;
            let mut vector = |part: &str| {
                content
                    .tensor(reader, &format!("blk.{i}.{part}.weight"), cpu)
                    .and_then(|t| t.dequantize(cpu))
            };
            all.push(Block {
                attn_norm: vector("attn_norm")?,
                ffn_norm: vector("ffn_norm")?,
                wq,
                wk,
                wv,
                wo,
                gate,
                up,
                down,
            });
        }
        let (cos, sin) = rotary_tables(rope_dim, freq_base, max_positions)?;
        Ok(Weights {
            embed,
            blocks: all,
            norm,
            output,
            cos,
            sin,
            heads,
            kv_heads,
            head_dim,
            eps,
            max_positions,
        })
    }

    /// An empty cache for a generation of at most `capacity` positions.
    pub fn cache(&self, capacity: usize) -> Result<Cache> {
        let capacity = capacity.min(self.max_positions);
        let shape = (self.kv_heads, capacity, self.head_dim);
        let empty = || Tensor::zeros(shape, DType::F32, &Device::Cpu);
        Ok(Cache {
            keys: (0..self.blocks.len())
                .map(|_| empty())
                .collect::<Result<_>>()?,
            values: (0..self.blocks.len())
                .map(|_| empty())
                .collect::<Result<_>>()?,
            len: 0,
            capacity,
        })
    }

    /// Feed `tokens` after what `cache` holds; the logits for the token after the last one.
    pub fn forward(&self, tokens: &[u32], cache: &mut Cache) -> Result<Vec<f32>> {
        let (t, at) = (tokens.len(), cache.len);
        if t == 0 || at + t > cache.capacity {
            candle_core::bail!("{t} tokens after {at} do not fit {}", cache.capacity);
        }
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut x = self.embed.index_select(&ids, 0)?; // [t, width]
        let cos = self.cos.narrow(0, at, t)?;
        let sin = self.sin.narrow(0, at, t)?;
        let mask = (t > 1).then(|| self.causal_mask(t, at)).transpose()?;
        for (i, block) in self.blocks.iter().enumerate() {
            let h = candle_nn::ops::rms_norm(&x, &block.attn_norm, self.eps)?;
            let attended = self.attend(
                block,
                &h,
                (&cos, &sin),
                mask.as_ref(),
                (&cache.keys[i], &cache.values[i]),
                at,
            )?;
            x = (x + attended)?;
            let h = candle_nn::ops::rms_norm(&x, &block.ffn_norm, self.eps)?;
            let gated =
                (candle_nn::ops::silu(&block.gate.forward(&h)?)? * block.up.forward(&h)?)?;
            x = (x + block.down.forward(&gated)?)?;
        }
        cache.len = at + t;
        let last = x.narrow(0, t - 1, 1)?;
        let last = candle_nn::ops::rms_norm(&last, &self.norm, self.eps)?;
        self.output.forward(&last)?.squeeze(0)?.to_vec1()
    }

    /// One block's attention for `h` (`[t, width]`) at positions `at..at + t`: its keys and
    /// values are written into the cache, then every query attends over the cache so far.
    fn attend(
        &self,
        block: &Block,
        h: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        mask: Option<&Tensor>,
        (keys, values): (&Tensor, &Tensor),
        at: usize,
    ) -> Result<Tensor> {
        let t = h.dim(0)?;
        let (hd, heads, kv) = (self.head_dim, self.heads, self.kv_heads);
        // [1, heads, t, hd], as the interleaved rotation wants it.
        let split = |x: Tensor, n: usize| x.reshape((1, t, n, hd))?.transpose(1, 2)?.contiguous();
        let q = candle_nn::rotary_emb::rope_i(&split(block.wq.forward(h)?, heads)?, cos, sin)?;
        let k = candle_nn::rotary_emb::rope_i(&split(block.wk.forward(h)?, kv)?, cos, sin)?;
        let v = split(block.wv.forward(h)?, kv)?;
        keys.slice_set(&k.squeeze(0)?, 1, at)?;
        values.slice_set(&v.squeeze(0)?, 1, at)?;
        let seen = at + t;
        let k = keys.narrow(1, 0, seen)?; // [kv, seen, hd]
        let v = values.narrow(1, 0, seen)?;
        // The query heads sharing a key/value head, as one batch row: [kv, group * t, hd].
        let group = heads / kv;
        let q = q.reshape((kv, group * t, hd))?;
        let scores = (q.matmul(&k.t()?)? * (1.0 / (hd as f64).sqrt()))?;
        let scores = match mask {
            Some(mask) => scores.broadcast_add(mask)?,
            None => scores,
        };
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let out = weights.matmul(&v.contiguous()?)?; // [kv, group * t, hd]
        let out = out
            .reshape((heads, t, hd))?
            .transpose(0, 1)?
            .reshape((t, heads * hd))?;
        block.wo.forward(&out)
    }

    /// `[group * t, at + t]`: 0 where query row `r` (position `at + r % t`) may see the key,
    /// minus infinity after it.
    fn causal_mask(&self, t: usize, at: usize) -> Result<Tensor> {
        let group = self.heads / self.kv_heads;
        let seen = at + t;
        let mask: Vec<f32> = (0..group * t)
            .flat_map(|r| {
                let position = at + r % t;
                (0..seen).map(move |j| if j > position { f32::NEG_INFINITY } else { 0.0 })
            })
            .collect();
        Tensor::from_vec(mask, (group * t, seen), &Device::Cpu)
    }
}

/// The rotation's cosines and sines for every position and frequency pair.
fn rotary_tables(dim: usize, base: f32, positions: usize) -> Result<(Tensor, Tensor)> {
    let inverse: Vec<f32> = (0..dim)
        .step_by(2)
        .map(|i| 1.0 / base.powf(i as f32 / dim as f32))
        .collect();
    let pairs = inverse.len();
    let angles: Vec<f32> = (0..positions)
        .flat_map(|p| inverse.iter().map(move |f| p as f32 * f))
        .collect();
    let angles = Tensor::from_vec(angles, (positions, pairs), &Device::Cpu)?;
    Ok((angles.cos()?, angles.sin()?))
}
