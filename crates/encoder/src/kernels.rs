//! The encoder's arithmetic, once portable and once per instruction set of an architecture
//! (`crate::arch`: AVX2 with FMA and AVX-512 on x86-64, NEON on AArch64): a 4×4 tile of dot products (every matrix product of the model is rows of
//! activations against rows of weights), unpacking q4 weights to f32, and the element-wise
//! steps (GELU, softmax, LayerNorm). One is picked per process ([`Kernel::best`]); each SIMD
//! version is tested against the portable one on the machine that has it (tests below).
//!
//! The element-wise steps are written once, in plain Rust, and compiled once per x86-64
//! instruction set inside functions that enable it ([`with_kernel!`]), so the compiler
//! vectorises them for it (NEON is every AArch64 target's baseline, so the plain build is
//! NEON's); the tile and the unpacking, where that is not enough, are written with
//! intrinsics, in `crate::arch`.

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::arch;

/// The instruction set the encoder's arithmetic runs on. Only this CPU's can be had
/// ([`Kernel::available`], [`Kernel::named`]): running another would be undefined behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernel(Isa);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isa {
    /// Plain Rust, for every CPU.
    Portable,
    /// x86-64 with AVX2 and FMA (Haswell, Zen and later).
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// x86-64 with AVX-512 F, BW, DQ and VL (Skylake-SP, Ice Lake, Zen 4 and later).
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// AArch64 with Advanced SIMD (every 64-bit ARM CPU).
    #[cfg(target_arch = "aarch64")]
    Neon,
}

/// Every kernel's name, whichever CPU this is.
const NAMES: [&str; 4] = ["portable", "avx2", "avx512", "neon"];

impl Kernel {
    /// Plain Rust, which every CPU runs.
    pub const fn portable() -> Kernel {
        Kernel(Isa::Portable)
    }

    /// The fastest this CPU runs.
    pub fn best() -> Kernel {
        *Kernel::available()
            .last()
            .expect("the portable kernel is always available")
    }

    /// Every kernel this CPU runs, slowest first.
    pub fn available() -> Vec<Kernel> {
        let mut kernels = vec![Kernel(Isa::Portable)];
        #[cfg(target_arch = "x86_64")]
        kernels.extend(arch::x86_64::kernels().into_iter().map(Kernel));
        #[cfg(target_arch = "aarch64")]
        kernels.extend(arch::aarch64::kernels().into_iter().map(Kernel));
        kernels
    }

    /// The kernel called `name` (`portable`, `avx2`, `avx512`, `neon`), if this CPU runs it.
    pub fn named(name: &str) -> Result<Kernel, String> {
        if let Some(kernel) = Kernel::available().into_iter().find(|k| k.name() == name) {
            return Ok(kernel);
        }
        if NAMES.contains(&name) {
            return Err(format!("this CPU cannot run the {name} kernel"));
        }
        Err(format!(
            "unknown kernel \"{name}\": portable, avx2, avx512 or neon"
        ))
    }

    pub(crate) fn isa(self) -> Isa {
        self.0
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            Isa::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "avx512",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "neon",
        }
    }

    /// The dot products of `m` rows of `x` (row r at `r · stride`, each as long as the weight
    /// rows) with four weight rows, four rows at a time: `emit(r, tile)` gets rows r to r + 3
    /// (rows past `m` repeat the last and are to be ignored).
    #[inline]
    pub fn products(
        self,
        x: &[f32],
        stride: usize,
        m: usize,
        w: [&[f32]; 4],
        emit: impl FnMut(usize, &[[f32; 4]; 4]),
    ) {
        let k = w[0].len();
        assert!(w.iter().all(|r| r.len() == k), "weight rows of one length");
        assert!(m == 0 || (m - 1) * stride + k <= x.len(), "x holds m rows");
        match self.0 {
            Isa::Portable => products_portable(x, stride, m, w, emit),
            // SAFETY: a kernel other than the portable one is only made where the CPU has
            // its features (`Kernel::available`; the type cannot be made otherwise); the rows lie within x and w (asserted above).
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { arch::x86_64::floats::products_avx2(x, stride, m, w, emit) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { arch::x86_64::floats::products_avx512(x, stride, m, w, emit) },
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { arch::aarch64::floats::products_neon(x, stride, m, w, emit) },
        }
    }

    /// Unpacks q4 blocks (module docs of `crate::weights`) into `out`, 32 weights a block.
    #[inline]
    pub fn unpack_q4(self, blocks: &[u8], out: &mut [f32]) {
        assert_eq!(blocks.len() / Q4_BLOCK_BYTES * Q4_BLOCK, out.len());
        assert_eq!(blocks.len() % Q4_BLOCK_BYTES, 0);
        match self.0 {
            Isa::Portable => unpack_q4_portable(blocks, out),
            // SAFETY: as in `tile`; the lengths are asserted above.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe { arch::x86_64::floats::unpack_q4_avx2(blocks, out) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe { arch::x86_64::floats::unpack_q4_avx512(blocks, out) },
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => unsafe { arch::aarch64::floats::unpack_q4_neon(blocks, out) },
        }
    }
}

