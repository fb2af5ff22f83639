//! The weight products in eight bits (docs/models.md, "int8 products"), for
//! `EMBEDDING_PRECISION=int8`: weights and activations in signed bytes, 32 to a block with
//! one f32 scale each, multiplied four bytes at a time by AVX-512 VNNI (`vpdpbusd`) and summed
//! in 32-bit integers within a block. e5's q4 weights become bytes exactly (a nibble − 8);
//! f32 weights and every activation are rounded to 1/127 of their block's largest value, so
//! the vectors move (by about 1e-3 in cosine), which is why it is a setting.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones: activations are kept as `q + 128`,
//! and each block's `128 × Σ weights` is taken away again by starting the sum from it.

use crate::kernels::Kernel;

/// Whether `kernel` has int8 products: AVX-512 with AVX-512 VNNI, AVX2 with AVX-VNNI (Alder
/// Lake and later, Zen 5), and the portable kernel (which defines them, and is slow). Without
/// VNNI, byte products would be slower than f32 ones (docs/models.md, "int8 products").
pub fn runs_on(kernel: Kernel) -> bool {
    match kernel.isa() {
        crate::kernels::Isa::Portable => true,
        #[cfg(target_arch = "x86_64")]
        crate::kernels::Isa::Avx512 => is_x86_feature_detected!("avx512vnni"),
        #[cfg(target_arch = "x86_64")]
        crate::kernels::Isa::Avx2 => is_x86_feature_detected!("avxvnni"),
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

/// The CPU feature `kernel` needs for int8 products, as its makers name it.
pub fn needs(kernel: Kernel) -> &'static str {
    match kernel.isa() {
        crate::kernels::Isa::Avx512 => "AVX-512 VNNI",
        crate::kernels::Isa::Avx2 => "AVX-VNNI",
        crate::kernels::Isa::Portable => "nothing",
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
    rows: usize,
    cols: usize,
    bytes: Vec<i8>,
    scales: Vec<f32>,
    offsets: Vec<i32>,
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
        #[cfg(target_arch = "x86_64")]
        if runs_on(kernel) {
            match kernel.isa() {
                // SAFETY (both): the CPU has the kernel's features and VNNI (checked); the
                // sizes are asserted above.
                crate::kernels::Isa::Avx512 => {
                    return unsafe { x86::product_avx512_vnni(self, x, bias, out) };
                }
                crate::kernels::Isa::Avx2 => {
                    return unsafe { x86::product_avx_vnni(self, x, bias, out) };
                }
                crate::kernels::Isa::Portable => {}
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = kernel;
        product_portable(self, x, bias, out);
    }
}

/// Rows of activations in bytes: `q + 128` for `q = round(value / scale)`, the scale a
/// block's largest magnitude over 127.
#[derive(Default)]
pub struct Activations {
    cols: usize,
    bytes: Vec<u8>,
    scales: Vec<f32>,
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
        crate::kernels::Isa::Avx512 => return unsafe { x86::quantize_avx512(x, bytes, scales) },
        crate::kernels::Isa::Avx2 => return unsafe { x86::quantize_avx2(x, bytes, scales) },
        crate::kernels::Isa::Portable => {}
    }
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
fn inverse(largest: f32) -> f32 {
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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Activations, BLOCK, Packed};

    /// `quantize_activations`, two registers a block; the conversion rounds to nearest
    /// even, as the portable `round_ties_even`.
    ///
    /// SAFETY: the CPU has AVX-512 F/BW/VL; `x` and `bytes` hold `scales.len()` blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
    pub unsafe fn quantize_avx512(x: &[f32], bytes: &mut [u8], scales: &mut [f32]) {
        assert!(x.len() >= scales.len() * BLOCK && bytes.len() >= scales.len() * BLOCK);
        let offset = _mm512_set1_epi32(128);
        for (b, scale) in scales.iter_mut().enumerate() {
            // SAFETY: block b lies within x and bytes (asserted).
            unsafe {
                let first = _mm512_loadu_ps(x.as_ptr().add(b * BLOCK));
                let last = _mm512_loadu_ps(x.as_ptr().add(b * BLOCK + 16));
                let largest =
                    _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(first), _mm512_abs_ps(last)));
                let inverse = _mm512_set1_ps(super::inverse(largest));
                *scale = largest / 127.0;
                let to_byte = |v| {
                    _mm512_cvtepi32_epi8(_mm512_add_epi32(
                        _mm512_cvtps_epi32(_mm512_mul_ps(v, inverse)),
                        offset,
                    ))
                };
                let out = bytes.as_mut_ptr().add(b * BLOCK);
                _mm_storeu_si128(out.cast(), to_byte(first));
                _mm_storeu_si128(out.add(16).cast(), to_byte(last));
            }
        }
    }

    /// `quantize_avx512` in four registers of eight.
    ///
    /// SAFETY: the CPU has AVX2; `x` and `bytes` hold `scales.len()` blocks.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_avx2(x: &[f32], bytes: &mut [u8], scales: &mut [f32]) {
        assert!(x.len() >= scales.len() * BLOCK && bytes.len() >= scales.len() * BLOCK);
        let sign = _mm256_set1_ps(-0.0);
        // The two packs interleave the registers' halves: group i of four bytes is register
        // i % 4's half i / 4, which this order puts back in sequence.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let flip = _mm256_set1_epi8(-128);
        for (b, scale) in scales.iter_mut().enumerate() {
            // SAFETY: block b lies within x and bytes (asserted).
            unsafe {
                let at = x.as_ptr().add(b * BLOCK);
                let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(at.add(8 * i)));
                let abs = v.map(|v| _mm256_andnot_ps(sign, v));
                let m = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
                let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
                let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
                let largest = _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
                let inverse = _mm256_set1_ps(super::inverse(largest));
                *scale = largest / 127.0;
                let q = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, inverse)));
                let words = (
                    _mm256_packs_epi32(q[0], q[1]),
                    _mm256_packs_epi32(q[2], q[3]),
                );
                let signed =
                    _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words.0, words.1), order);
                // q + 128 as an unsigned byte is q with its top bit flipped.
                let out = _mm256_xor_si256(signed, flip);
                _mm256_storeu_si256(bytes.as_mut_ptr().add(b * BLOCK).cast(), out);
            }
        }
    }

    /// `product_avx512_vnni` in registers of 256 bits (AVX-VNNI): each holds two weight rows,
    /// so a block takes twice the instructions.
    ///
    /// SAFETY: the CPU has AVX2, FMA and AVX-VNNI; the sizes are as `Packed::product`
    /// asserts.
    #[target_feature(enable = "avx2,fma,avxvnni")]
    pub unsafe fn product_avx_vnni(w: &Packed, x: &Activations, bias: &[f32], out: &mut [f32]) {
        let (n, k, blocks, m) = (w.rows, w.cols, w.cols / BLOCK, x.rows());
        let spread = [
            _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
            _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
        ];
        for group in 0..n / 4 {
            for i in (0..m).step_by(2) {
                let rows: [usize; 2] = std::array::from_fn(|d| (i + d).min(m - 1));
                let mut acc = [[_mm256_setzero_ps(); 2]; 2];
                for b in 0..blocks {
                    let at = group * blocks + b;
                    // SAFETY: as in `product_avx512_vnni`.
                    unsafe {
                        let bytes = w.bytes.as_ptr().add(at * 128);
                        let offsets = _mm256_castsi128_si256(_mm_loadu_si128(
                            w.offsets.as_ptr().add(at * 4).cast(),
                        ));
                        let scales =
                            _mm256_castps128_ps256(_mm_loadu_ps(w.scales.as_ptr().add(at * 4)));
                        for p in 0..2 {
                            let low = _mm256_loadu_si256(bytes.add(32 * p).cast());
                            let high = _mm256_loadu_si256(bytes.add(64 + 32 * p).cast());
                            let start = _mm256_permutevar8x32_epi32(offsets, spread[p]);
                            let scales = _mm256_permutevar8x32_ps(scales, spread[p]);
                            for (d, &r) in rows.iter().enumerate() {
                                let values = x.bytes.as_ptr().add(r * k + b * BLOCK);
                                let first =
                                    _mm256_broadcastsi128_si256(_mm_loadu_si128(values.cast()));
                                let last = _mm256_broadcastsi128_si256(_mm_loadu_si128(
                                    values.add(16).cast(),
                                ));
                                let dot = _mm256_dpbusd_avx_epi32(start, first, low);
                                let dot = _mm256_dpbusd_avx_epi32(dot, last, high);
                                let scale = _mm256_mul_ps(
                                    scales,
                                    _mm256_set1_ps(*x.scales.get_unchecked(r * blocks + b)),
                                );
                                acc[d][p] =
                                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[d][p]);
                            }
                        }
                    }
                }
                for (d, acc) in acc.iter().enumerate().take(m - i) {
                    for (p, acc) in acc.iter().enumerate() {
                        let pairs = _mm256_add_ps(*acc, _mm256_permute_ps(*acc, 0b10_11_00_01));
                        let fours = _mm256_add_ps(pairs, _mm256_permute_ps(pairs, 0b01_00_11_10));
                        let mut lanes = [0f32; 8];
                        // SAFETY: 8 floats.
                        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), fours) };
                        let at = (i + d) * n + group * 4 + 2 * p;
                        out[at] = lanes[0] + bias[group * 4 + 2 * p];
                        out[at + 1] = lanes[4] + bias[group * 4 + 2 * p + 1];
                    }
                }
            }
        }
    }

    /// Four rows of x against a group of four weight rows at a time. Each 128-bit lane of
    /// a register is one weight row; its four 32-bit lanes hold a quarter of the block's
    /// dot product each, started from a quarter of the block's offset.
    ///
    /// SAFETY: the CPU has AVX-512 F/BW/VL and VNNI; the sizes are as `Packed::product`
    /// asserts.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")]
    pub unsafe fn product_avx512_vnni(w: &Packed, x: &Activations, bias: &[f32], out: &mut [f32]) {
        let (n, k, blocks, m) = (w.rows, w.cols, w.cols / BLOCK, x.rows());
        let spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
        for group in 0..n / 4 {
            for i in (0..m).step_by(4) {
                let rows: [usize; 4] = std::array::from_fn(|d| (i + d).min(m - 1));
                let mut acc = [_mm512_setzero_ps(); 4];
                for b in 0..blocks {
                    let at = group * blocks + b;
                    // SAFETY: block `at` has 128 bytes and four scales and offsets; each
                    // row of x has k = 32 · blocks bytes and `blocks` scales.
                    unsafe {
                        let low = _mm512_loadu_si512(w.bytes.as_ptr().add(at * 128).cast());
                        let high = _mm512_loadu_si512(w.bytes.as_ptr().add(at * 128 + 64).cast());
                        let start = _mm512_permutexvar_epi32(
                            spread,
                            _mm512_castsi128_si512(_mm_loadu_si128(
                                w.offsets.as_ptr().add(at * 4).cast(),
                            )),
                        );
                        let scales = _mm512_permutexvar_ps(
                            spread,
                            _mm512_castps128_ps512(_mm_loadu_ps(w.scales.as_ptr().add(at * 4))),
                        );
                        for (d, &r) in rows.iter().enumerate() {
                            let values = x.bytes.as_ptr().add(r * k + b * BLOCK);
                            let first = _mm512_broadcast_i32x4(_mm_loadu_si128(values.cast()));
                            let last =
                                _mm512_broadcast_i32x4(_mm_loadu_si128(values.add(16).cast()));
                            let dot = _mm512_dpbusd_epi32(start, first, low);
                            let dot = _mm512_dpbusd_epi32(dot, last, high);
                            let scale = _mm512_mul_ps(
                                scales,
                                _mm512_set1_ps(*x.scales.get_unchecked(r * blocks + b)),
                            );
                            acc[d] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[d]);
                        }
                    }
                }
                for (d, acc) in acc.iter().enumerate().take(m - i) {
                    // Each 128-bit lane's four sums to its first: the weight row's product.
                    let pairs = _mm512_add_ps(*acc, _mm512_permute_ps(*acc, 0b10_11_00_01));
                    let fours = _mm512_add_ps(pairs, _mm512_permute_ps(pairs, 0b01_00_11_10));
                    let mut lanes = [0f32; 16];
                    // SAFETY: 16 floats.
                    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), fours) };
                    let at = (i + d) * n + group * 4;
                    for c in 0..4 {
                        out[at + c] = lanes[c * 4] + bias[group * 4 + c];
                    }
                }
            }
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
