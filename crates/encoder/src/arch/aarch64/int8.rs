//! The int8 products for NEON with the dot-product extension (`crate::int8`). `SDOT`
//! multiplies signed bytes by signed bytes, so each activation byte is turned back into its
//! `q` (its top bit flipped) as it is loaded, and the sums start from zero: the offsets
//! VNNI starts from (`Packed`) are not needed.

use std::arch::aarch64::*;

use crate::int8::{Activations, BLOCK, Packed};

/// `SDOT acc.4s, a.16b, b.16b`: each 32-bit lane of `acc` plus the four products of its
/// bytes of `a` and `b`. Written as assembly because the intrinsic (`vdotq_s32`) is not yet
/// stable Rust; it is expanded inside the functions that enable `dotprod`.
macro_rules! sdot {
    ($acc:expr, $a:expr, $b:expr) => {{
        let mut acc: int32x4_t = $acc;
        let (a, b): (int8x16_t, int8x16_t) = ($a, $b);
        std::arch::asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
        acc
    }};
}

/// Four rows of x against a group of four weight rows at a time. For each block, one
/// register of four 32-bit sums per weight row (`SDOT` adds four byte products into each
/// lane); two rounds of pairwise adds put the four rows' block sums in one register, which is
/// scaled and added to the row's four products.
///
/// SAFETY: the CPU has NEON and FEAT_DotProd; the sizes are as `Packed::product` asserts.
#[target_feature(enable = "neon,dotprod")]
pub unsafe fn product_sdot(w: &Packed, x: &Activations, bias: &[f32], out: &mut [f32]) {
    let (n, k, blocks, m) = (w.rows, w.cols, w.cols / BLOCK, x.rows());
    let flip = vdupq_n_u8(0x80);
    for group in 0..n / 4 {
        for i in (0..m).step_by(4) {
            let rows: [usize; 4] = std::array::from_fn(|d| (i + d).min(m - 1));
            let mut acc = [vdupq_n_f32(0.0); 4];
            for b in 0..blocks {
                let at = group * blocks + b;
                // SAFETY: block `at` has 128 bytes and four scales; each row of x has
                // k = 32 · blocks bytes and `blocks` scales.
                unsafe {
                    let bytes = w.bytes.as_ptr().add(at * 128);
                    // The block's first 16 values of rows 0–3, then its last 16.
                    let weights: [[int8x16_t; 4]; 2] = std::array::from_fn(|h| {
                        std::array::from_fn(|c| vld1q_s8(bytes.add(64 * h + 16 * c)))
                    });
                    let scales = vld1q_f32(w.scales.as_ptr().add(at * 4));
                    for (d, &r) in rows.iter().enumerate() {
                        let values = x.bytes.as_ptr().add(r * k + b * BLOCK);
                        let first = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(values), flip));
                        let last = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(values.add(16)), flip));
                        let mut dots = [vdupq_n_s32(0); 4];
                        for (c, dot) in dots.iter_mut().enumerate() {
                            *dot = sdot!(*dot, weights[0][c], first);
                            *dot = sdot!(*dot, weights[1][c], last);
                        }
                        let sums =
                            vpaddq_s32(vpaddq_s32(dots[0], dots[1]), vpaddq_s32(dots[2], dots[3]));
                        let scale = vmulq_n_f32(scales, *x.scales.get_unchecked(r * blocks + b));
                        acc[d] = vfmaq_f32(acc[d], vcvtq_f32_s32(sums), scale);
                    }
                }
            }
            for (d, acc) in acc.iter().enumerate().take(m - i) {
                let mut lanes = [0f32; 4];
                // SAFETY: 4 floats.
                unsafe { vst1q_f32(lanes.as_mut_ptr(), *acc) };
                let at = (i + d) * n + group * 4;
                for c in 0..4 {
                    out[at + c] = lanes[c] + bias[group * 4 + c];
                }
            }
        }
    }
}
