//! MPNet's encoder (Song et al. 2020), as all-mpnet-base-v2 runs it; candle has no MPNet.
//! It is BERT's post-LayerNorm encoder but for three things (docs/models.md,
//! "all-mpnet-base-v2"): positions count real tokens from after the padding id, there are no
//! token types, and one relative-position bias (32 buckets × heads) is added to every layer's
//! attention scores.

use candle_core::{DType, Device, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder, embedding, layer_norm, linear};

/// `config.json` of an MPNet model, as transformers writes it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub max_position_embeddings: usize,
    pub layer_norm_eps: f64,
    pub pad_token_id: u32,
    pub relative_attention_num_buckets: usize,
    pub hidden_act: String,
}

/// How far apart two tokens may be before their bias stops growing finer (transformers'
/// `relative_position_bucket`).
const MAX_DISTANCE: f64 = 128.0;

pub struct MpNet {
    words: Embedding,
    positions: Embedding,
    norm: LayerNorm,
    layers: Vec<Layer>,
    relative_bias: Embedding,
    heads: usize,
    buckets: usize,
    pad: u32,
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

impl MpNet {
    /// The weights under their transformers names, without the `mpnet.` prefix
    /// (sentence-transformers saves the bare encoder).
    pub fn load(vb: VarBuilder, config: &Config) -> Result<MpNet> {
        // transformers fixes the padding id and the bias's buckets whatever the file says.
        if config.hidden_act != "gelu"
            || config.pad_token_id != 1
            || config.relative_attention_num_buckets != 32
        {
            candle_core::bail!(
                "only MPNet with hidden_act \"gelu\", pad_token_id 1 and 32 relative-position \
                 buckets is implemented"
            );
        }
        let (hidden, eps) = (config.hidden_size, config.layer_norm_eps);
        let embeddings = vb.pp("embeddings");
        let encoder = vb.pp("encoder");
        let layers = (0..config.num_hidden_layers)
            .map(|i| {
                let layer = encoder.pp(format!("layer.{i}"));
                let attention = layer.pp("attention");
                let attn = attention.pp("attn");
                Ok(Layer {
                    query: linear(hidden, hidden, attn.pp("q"))?,
                    key: linear(hidden, hidden, attn.pp("k"))?,
                    value: linear(hidden, hidden, attn.pp("v"))?,
                    out: linear(hidden, hidden, attn.pp("o"))?,
                    attention_norm: layer_norm(hidden, eps, attention.pp("LayerNorm"))?,
                    intermediate: linear(
                        hidden,
                        config.intermediate_size,
                        layer.pp("intermediate.dense"),
                    )?,
                    output: linear(config.intermediate_size, hidden, layer.pp("output.dense"))?,
                    output_norm: layer_norm(hidden, eps, layer.pp("output.LayerNorm"))?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(MpNet {
            words: embedding(config.vocab_size, hidden, embeddings.pp("word_embeddings"))?,
            positions: embedding(
                config.max_position_embeddings,
                hidden,
                embeddings.pp("position_embeddings"),
            )?,
            norm: layer_norm(hidden, eps, embeddings.pp("LayerNorm"))?,
            layers,
            relative_bias: embedding(
                config.relative_attention_num_buckets,
                config.num_attention_heads,
                encoder.pp("relative_attention_bias"),
            )?,
            heads: config.num_attention_heads,
            buckets: config.relative_attention_num_buckets,
            pad: config.pad_token_id,
        })
    }

    /// The last hidden states `[batch, tokens, hidden]` of `ids` `[batch, tokens]`, where
    /// `mask` is 1 for a real token and 0 for padding.
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let tokens = ids.dim(1)?;
        // transformers' create_position_ids_from_input_ids: real tokens count from pad + 1,
        // padding keeps the padding row.
        let real = ids.ne(self.pad)?.to_dtype(DType::F32)?;
        let positions = (real.cumsum(1)? * &real)?
            .affine(1.0, f64::from(self.pad))?
            .to_dtype(DType::U32)?;
        let x = (self.words.forward(ids)? + self.positions.forward(&positions)?)?;
        let mut x = self.norm.forward(&x)?;
        // Padding is never attended to; the bias is the same for every text of the batch.
        let padding = mask
            .to_dtype(DType::F32)?
            .affine(f64::from(f32::MAX), -f64::from(f32::MAX))?
            .unsqueeze(1)?
            .unsqueeze(1)?;
        let bias = self
            .position_bias(tokens, ids.device())?
            .broadcast_add(&padding)?;
        for layer in &self.layers {
            x = layer.forward(&x, &bias, self.heads)?;
        }
        Ok(x)
    }

    /// `[1, heads, tokens, tokens]`: the learnt bias of each head for the distance from each
    /// query token to each key token.
    fn position_bias(&self, tokens: usize, device: &Device) -> Result<Tensor> {
        let buckets: Vec<u32> = (0..tokens as i64)
            .flat_map(|query| (0..tokens as i64).map(move |key| key - query))
            .map(|distance| bucket(distance, self.buckets))
            .collect();
        let buckets = Tensor::from_vec(buckets, (tokens, tokens), device)?;
        self.relative_bias
            .forward(&buckets)?
            .permute((2, 0, 1))?
            .unsqueeze(0)
    }
}

/// transformers' `relative_position_bucket` for MPNet: half the buckets for keys before the
/// query, half after; exact up to a quarter of the buckets, logarithmic beyond, the last
/// bucket for everything far.
fn bucket(distance: i64, buckets: usize) -> u32 {
    let half = (buckets / 2) as i64;
    let exact = half / 2;
    let after = if distance > 0 { half } else { 0 };
    let n = distance.abs();
    let within = if n < exact {
        n
    } else {
        let scaled = (n as f64 / exact as f64).ln() / (MAX_DISTANCE / exact as f64).ln();
        (exact + (scaled * (half - exact) as f64) as i64).min(half - 1)
    };
    (after + within) as u32
}

impl Layer {
    fn forward(&self, x: &Tensor, bias: &Tensor, heads: usize) -> Result<Tensor> {
        let (batch, tokens, hidden) = x.dims3()?;
        let width = hidden / heads;
        let split = |y: Tensor| {
            y.reshape((batch, tokens, heads, width))?
                .transpose(1, 2)?
                .contiguous()
        };
        let query = split(self.query.forward(x)?)?;
        let key = split(self.key.forward(x)?)?;
        let value = split(self.value.forward(x)?)?;
        let scores = (query.matmul(&key.t()?)? / (width as f64).sqrt())?.broadcast_add(bias)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let context = weights
            .matmul(&value)?
            .transpose(1, 2)?
            .reshape((batch, tokens, hidden))?;
        let x = self
            .attention_norm
            .forward(&(self.out.forward(&context)? + x)?)?;
        let inner = self.intermediate.forward(&x)?.gelu_erf()?;
        self.output_norm
            .forward(&(self.output.forward(&inner)? + x)?)
    }
}

#[cfg(test)]
mod tests {
    use super::bucket;

    /// The buckets transformers gives each distance with 32 buckets (docs/models.md):
    /// 0–7 exact, then logarithmic to 15 from 91 on; keys after the query 16 higher.
    #[test]
    fn distances_fall_in_transformers_buckets() {
        let expected = [
            (0, 0),
            (-1, 1),
            (-7, 7),
            (-8, 8),
            (-11, 8),
            (-12, 9),
            (-15, 9),
            (-16, 10),
            (-22, 10),
            (-23, 11),
            (-31, 11),
            (-32, 12),
            (-45, 12),
            (-46, 13),
            (-63, 13),
            (-64, 14),
            (-90, 14),
            (-91, 15),
            (-500, 15),
        ];
        for (distance, want) in expected {
            assert_eq!(bucket(distance, 32), want, "key {distance} from the query");
            if distance != 0 {
                assert_eq!(bucket(-distance, 32), want + 16, "key {} after", -distance);
            }
        }
    }
}
