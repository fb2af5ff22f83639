//! The weight products in eight bits (docs/models.md, "int8 products"), for
//! `EMBEDDING_PRECISION=int8`: weights and activations in signed bytes, 32 to a block with
//! one f32 scale each, multiplied four bytes at a time by AVX-512 VNNI or AVX-VNNI
//! (`vpdpbusd`), or by NEON's dot-product extension (`SDOT`), and summed in 32-bit integers
//! within a block. e5's q4 weights become bytes exactly (a nibble − 8);
//! f32 weights and every activation are rounded to 1/127 of their block's largest value, so
//! the vectors move (by about 1e-3 in cosine), which is why it is a setting.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones: activations are kept as `q + 128`,
//! and each block's `128 × Σ weights` is taken away again by starting the sum from it.
//! `SDOT` multiplies signed bytes, and flips the activations back as it loads them.

#[cfg(target_arch = "aarch64")]
use crate::arch::aarch64::int8 as aarch64;
#[cfg(target_arch = "x86_64")]
use crate::arch::x86_64::int8 as x86_64;
use crate::kernels::{Isa, Kernel};

/// Whether `kernel` has int8 products: AVX-512 with AVX-512 VNNI, AVX2 with AVX-VNNI (Alder
/// Lake and later, Zen 5), NEON with the dot-product extension (Apple M1 and later, Graviton
/// 2 and later), and the portable kernel (which defines them, and is slow). Without them,
/// byte products would be slower than f32 ones (docs/models.md, "int8 products").
pub fn runs_on(kernel: Kernel) -> bool {
    #[cfg(target_arch = "x86_64")]
    return crate::arch::x86_64::int8_products(kernel.isa());
    #[cfg(target_arch = "aarch64")]
    return crate::arch::aarch64::int8_products(kernel.isa());
    #[allow(unreachable_code)]
    {
        let _ = kernel;
        true
    }
}

/// The CPU feature `kernel` needs for int8 products, as its makers name it.
pub fn needs(kernel: Kernel) -> &'static str {
    match kernel.isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => "AVX-512 VNNI",
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => "AVX-VNNI",
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => "the dot-product extension (FEAT_DotProd)",
        Isa::Portable => "nothing",
    }
}

/// Refuses int8 products on a kernel without them (`runs_on`), naming what it lacks.
pub fn usable(kernel: Kernel) -> Result<(), String> {
    if runs_on(kernel) {
        return Ok(());
    }
    Err(format!(
        "int8 products need {} for the {} kernel, which this CPU lacks (without it they \
         would run slower than f32); use f32",
        needs(kernel),
        kernel.name()
    ))
}

/// Refuses a product `cols` wide, which blocks of `BLOCK` cannot cut.
pub fn packable(cols: usize) -> Result<(), String> {
    if cols.is_multiple_of(BLOCK) {
        return Ok(());
    }
    Err(format!(
        "int8 products need widths that are multiples of {BLOCK}, not {cols}"
    ))
}

/// Values in a block, for weights and activations alike.
pub const BLOCK: usize = 32;

/// A weight matrix `[rows, cols]` in signed bytes, laid out as the VNNI kernel reads it:
/// rows in groups of four, and for each group and block of 32 columns 128 bytes (the block's
/// first 16 values of rows 0–3, then its last 16 of rows 0–3), the four rows' scales, and
/// the four rows' `−32 × Σ bytes` (a quarter of the offset each of a row's four lanes starts
/// from).
pub struct Packed {
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) bytes: Vec<i8>,
    pub(crate) scales: Vec<f32>,
    pub(crate) offsets: Vec<i32>,
}

impl Packed {
    /// Packs `rows × cols` weights (`rows` a multiple of 4, `cols` of 32), row r given by
    /// `row(r, bytes, scales)` as `cols` signed bytes and `cols / 32` block scales.
    pub fn new(
        rows: usize,
        cols: usize,
        mut row: impl FnMut(usize, &mut [i8], &mut [f32]),
    ) -> Packed {
        assert!(rows.is_multiple_of(4) && cols.is_multiple_of(BLOCK));
        let blocks = cols / BLOCK;
        let mut packed = Packed {
            rows,
            cols,
            bytes: vec![0; rows * cols],
            scales: vec![0.0; rows * blocks],
            offsets: vec![0; rows * blocks],
        };
        let (mut bytes, mut scales) = (vec![0i8; cols], vec![0f32; blocks]);
        for r in 0..rows {
            row(r, &mut bytes, &mut scales);
            let (group, c) = (r / 4, r % 4);
            for b in 0..blocks {
                let at = (group * blocks + b) * 4 * BLOCK;
                let values = &bytes[b * BLOCK..(b + 1) * BLOCK];
                for half in 0..2 {
                    let to = at + half * 64 + c * 16;
                    packed.bytes[to..to + 16].copy_from_slice(&values[half * 16..half * 16 + 16]);
                }
                let i = (group * blocks + b) * 4 + c;
                packed.scales[i] = scales[b];
                packed.offsets[i] = -32 * values.iter().map(|v| i32::from(*v)).sum::<i32>();
            }
        }
        packed
    }

