//! EmbeddingGemma (google/embeddinggemma-300m): Gemma 3's text transformer run both ways,
//! then mean pooling, two Dense layers and L2 normalisation, as sentence-transformers runs it.
//! Every equation and number is in bench/embeddinggemma.md ("Architecture as equations"); in
//! short, per layer: RMSNorm (`x · (1 + w)`) before and after attention and the feed-forward,
//! a per-head RMSNorm of queries and keys, rotary positions (rotating halves, with a base of
//! its own for sliding and for full layers), three query heads sharing one key and value
//! head, every token seeing every token on full layers and those at most `window − 1` away on
//! sliding ones, and a gated GELU (tanh form) feed-forward.
//!
//! As the BERT encoder (`crate::model`), texts are not padded: the products run over every
//! token of the batch at once, attention over each text alone, and a batch is split between
//! threads by tokens.

use std::path::Path;

use crate::files::{Matrix, Tensors};
use crate::int8::{Activations, Packed};
use crate::kernels::{self, Kernel};
use crate::model::{Precision, attend, in_threads, linear, pack, sums, weight_products};

pub struct Gemma {
    tensors: Tensors,
    /// 2_Dense and 3_Dense, each its own file.
    dense: [(Tensors, Matrix); 2],
    kernel: Kernel,
    hidden: usize,
    heads: usize,
    head_width: usize,
    /// Query heads that share one key and value head.
    group: usize,
    eps: f32,
    words: Matrix,
    /// √hidden, rounded to f32 as the model rounds it.
    scale: f32,
    layers: Vec<Layer>,
    /// The final norm's `1 + w`.
    norm: Vec<f32>,
    /// On sliding layers a token sees the tokens fewer than this many positions away.
    window: usize,
    /// `[positions, head_width / 2]` cosines and sines of the rotary angles, for sliding and
    /// for full layers.
    rotary: [Rotary; 2],
    max_tokens: usize,
    /// `query_pre_attn_scalar^-1/2`.
    attention_scale: f32,
    /// The bias of every product, which Gemma's have none of: as wide as the widest.
    zeros: Vec<f32>,
    threads: usize,
}

struct Rotary {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

struct Weight {
    matrix: Matrix,
    packed: Option<Packed>,
}

struct Layer {
    sliding: bool,
    /// Each norm's `1 + w`.
    input_norm: Vec<f32>,
    query: Weight,
    key: Weight,
    value: Weight,
    query_norm: Vec<f32>,
    key_norm: Vec<f32>,
    out: Weight,
    post_attention_norm: Vec<f32>,
    pre_feedforward_norm: Vec<f32>,
    gate: Weight,
    up: Weight,
    down: Weight,
    post_feedforward_norm: Vec<f32>,
}

impl Layer {
    fn weights_mut(&mut self) -> [&mut Weight; 7] {
        [
            &mut self.query,
            &mut self.key,
            &mut self.value,
            &mut self.out,
            &mut self.gate,
            &mut self.up,
            &mut self.down,
        ]
    }
}

/// `config.json` of a Gemma 3 text model, as transformers writes it.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Config {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    rms_norm_eps: f64,
    rope_theta: f64,
    rope_local_base_freq: f64,
    sliding_window: usize,
    layer_types: Vec<String>,
    query_pre_attn_scalar: f64,
    max_position_embeddings: usize,
    hidden_activation: String,
    #[serde(default)]
    use_bidirectional_attention: bool,
    #[serde(default)]
    attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    rope_scaling: Option<serde_json::Value>,
}

