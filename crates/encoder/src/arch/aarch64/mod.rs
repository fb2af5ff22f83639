//! AArch64: Advanced SIMD (NEON), which every 64-bit ARM CPU has (Apple silicon, Graviton,
//! Ampere, Cortex-A); int8 products with its dot-product extension (`SDOT`, ARMv8.2's
//! FEAT_DotProd: Apple M1 and later, Graviton 2 and later, Neoverse).

pub mod floats;
pub mod int8;

use crate::kernels::Isa;

/// The kernels beyond the portable one this CPU runs.
pub fn kernels() -> Vec<Isa> {
    match std::arch::is_aarch64_feature_detected!("neon") {
        true => vec![Isa::Neon],
        false => Vec::new(),
    }
}

/// Whether this CPU has `isa`'s int8 products (`crate::int8::runs_on`).
pub fn int8_products(isa: Isa) -> bool {
    match isa {
        Isa::Neon => std::arch::is_aarch64_feature_detected!("dotprod"),
        Isa::Portable => true,
    }
}
