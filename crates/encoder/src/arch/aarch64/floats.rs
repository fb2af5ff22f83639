//! The f32 tile and the q4 unpacking for NEON (`crate::kernels`).

use std::arch::aarch64::*;

use crate::kernels::{Q4_BLOCK, Q4_BLOCK_BYTES, half, rows_at};

/// A 4×4 tile in 16 registers of four sums, beside four rows of x and a weight row: 21 of
/// NEON's 32 registers.
///
/// SAFETY: the CPU has NEON; rows of x and w lie within them (`Kernel::products` asserts
/// it).
#[target_feature(enable = "neon")]
pub unsafe fn products_neon(
    x: &[f32],
    stride: usize,
    m: usize,
    w: [&[f32]; 4],
    mut emit: impl FnMut(usize, &[[f32; 4]; 4]),
) {
    let k = w[0].len();
    let body = k - k % 4;
    for i in (0..m).step_by(4) {
        let x = rows_at(x, stride, m, i, k);
        let mut acc = [[vdupq_n_f32(0.0); 4]; 4];
        let mut o = 0;
        while o < body {
            // SAFETY: o + 4 <= body <= k, the length of every row.
            unsafe {
                let xs = x.map(|r| vld1q_f32(r.as_ptr().add(o)));
                for c in 0..4 {
                    let wv = vld1q_f32(w[c].as_ptr().add(o));
                    for r in 0..4 {
                        acc[r][c] = vfmaq_f32(acc[r][c], xs[r], wv);
                    }
                }
            }
            o += 4;
        }
        let mut out = [[0f32; 4]; 4];
        for r in 0..4 {
            for c in 0..4 {
                out[r][c] = vaddvq_f32(acc[r][c]);
                if body < k {
                    out[r][c] += (body..k).map(|o| x[r][o] * w[c][o]).sum::<f32>();
                }
            }
        }
        emit(i, &out);
    }
}

/// Sixteen bytes to 32 weights: nibbles less 8, widened to f32 and scaled, each exactly as
/// the portable unpacking computes it.
///
/// SAFETY: the CPU has NEON; `out` holds 32 floats per block.
#[target_feature(enable = "neon")]
pub unsafe fn unpack_q4_neon(blocks: &[u8], out: &mut [f32]) {
    let (low, eight) = (vdupq_n_u8(0x0f), vdupq_n_s8(8));
    for (block, out) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(Q4_BLOCK))
    {
        let scale = vdupq_n_f32(half(u16::from_le_bytes([block[0], block[1]])));
        // SAFETY: a block is 18 bytes, 16 of them from byte 2; out is 32 floats, written
        // in eight stores of four.
        unsafe {
            let bytes = vld1q_u8(block.as_ptr().add(2));
            let lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(bytes, low)), eight);
            let hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8::<4>(bytes)), eight);
            for (half, values) in [lo, hi].into_iter().enumerate() {
                let words = [
                    vmovl_s8(vget_low_s8(values)),
                    vmovl_s8(vget_high_s8(values)),
                ];
                for (w, word) in words.into_iter().enumerate() {
                    let ints = [
                        vmovl_s16(vget_low_s16(word)),
                        vmovl_s16(vget_high_s16(word)),
                    ];
                    for (q, ints) in ints.into_iter().enumerate() {
                        let at = 16 * half + 8 * w + 4 * q;
                        let values = vmulq_f32(vcvtq_f32_s32(ints), scale);
                        vst1q_f32(out.as_mut_ptr().add(at), values);
                    }
                }
            }
        }
    }
}