impl Gemma {
    /// The model in `dir`, whose `config.json` is `config`: `model.safetensors`, and the two
    /// Dense layers of sentence-transformers in `2_Dense/` and `3_Dense/`. What this encoder
    /// does not run (causal attention, logit softcapping, scaled positions, another
    /// activation) is refused by name.
    pub(crate) fn open(dir: &Path, config: &Config, kernel: Kernel) -> Result<Gemma, String> {
        let refuse = |what: &str| Err(format!("{what} is not implemented for Gemma 3 models"));
        if !config.use_bidirectional_attention {
            return refuse("causal attention (an embedding model attends both ways)");
        }
        if config.attn_logit_softcapping.is_some() {
            return refuse("attention logit softcapping");
        }
        if config.rope_scaling.as_ref().is_some_and(|s| !s.is_null()) {
            return refuse("rope_scaling");
        }
        if config.hidden_activation != "gelu_pytorch_tanh" {
            return refuse(&format!(
                "hidden_activation \"{}\"",
                config.hidden_activation
            ));
        }
        let (h, f, w) = (
            config.hidden_size,
            config.intermediate_size,
            config.head_dim,
        );
        let (heads, kv) = (config.num_attention_heads, config.num_key_value_heads);
        if heads == 0
            || kv == 0
            || !heads.is_multiple_of(kv)
            || w == 0
            || !w.is_multiple_of(4)
            || !h.is_multiple_of(4)
            || !f.is_multiple_of(4)
            || heads * w != h
            || config.layer_types.len() != config.num_hidden_layers
        {
            return refuse(&format!(
                "a hidden size of {h} in {heads} heads of {w} ({kv} for keys and values), \
                 intermediate {f}, {} layer types for {} layers,",
                config.layer_types.len(),
                config.num_hidden_layers
            ));
        }
        let tensors = Tensors::safetensors(&dir.join("model.safetensors"))?;
        let dense = |folder: &str, rows: usize, cols: usize| -> Result<(Tensors, Matrix), String> {
            let file = Tensors::safetensors(&dir.join(folder).join("model.safetensors"))?;
            let matrix = file.matrix("linear.weight", rows, cols)?;
            Ok((file, matrix))
        };
        let first = dense("2_Dense", 4 * h, h)?;
        let second = dense("3_Dense", h, 4 * h)?;
        let t = &tensors;
        let plus_one = |name: &str, len: usize| -> Result<Vec<f32>, String> {
            Ok(t.vector(name, len)?.into_iter().map(|w| 1.0 + w).collect())
        };
        let weight = |name: &str, rows: usize, cols: usize| -> Result<Weight, String> {
            Ok(Weight {
                matrix: t.matrix(name, rows, cols)?,
                packed: None,
            })
        };
        let layers = (config.layer_types.iter().enumerate())
            .map(|(i, kind)| {
                let at = |part: &str| format!("layers.{i}.{part}");
                let sliding = match kind.as_str() {
                    "sliding_attention" => true,
                    "full_attention" => false,
                    other => {
                        return Err(format!(
                            "layer type \"{other}\" is not implemented for Gemma 3 models"
                        ));
                    }
                };
                Ok(Layer {
                    sliding,
                    input_norm: plus_one(&at("input_layernorm.weight"), h)?,
                    query: weight(&at("self_attn.q_proj.weight"), heads * w, h)?,
                    key: weight(&at("self_attn.k_proj.weight"), kv * w, h)?,
                    value: weight(&at("self_attn.v_proj.weight"), kv * w, h)?,
                    query_norm: plus_one(&at("self_attn.q_norm.weight"), w)?,
                    key_norm: plus_one(&at("self_attn.k_norm.weight"), w)?,
                    out: weight(&at("self_attn.o_proj.weight"), h, heads * w)?,
                    post_attention_norm: plus_one(&at("post_attention_layernorm.weight"), h)?,
                    pre_feedforward_norm: plus_one(&at("pre_feedforward_layernorm.weight"), h)?,
                    gate: weight(&at("mlp.gate_proj.weight"), f, h)?,
                    up: weight(&at("mlp.up_proj.weight"), f, h)?,
                    down: weight(&at("mlp.down_proj.weight"), h, f)?,
                    post_feedforward_norm: plus_one(&at("post_feedforward_layernorm.weight"), h)?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let words = t.matrix("embed_tokens.weight", config.vocab_size, h)?;
        let norm = plus_one("norm.weight", h)?;
        let max_tokens = config.max_position_embeddings;
        Ok(Gemma {
            tensors,
            dense: [first, second],
            kernel,
            hidden: h,
            heads,
            head_width: w,
            group: heads / kv,
            eps: config.rms_norm_eps as f32,
            words,
            scale: (h as f32).sqrt(),
            layers,
            norm,
            // With attention both ways transformers halves the configured window (its
            // `Gemma3TextConfig`: `sliding_window // 2 + 1`, an exclusive bound).
            window: config.sliding_window / 2 + 1,
            rotary: [
                Rotary::new(config.rope_local_base_freq, w, max_tokens),
                Rotary::new(config.rope_theta, w, max_tokens),
            ],
            max_tokens,
            attention_scale: (1.0 / config.query_pre_attn_scalar.sqrt()) as f32,
            zeros: vec![0.0; (4 * h).max(f)],
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        })
    }

    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// The width of the key (and of the value) heads together.
    fn kv_width(&self) -> usize {
        self.heads / self.group * self.head_width
    }

    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    pub fn vocabulary(&self) -> usize {
        self.words.rows
    }

    pub fn with_threads(mut self, threads: usize) -> Gemma {
        self.threads = threads.max(1);
        self
    }

    /// As `crate::model::Bert::with_precision`: the seven weight products of every layer in
    /// bytes with `Precision::Int8` (the Dense layers, one product a text, stay f32).
    pub fn with_precision(mut self, precision: Precision) -> Result<Gemma, String> {
        let weights = (self.layers.iter_mut())
            .flat_map(Layer::weights_mut)
            .map(|Weight { matrix, packed }| (&*matrix, packed));
        pack(&mut self.tensors, self.kernel, precision, weights)?;
        Ok(self)
    }

    /// The unit-length vector of each text's token ids (checked by `crate::Encoder`).
    pub fn encode(&self, texts: &[&[u32]]) -> Vec<Vec<f32>> {
        in_threads(texts, self.threads, |group| self.run(group))
    }

    fn run(&self, texts: &[&[u32]]) -> Vec<Vec<f32>> {
        let h = self.hidden;
        let lengths: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        let tokens: usize = lengths.iter().sum();
        let file = &self.tensors.map[..];
        let mut x = vec![0f32; tokens * h];
        let mut scratch = vec![0f32; h];
        let ids = texts.iter().flat_map(|ids| ids.iter());
        for (&id, row) in ids.zip(x.chunks_exact_mut(h)) {
            let word = self.words.row(file, id as usize, self.kernel, &mut scratch);
            row.iter_mut()
                .zip(word)
                .for_each(|(x, w)| *x = w * self.scale);
        }
        let mut work = Work::new(tokens, self);
        for layer in &self.layers {
            self.layer(layer, &mut x, &lengths, &mut work);
        }
        self.rms_norm_rows(&mut x, &self.norm);
        sums(&x, &lengths, h)
            .into_iter()
            .zip(&lengths)
            .map(|(sum, &n)| {
                let pooled: Vec<f32> = sum.iter().map(|s| (s / n as f64) as f32).collect();
                let mut wide = vec![0f32; 4 * h];
                let [(first_file, first), (second_file, second)] = &self.dense;
                let zeros = &self.zeros[..4 * h];
                linear(
                    self.kernel,
                    &first_file.map,
                    &pooled,
                    first,
                    zeros,
                    &mut wide,
                );
                let mut out = vec![0f32; h];
                linear(
                    self.kernel,
                    &second_file.map,
                    &wide,
                    second,
                    &zeros[..h],
                    &mut out,
                );
                let norm = out
                    .iter()
                    .map(|v| f64::from(*v) * f64::from(*v))
                    .sum::<f64>()
                    .sqrt();
                out.iter().map(|v| (f64::from(*v) / norm) as f32).collect()
            })
            .collect()
    }

    fn layer(&self, layer: &Layer, x: &mut [f32], lengths: &[usize], w: &mut Work) {
        let h = self.hidden;
        let width = self.head_width;
        w.normed.copy_from_slice(x);
        self.rms_norm_rows(&mut w.normed, &layer.input_norm);
        self.products(
            &w.normed,
            &mut w.quantized,
            [
                (&layer.query, &mut w.query),
                (&layer.key, &mut w.key),
                (&layer.value, &mut w.value),
            ],
        );
        self.rms_norm_rows(&mut w.query, &layer.query_norm);
        self.rms_norm_rows(&mut w.key, &layer.key_norm);
        let rotary = &self.rotary[usize::from(!layer.sliding)];
        let kv = self.kv_width();
        let mut start = 0;
        for &n in lengths {
            for p in 0..n {
                let at = start + p;
                let row = &mut w.query[at * h..(at + 1) * h];
                for head in row.chunks_exact_mut(width) {
                    rotary.rotate(head, p);
                }
                for head in w.key[at * kv..(at + 1) * kv].chunks_exact_mut(width) {
                    rotary.rotate(head, p);
                }
            }
            start += n;
        }
        self.attention(layer.sliding, lengths, w);
        self.products(
            &w.context,
            &mut w.quantized,
            [(&layer.out, &mut w.attended)],
        );
        self.add_normed(x, &mut w.attended, &layer.post_attention_norm);
        w.normed.copy_from_slice(x);
        self.rms_norm_rows(&mut w.normed, &layer.pre_feedforward_norm);
        self.products(
            &w.normed,
            &mut w.quantized,
            [(&layer.gate, &mut w.gate), (&layer.up, &mut w.up)],
        );
        kernels::gelu_tanh_times(self.kernel, &mut w.gate, &w.up);
        self.products(&w.gate, &mut w.quantized, [(&layer.down, &mut w.attended)]);
        self.add_normed(x, &mut w.attended, &layer.post_feedforward_norm);
    }

    /// Each row of `rows`, as wide as `norm`, through RMSNorm scaled by `norm` (its `1 + w`).
    fn rms_norm_rows(&self, rows: &mut [f32], norm: &[f32]) {
        for row in rows.chunks_exact_mut(norm.len()) {
            kernels::rms_norm(self.kernel, row, norm, self.eps);
        }
    }

    /// `x += RMSNorm(sublayer)`: a sublayer's output, through its closing norm, onto the
    /// residual.
    fn add_normed(&self, x: &mut [f32], sublayer: &mut [f32], norm: &[f32]) {
        self.rms_norm_rows(sublayer, norm);
        x.iter_mut().zip(sublayer.iter()).for_each(|(x, a)| *x += a);
    }

    /// `out = x · weightᵀ` for each weight of `products` taking the same `x`, which is turned
    /// into bytes once when they are in int8.
    fn products<const N: usize>(
        &self,
        x: &[f32],
        quantized: &mut Activations,
        products: [(&Weight, &mut [f32]); N],
    ) {
        let products = products.map(|(w, out)| {
            let zeros = &self.zeros[..w.matrix.rows];
            (&w.matrix, w.packed.as_ref(), zeros, out)
        });
        weight_products(self.kernel, &self.tensors.map, x, quantized, products);
    }

    /// Each text's tokens attend to that text's tokens (on sliding layers, to those fewer
    /// than `window` away), head by head; a group of query heads reads one key and value head.
    fn attention(&self, sliding: bool, lengths: &[usize], w: &mut Work) {
        let (h, width) = (self.hidden, self.head_width);
        let kv_width = self.kv_width();
        let mut start = 0;
        for &n in lengths {
            w.scores.resize(n * n, 0.0);
            let mut values = vec![0f32; width * n];
            for head in 0..self.heads {
                let shared = (head / self.group) * width;
                let keys_at = |t: usize| {
                    let at = (start + t) * kv_width + shared;
                    at..at + width
                };
                let (key, value) = (&w.key, &w.value);
                let rows = start * h + head * width;
                attend(
                    self.kernel,
                    (n, width, h),
                    &w.query[rows..],
                    |t| (&key[keys_at(t)], &value[keys_at(t)]),
                    |qi, kj, product| {
                        if sliding && qi.abs_diff(kj) >= self.window {
                            f32::NEG_INFINITY
                        } else {
                            product * self.attention_scale
                        }
                    },
                    (&mut w.scores, &mut values),
                    &mut w.context[rows..],
                );
            }
            start += n;
        }
    }
}

impl Rotary {
    /// The angles of position p: p · base^(−2i/width) for i below width / 2, in f64 as the
    /// float64 reference computes them, kept in f32.
    fn new(base: f64, width: usize, positions: usize) -> Rotary {
        let half = width / 2;
        let (mut cos, mut sin) = (
            Vec::with_capacity(positions * half),
            Vec::with_capacity(positions * half),
        );
        for p in 0..positions {
            for i in 0..half {
                let angle = p as f64 * base.powf(-2.0 * i as f64 / width as f64);
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        Rotary { cos, sin }
    }

    /// Rotates one head's halves in place: `x · cos + rotate_half(x) · sin`, with
    /// `rotate_half(x) = [−x₂, x₁]`.
    fn rotate(&self, head: &mut [f32], p: usize) {
        let half = head.len() / 2;
        let (cos, sin) = (
            &self.cos[p * half..(p + 1) * half],
            &self.sin[p * half..(p + 1) * half],
        );
        let (first, second) = head.split_at_mut(half);
        for i in 0..half {
            let (a, b) = (first[i], second[i]);
            first[i] = a * cos[i] - b * sin[i];
            second[i] = b * cos[i] + a * sin[i];
        }
    }
}

/// The buffers of one pass through the layers.
struct Work {
    normed: Vec<f32>,
    query: Vec<f32>,
    key: Vec<f32>,
    value: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    scores: Vec<f32>,
    quantized: Activations,
}

impl Work {
    fn new(tokens: usize, model: &Gemma) -> Work {
        let rows = vec![0f32; tokens * model.hidden];
        let kv = vec![0f32; tokens * model.kv_width()];
        let feedforward = model.layers.first().map_or(0, |l| l.gate.matrix.rows);
        Work {
            normed: rows.clone(),
            query: rows.clone(),
            key: kv.clone(),
            value: kv,
            context: rows.clone(),
            attended: rows,
            gate: vec![0f32; tokens * feedforward],
            up: vec![0f32; tokens * feedforward],
            scores: Vec::new(),
            quantized: Activations::default(),
        }
    }
}
