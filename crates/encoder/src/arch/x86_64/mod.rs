//! x86-64: AVX2 with FMA, and AVX-512; int8 products with AVX-VNNI and AVX-512 VNNI.

pub mod floats;
pub mod int8;

use crate::kernels::Isa;

/// The kernels beyond the portable one this CPU runs, slowest first.
pub fn kernels() -> Vec<Isa> {
    let mut kernels = Vec::new();
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        kernels.push(Isa::Avx2);
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
        {
            kernels.push(Isa::Avx512);
        }
    }
    kernels
}

/// Whether this CPU has `isa`'s int8 products (`crate::int8::runs_on`).
pub fn int8_products(isa: Isa) -> bool {
    match isa {
        Isa::Avx512 => is_x86_feature_detected!("avx512vnni"),
        Isa::Avx2 => is_x86_feature_detected!("avxvnni"),
        Isa::Portable => true,
    }
}
