//! The f32 tile and the q4 unpacking for AVX2 with FMA and for AVX-512
//! (`crate::kernels`).

use std::arch::x86_64::*;

use crate::kernels::{Q4_BLOCK, Q4_BLOCK_BYTES, half, rows_at};

/// SAFETY (both): the CPU has the features; rows of x and w lie within them
/// (`Kernel::products` asserts it).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub unsafe fn products_avx512(
    x: &[f32],
    stride: usize,
    m: usize,
    w: [&[f32]; 4],
    mut emit: impl FnMut(usize, &[[f32; 4]; 4]),
) {
    let k = w[0].len();
    let body = k - k % 16;
    for i in (0..m).step_by(4) {
        let x = rows_at(x, stride, m, i, k);
        let mut acc = [[_mm512_setzero_ps(); 4]; 4];
        let mut o = 0;
        while o < body {
            // SAFETY: o + 16 <= body <= k, the length of every row.
            unsafe {
                let xs = x.map(|r| _mm512_loadu_ps(r.as_ptr().add(o)));
                for c in 0..4 {
                    let wv = _mm512_loadu_ps(w[c].as_ptr().add(o));
                    for r in 0..4 {
                        acc[r][c] = _mm512_fmadd_ps(xs[r], wv, acc[r][c]);
                    }
                }
            }
            o += 16;
        }
        let mut out = [[0f32; 4]; 4];
        for r in 0..4 {
            for c in 0..4 {
                out[r][c] = _mm512_reduce_add_ps(acc[r][c]);
                if body < k {
                    out[r][c] += (body..k).map(|o| x[r][o] * w[c][o]).sum::<f32>();
                }
            }
        }
        emit(i, &out);
    }
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn products_avx2(
    x: &[f32],
    stride: usize,
    m: usize,
    w: [&[f32]; 4],
    mut emit: impl FnMut(usize, &[[f32; 4]; 4]),
) {
    let k = w[0].len();
    let body = k - k % 8;
    for i in (0..m).step_by(4) {
        let x = rows_at(x, stride, m, i, k);
        let mut out = [[0f32; 4]; 4];
        // Two rows at a time: 8 sums, 2 rows and a weight fit AVX2's 16 registers,
        // where 16 sums would spill.
        for pair in 0..2 {
            let rows = [x[2 * pair], x[2 * pair + 1]];
            let mut acc = [[_mm256_setzero_ps(); 4]; 2];
            let mut o = 0;
            while o < body {
                // SAFETY: o + 8 <= body <= k.
                unsafe {
                    let xs = rows.map(|r| _mm256_loadu_ps(r.as_ptr().add(o)));
                    for c in 0..4 {
                        let wv = _mm256_loadu_ps(w[c].as_ptr().add(o));
                        for r in 0..2 {
                            acc[r][c] = _mm256_fmadd_ps(xs[r], wv, acc[r][c]);
                        }
                    }
                }
                o += 8;
            }
            for r in 0..2 {
                for c in 0..4 {
                    let mut sum = sum256(acc[r][c]);
                    if body < k {
                        sum += (body..k).map(|o| rows[r][o] * w[c][o]).sum::<f32>();
                    }
                    out[2 * pair + r][c] = sum;
                }
            }
        }
        emit(i, &out);
    }
}

#[target_feature(enable = "avx2,fma")]
fn sum256(v: __m256) -> f32 {
    let four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    let one = _mm_add_ss(two, _mm_shuffle_ps(two, two, 1));
    _mm_cvtss_f32(one)
}

/// SAFETY (both unpackers): the CPU has the features; `out` holds 32 floats per block.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
pub unsafe fn unpack_q4_avx512(blocks: &[u8], out: &mut [f32]) {
    let (low, eight) = (_mm512_set1_epi32(0x0f), _mm512_set1_epi32(8));
    for (block, out) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(Q4_BLOCK))
    {
        let scale = _mm512_set1_ps(half(u16::from_le_bytes([block[0], block[1]])));
        // SAFETY: a block is 18 bytes, 16 of them from byte 2; out is 32 floats.
        unsafe {
            let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(block.as_ptr().add(2).cast()));
            let lo = _mm512_sub_epi32(_mm512_and_si512(bytes, low), eight);
            let hi = _mm512_sub_epi32(_mm512_srli_epi32(bytes, 4), eight);
            _mm512_storeu_ps(
                out.as_mut_ptr(),
                _mm512_mul_ps(_mm512_cvtepi32_ps(lo), scale),
            );
            _mm512_storeu_ps(
                out.as_mut_ptr().add(16),
                _mm512_mul_ps(_mm512_cvtepi32_ps(hi), scale),
            );
        }
    }
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn unpack_q4_avx2(blocks: &[u8], out: &mut [f32]) {
    let (low, eight) = (_mm256_set1_epi32(0x0f), _mm256_set1_epi32(8));
    for (block, out) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(Q4_BLOCK))
    {
        let scale = _mm256_set1_ps(half(u16::from_le_bytes([block[0], block[1]])));
        for part in 0..2 {
            // SAFETY: 8 bytes at 2 + 8·part lie within the block; the four stores
            // within the 32 floats of out.
            unsafe {
                let bytes =
                    _mm256_cvtepu8_epi32(_mm_loadl_epi64(block.as_ptr().add(2 + 8 * part).cast()));
                let lo = _mm256_sub_epi32(_mm256_and_si256(bytes, low), eight);
                let hi = _mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), eight);
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(8 * part),
                    _mm256_mul_ps(_mm256_cvtepi32_ps(lo), scale),
                );
                _mm256_storeu_ps(
                    out.as_mut_ptr().add(16 + 8 * part),
                    _mm256_mul_ps(_mm256_cvtepi32_ps(hi), scale),
                );
            }
        }
    }
}