    /// The width of its rows: the length of the input rows it multiplies.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// How many rows: the width of what it gives.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// `out[r · rows + j] = x_r · row_j + bias_j` for every row r of `x`.
    pub fn product(&self, kernel: Kernel, x: &Activations, bias: &[f32], out: &mut [f32]) {
        assert_eq!(x.cols, self.cols, "activations as wide as the weights");
        assert_eq!(bias.len(), self.rows);
        assert_eq!(out.len(), x.rows() * self.rows);
        if runs_on(kernel) {
            match kernel.isa() {
                // SAFETY (all): the CPU has the kernel's features and its int8 products
                // (checked); the sizes are asserted above.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => {
                    return unsafe { x86_64::product_avx512_vnni(self, x, bias, out) };
                }
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => {
                    return unsafe { x86_64::product_avx_vnni(self, x, bias, out) };
                }
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => return unsafe { aarch64::product_sdot(self, x, bias, out) },
                Isa::Portable => {}
            }
        }
        product_portable(self, x, bias, out);
    }
}

/// Rows of activations in bytes: `q + 128` for `q = round(value / scale)`, the scale a
/// block's largest magnitude over 127.
#[derive(Default)]
pub struct Activations {
    pub(crate) cols: usize,
    pub(crate) bytes: Vec<u8>,
    pub(crate) scales: Vec<f32>,
}

impl Activations {
    /// Takes the rows of `x`, each `cols` long (a multiple of 32).
    pub fn quantize(&mut self, kernel: Kernel, x: &[f32], cols: usize) {
        assert!(cols.is_multiple_of(BLOCK) && x.len().is_multiple_of(cols));
        self.cols = cols;
        self.bytes.resize(x.len(), 0);
        self.scales.resize(x.len() / BLOCK, 0.0);
        quantize_activations(kernel, x, &mut self.bytes, &mut self.scales);
    }

    pub fn rows(&self) -> usize {
        self.bytes.len().checked_div(self.cols).unwrap_or(0)
    }
}

/// Activations to bytes, block by block (`Activations`).
fn quantize_activations(kernel: Kernel, x: &[f32], bytes: &mut [u8], scales: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    match kernel.isa() {
        // SAFETY (both): the CPU has the kernel's features; the sizes are as `quantize`
        // makes them.
        Isa::Avx512 => return unsafe { x86_64::quantize_avx512(x, bytes, scales) },
        Isa::Avx2 => return unsafe { x86_64::quantize_avx2(x, bytes, scales) },
        Isa::Portable => {}
    }
    // NEON's is the loop below, vectorised for it (AArch64's baseline).
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernel;
    for ((values, bytes), scale) in x
        .chunks_exact(BLOCK)
        .zip(bytes.chunks_exact_mut(BLOCK))
        .zip(scales.iter_mut())
    {
        let largest = values.iter().fold(0f32, |a, v| a.max(v.abs()));
        *scale = largest / 127.0;
        let inverse = inverse(largest);
        for (b, v) in bytes.iter_mut().zip(values) {
            *b = ((v * inverse).round_ties_even() as i32 + 128) as u8;
        }
    }
}

/// What a block's values are multiplied by to become bytes: 127 over its largest magnitude,
/// or 0 where that is not finite (a block of zeros, or one so small that the quotient
/// overflows), so that every kernel rounds such a block to zeros alike.
#[inline(always)]
pub(crate) fn inverse(largest: f32) -> f32 {
    let inverse = 127.0 / largest;
    if inverse.is_finite() { inverse } else { 0.0 }
}

/// f32 weights to signed bytes, block by block, rounded as activations are (each block's
/// largest magnitude becomes 127), without their offset of 128.
pub fn quantize_weights(kernel: Kernel, values: &[f32], bytes: &mut [i8], scales: &mut [f32]) {
    let mut unsigned = vec![0u8; bytes.len()];
    quantize_activations(kernel, values, &mut unsigned, scales);
    for (b, u) in bytes.iter_mut().zip(unsigned) {
        *b = (u ^ 0x80) as i8;
    }
}