/// Weights in a q4 block, and the bytes it takes: an IEEE half scale, then 16 bytes whose
/// low nibbles are weights 0–15 and high nibbles 16–31, each `(nibble − 8) × scale`.
pub const Q4_BLOCK: usize = 32;
pub const Q4_BLOCK_BYTES: usize = 18;

/// Four rows of x from row `i` (the last repeated past `m`), each `k` long.
#[inline(always)]
pub(crate) fn rows_at(x: &[f32], stride: usize, m: usize, i: usize, k: usize) -> [&[f32]; 4] {
    std::array::from_fn(|d| {
        let r = (i + d).min(m - 1) * stride;
        &x[r..r + k]
    })
}

fn products_portable(
    x: &[f32],
    stride: usize,
    m: usize,
    w: [&[f32]; 4],
    mut emit: impl FnMut(usize, &[[f32; 4]; 4]),
) {
    let k = w[0].len();
    for i in (0..m).step_by(4) {
        let x = rows_at(x, stride, m, i, k);
        emit(i, &x.map(|x| w.map(|w| dot(x, w))));
    }
}

/// One dot product in eight running sums, a shape every target's vectoriser takes.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 8;
    let mut acc = [0f32; LANES];
    let (a_body, b_body) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = a_body
        .remainder()
        .iter()
        .zip(b_body.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_body.zip(b_body) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

fn unpack_q4_portable(blocks: &[u8], out: &mut [f32]) {
    for (block, out) in blocks
        .chunks_exact(Q4_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(Q4_BLOCK))
    {
        let (scale, weights) = q4_block(block);
        for (o, w) in out.iter_mut().zip(weights) {
            *o = f32::from(w) * scale;
        }
    }
}

/// One q4 block (`Q4_BLOCK_BYTES`) as its scale and its 32 weights in units of it, `−8..=7`.
#[inline(always)]
pub fn q4_block(block: &[u8]) -> (f32, [i8; Q4_BLOCK]) {
    let scale = half(u16::from_le_bytes([block[0], block[1]]));
    let mut weights = [0i8; Q4_BLOCK];
    for (j, byte) in block[2..Q4_BLOCK_BYTES].iter().enumerate() {
        weights[j] = (byte & 0x0f) as i8 - 8;
        weights[j + 16] = (byte >> 4) as i8 - 8;
    }
    (scale, weights)
}

/// An IEEE 754 half, exactly, by moving its bits (a block's scale is read per 32 weights, so
/// this must cost a few instructions, not a call).
#[inline(always)]
pub fn half(bits: u16) -> f32 {
    let bits = u32::from(bits);
    let sign = (bits & 0x8000) << 16;
    let exponent = (bits >> 10) & 0x1f;
    let mantissa = bits & 0x3ff;
    match exponent {
        // Subnormal: mantissa × 2⁻²⁴, exact in f32.
        0 => f32::from_bits(sign) + f32::from_bits(sign | 0x3380_0000) * mantissa as f32,
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
        _ => f32::from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13)),
    }
}

