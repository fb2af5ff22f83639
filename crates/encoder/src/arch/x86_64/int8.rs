//! The int8 products and the activations' quantisation for AVX-512 VNNI and AVX-VNNI
//! (`crate::int8`).

use std::arch::x86_64::*;

use crate::int8::{Activations, BLOCK, Packed, inverse};

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
            let inverse = _mm512_set1_ps(inverse(largest));
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
            let inverse = _mm256_set1_ps(inverse(largest));
            *scale = largest / 127.0;
            let q = v.map(|v| _mm256_cvtps_epi32(_mm256_mul_ps(v, inverse)));
            let words = (
                _mm256_packs_epi32(q[0], q[1]),
                _mm256_packs_epi32(q[2], q[3]),
            );
            let signed = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words.0, words.1), order);
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
                            let first = _mm256_broadcastsi128_si256(_mm_loadu_si128(values.cast()));
                            let last =
                                _mm256_broadcastsi128_si256(_mm_loadu_si128(values.add(16).cast()));
                            let dot = _mm256_dpbusd_avx_epi32(start, first, low);
                            let dot = _mm256_dpbusd_avx_epi32(dot, last, high);
                            let scale = _mm256_mul_ps(
                                scales,
                                _mm256_set1_ps(*x.scales.get_unchecked(r * blocks + b)),
                            );
                            acc[d][p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[d][p]);
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
                        let last = _mm512_broadcast_i32x4(_mm_loadu_si128(values.add(16).cast()));
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