/// The products as the VNNI kernel computes them, a block's integer sum at a time.
fn product_portable(w: &Packed, x: &Activations, bias: &[f32], out: &mut [f32]) {
    let (n, k, blocks) = (w.rows, w.cols, w.cols / BLOCK);
    for r in 0..x.rows() {
        let row = &x.bytes[r * k..(r + 1) * k];
        for j in 0..n {
            let (group, c) = (j / 4, j % 4);
            let mut sum = 0f32;
            for b in 0..blocks {
                let at = (group * blocks + b) * 4 * BLOCK;
                let i = (group * blocks + b) * 4 + c;
                let mut dot = 4 * w.offsets[i];
                for half in 0..2 {
                    let weights = &w.bytes[at + half * 64 + c * 16..][..16];
                    let values = &row[b * BLOCK + half * 16..][..16];
                    dot += weights
                        .iter()
                        .zip(values)
                        .map(|(w, v)| i32::from(*w) * i32::from(*v))
                        .sum::<i32>();
                }
                sum += dot as f32 * (w.scales[i] * x.scales[r * blocks + b]);
            }
            out[r * n + j] = sum + bias[j];
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn packed(weights: &[f32], rows: usize, cols: usize) -> Packed {
        Packed::new(rows, cols, |r, bytes, scales| {
            quantize_weights(
                Kernel::portable(),
                &weights[r * cols..(r + 1) * cols],
                bytes,
                scales,
            )
        })
    }

    proptest! {
        /// Every kernel's int8 products are the portable ones (the same integer sums,
        /// scaled in another order), and within the rounding of bytes of the f32 products.
        #[test]
        fn every_kernels_int8_products_are_the_products(
            blocks in 1usize..4,
            groups in 1usize..4,
            m in 1usize..10,
            seed in prop::collection::vec(-2.0f32..2.0, 12 * 96 + 10 * 96),
            bias in -1.0f32..1.0,
        ) {
            let (n, k) = (groups * 4, blocks * BLOCK);
            let (w, x) = seed.split_at(12 * 96);
            let (w, x) = (&w[..n * k], &x[..m * k]);
            let weights = packed(w, n, k);
            let bias = vec![bias; n];
            let mut rows = Activations::default();
            rows.quantize(Kernel::portable(), x, k);
            let mut want = vec![0f32; m * n];
            weights.product(Kernel::portable(), &rows, &bias, &mut want);
            for kernel in Kernel::available() {
                let mut again = Activations::default();
                again.quantize(kernel, x, k);
                prop_assert!(again.bytes == rows.bytes && again.scales == rows.scales,
                    "{}: the same bytes", kernel.name());
                let mut got = vec![f32::NAN; m * n];
                weights.product(kernel, &again, &bias, &mut got);
                for r in 0..m {
                    for j in 0..n {
                        let (g, p) = (got[r * n + j], want[r * n + j]);
                        let x = &x[r * k..(r + 1) * k];
                        let w = &w[j * k..(j + 1) * k];
                        let size: f32 = x.iter().zip(w).map(|(a, b)| (a * b).abs()).sum();
                        let exact: f32 = x.iter().zip(w).map(|(a, b)| a * b).sum::<f32>() + bias[j];
                        prop_assert!((g - p).abs() <= 1e-5 * (1.0 + size),
                            "{} row {r} column {j}: {g} for {p}", kernel.name());
                        // Bytes hold a value to half of 1/127 of its block's largest.
                        prop_assert!((g - exact).abs() <= 0.02 * (1.0 + size),
                            "{} row {r} column {j}: {g} for the exact {exact}", kernel.name());
                    }
                }
            }
        }
    }

    /// Blocks of zeros, of values so small that 127 over them overflows (subnormals
    /// included), and of huge values become the same bytes and scales under every kernel,
    /// and their products agree: zeros give zero.
    #[test]
    fn odd_blocks_become_the_same_bytes_under_every_kernel() {
        let blocks: [f32; 6] = [0.0, 1e-38, 1e-41, 1.0, -3e5, 1e15];
        let x: Vec<f32> = (blocks.iter().enumerate())
            .flat_map(|(b, size)| (0..BLOCK).map(move |i| size * ((i + b) % 7) as f32 - size))
            .collect();
        let k = x.len();
        let weights = packed(&x.repeat(4), 4, k);
        let mut want = Activations::default();
        want.quantize(Kernel::portable(), &x, k);
        assert!(want.bytes[..BLOCK].iter().all(|b| *b == 128), "zeros");
        assert!(
            want.bytes[BLOCK..3 * BLOCK].iter().all(|b| *b == 128),
            "too small to scale"
        );
        let mut expected = [f32::NAN; 4];
        weights.product(Kernel::portable(), &want, &[0.5; 4], &mut expected);
        assert!(expected.iter().all(|v| v.is_finite()), "{expected:?}");
        for kernel in Kernel::available() {
            let mut got = Activations::default();
            got.quantize(kernel, &x, k);
            assert_eq!(got.bytes, want.bytes, "{}", kernel.name());
            assert_eq!(got.scales, want.scales, "{}", kernel.name());
            let mut out = [f32::NAN; 4];
            weights.product(kernel, &got, &[0.5; 4], &mut out);
            for (o, e) in out.iter().zip(&expected) {
                assert!(
                    (o - e).abs() <= 1e-5 * e.abs(),
                    "{}: {o} for {e}",
                    kernel.name()
                );
            }
            let zeros = Activations {
                cols: BLOCK,
                bytes: vec![128; BLOCK],
                scales: vec![0.0],
            };
            let mut out = [f32::NAN; 4];
            packed(&[0.0; 4 * BLOCK], 4, BLOCK).product(kernel, &zeros, &[0.5; 4], &mut out);
            assert_eq!(out, [0.5; 4], "{}", kernel.name());
        }
    }
}