/// Defines `pub fn NAME(kernel: Kernel, ARGS) BODY`: the body compiled once per instruction
/// set, so that plain loops are vectorised for the kernel the process runs.
macro_rules! with_kernel {
    ($(#[$doc:meta])* pub fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$doc])*
        pub fn $name(kernel: Kernel, $($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
            fn avx512($($arg: $ty),*) { body($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            fn avx2($($arg: $ty),*) { body($($arg),*) }
            match kernel.0 {
                // SAFETY: such a kernel is only made where the CPU has its features.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { avx2($($arg),*) },
                _ => body($($arg),*),
            }
        }
    };
}

with_kernel! {
    /// GELU with the exact (erf) form BERT uses, in place: `x · Φ(x)`.
    pub fn gelu(values: &mut [f32]) {
        for v in values.iter_mut() {
            let x = *v;
            // Φ(x) = erfc(−x/√2) / 2, erfc by Numerical Recipes' erfcc (fractional error
            // below 1.2e-7 everywhere), without branches so it vectorises.
            let u = -x * std::f32::consts::FRAC_1_SQRT_2;
            let z = u.abs();
            let t = 1.0 / (1.0 + 0.5 * z);
            let poly = -z * z - 1.265_512_2
                + t * (1.000_023_7
                    + t * (0.374_091_96
                        + t * (0.096_784_18
                            + t * (-0.186_288_06
                                + t * (0.278_868_07
                                    + t * (-1.135_204
                                        + t * (1.488_515_9
                                            + t * (-0.822_152_23 + t * 0.170_872_77))))))));
            let tail = t * exp(poly);
            let erfc = if u >= 0.0 { tail } else { 2.0 - tail };
            *v = 0.5 * x * erfc;
        }
    }
}

with_kernel! {
    /// Softmax of one row, in place.
    pub fn softmax(row: &mut [f32]) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for v in row.iter_mut() {
            *v = exp(*v - max);
            sum += *v;
        }
        let scale = 1.0 / sum;
        for v in row.iter_mut() {
            *v *= scale;
        }
    }
}

with_kernel! {
    /// `row = LayerNorm(row + residual) · weight + bias`, the step after each sublayer.
    pub fn add_and_norm(row: &mut [f32], residual: &[f32], weight: &[f32], bias: &[f32], eps: f32) {
        for (v, r) in row.iter_mut().zip(residual) {
            *v += r;
        }
        let n = row.len() as f32;
        let mean = row.iter().sum::<f32>() / n;
        let variance = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n;
        let scale = 1.0 / (variance + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(weight).zip(bias) {
            *v = (*v - mean) * scale * w + b;
        }
    }
}

with_kernel! {
    /// `row = row / √(mean(row²) + eps) · scale`, Gemma's RMSNorm (`scale` is its `1 + w`).
    pub fn rms_norm(row: &mut [f32], scale: &[f32], eps: f32) {
        let mean = row.iter().map(|v| v * v).sum::<f32>() / row.len() as f32;
        let inverse = 1.0 / (mean + eps).sqrt();
        for (v, s) in row.iter_mut().zip(scale) {
            *v *= inverse * s;
        }
    }
}

with_kernel! {
    /// `gate = GELU(gate) · up`, GELU in its tanh form (Gemma's `gelu_pytorch_tanh`):
    /// `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`, which is `x · σ(2u)` for that `u`.
    pub fn gelu_tanh_times(gate: &mut [f32], up: &[f32]) {
        const ROOT_TWO_OVER_PI: f32 = 0.797_884_6;
        for (g, u) in gate.iter_mut().zip(up) {
            let x = *g;
            let inner = ROOT_TWO_OVER_PI * (x + 0.044_715 * x * x * x);
            *g = x / (1.0 + exp(-2.0 * inner)) * u;
        }
    }
}

with_kernel! {
    /// `out += weight · row`.
    pub fn add_scaled(out: &mut [f32], row: &[f32], weight: f32) {
        for (o, r) in out.iter_mut().zip(row) {
            *o += weight * r;
        }
    }
}

/// e^x in f32 to about an ulp (Cephes' expf), without branches or calls, so loops over it
/// vectorise; 0 far below, +∞-free above (clamped).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5 · 2²³: adding and taking it away rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let r2 = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let e = p * r2 + r + 1.0;
    e * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Every kernel this CPU runs gives the dot products exactly enough, for every
        /// length (the vector body and the tail), row count (whole tiles and a partial one)
        /// and row stride.
        #[test]
        fn every_kernels_products_are_the_dot_products(
            k in 1usize..100,
            m in 1usize..10,
            gap in 0usize..3,
            seed in prop::collection::vec(-2.0f32..2.0, 4 * 100 + 10 * 102),
        ) {
            let (w, x) = seed.split_at(4 * 100);
            let stride = k + gap;
            let w: [&[f32]; 4] = std::array::from_fn(|c| &w[c * k..(c + 1) * k]);
            for kernel in Kernel::available() {
                let mut seen = vec![false; m];
                kernel.products(x, stride, m, w, |i, tile| {
                    for (r, row) in tile.iter().enumerate().take(m - i) {
                        seen[i + r] = true;
                        let x = &x[(i + r) * stride..(i + r) * stride + k];
                        for (c, got) in row.iter().enumerate() {
                            let exact: f64 = x.iter().zip(w[c]).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
                            assert!((f64::from(*got) - exact).abs() <= 1e-4 * (1.0 + exact.abs()),
                                "{} row {} column {c}: {got} for {exact}", kernel.name(), i + r);
                        }
                    }
                });
                prop_assert!(seen.iter().all(|s| *s), "{}: every row emitted", kernel.name());
            }
        }

        /// Every kernel unpacks q4 blocks bit for bit as the portable one, whatever the
        /// bytes (subnormal, infinite and NaN scales included).
        #[test]
        fn every_unpacker_agrees_with_the_portable_one(
            blocks in (0..6usize).prop_flat_map(|n| prop::collection::vec(any::<u8>(), n * Q4_BLOCK_BYTES)),
        ) {
            let n = blocks.len() / Q4_BLOCK_BYTES * Q4_BLOCK;
            let mut want = vec![0f32; n];
            unpack_q4_portable(&blocks, &mut want);
            for kernel in Kernel::available() {
                let mut got = vec![1f32; n];
                kernel.unpack_q4(&blocks, &mut got);
                for (g, w) in got.iter().zip(&want) {
                    prop_assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                        "{}: {g} != {w}", kernel.name());
                }
            }
        }

        /// The element-wise steps give the same values under every kernel.
        #[test]
        fn every_elementwise_step_agrees_with_the_portable_one(
            values in prop::collection::vec(-20.0f32..20.0, 1..100),
        ) {
            for kernel in Kernel::available() {
                let (mut a, mut b) = (values.clone(), values.clone());
                gelu(Kernel::portable(), &mut a);
                gelu(kernel, &mut b);
                for (x, y) in a.iter().zip(&b) {
                    prop_assert!((x - y).abs() <= 1e-6 * (1.0 + x.abs()), "{} gelu", kernel.name());
                }
                let (mut a, mut b) = (values.clone(), values.clone());
                softmax(Kernel::portable(), &mut a);
                softmax(kernel, &mut b);
                for (x, y) in a.iter().zip(&b) {
                    prop_assert!((x - y).abs() <= 1e-6, "{} softmax", kernel.name());
                }
            }
        }
    }

    /// Halves decode exactly: normal, subnormal, signed, infinite.
    #[test]
    fn halves_decode_exactly() {
        assert_eq!(half(0x3c00), 1.0);
        assert_eq!(half(0xc000), -2.0);
        assert_eq!(half(0x0001), 2f32.powi(-24));
        assert_eq!(half(0x7bff), 65504.0);
        assert_eq!(half(0x3555), 0.333_251_95);
        assert_eq!(half(0x7c00), f32::INFINITY);
        assert!(half(0x7e00).is_nan());
        assert_eq!(half(0x8000), 0.0);
    }

    /// The GELU is the erf form to f32 precision, against f64 with libm's erf computed by
    /// the same identity at higher precision, and e^x is within two ulps.
    #[test]
    fn gelu_and_exp_are_exact_to_f32_precision() {
        for i in -4000..=4000 {
            let x = i as f32 / 200.0;
            let mut v = [x];
            gelu(Kernel::portable(), &mut v);
            let want = 0.5 * f64::from(x) * erfc_f64(-f64::from(x) / std::f64::consts::SQRT_2);
            assert!(
                (f64::from(v[0]) - want).abs() <= 4e-7 * (1.0 + want.abs()),
                "gelu({x}) = {} for {want}",
                v[0]
            );
            let e = exp(x / 2.0);
            let want = (f64::from(x) / 2.0).exp();
            assert!(
                ((f64::from(e) - want) / want).abs() < 3e-7,
                "exp({x}/2) = {e} for {want}"
            );
        }
    }

    /// erfc to double precision by its continued fraction and series: the test's own
    /// reference, independent of the kernel's approximation.
    fn erfc_f64(x: f64) -> f64 {
        if x < 0.0 {
            return 2.0 - erfc_f64(-x);
        }
        if x < 2.0 {
            // erf by its Maclaurin series.
            let (mut term, mut sum, mut n) = (x, x, 0.0);
            while term.abs() > 1e-17 * sum.abs() {
                n += 1.0;
                term *= -x * x / n;
                sum += term / (2.0 * n + 1.0);
            }
            return 1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum;
        }
        // Lentz's continued fraction for erfc.
        let mut f = 0.0;
        for n in (1..200).rev() {
            f = (n as f64 / 2.0) / (x + f);
        }
        (-x * x).exp() / std::f64::consts::PI.sqrt() / (x + f)
    }
}
