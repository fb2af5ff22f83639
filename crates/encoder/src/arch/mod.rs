//! What each architecture adds to the portable arithmetic, one folder each: its f32 tile and
//! q4 unpacking (`floats.rs`), its int8 products (`int8.rs`), and which of its kernels this
//! CPU runs (`mod.rs`). An architecture is added here and as its arms of `kernels::Isa`;
//! its kernels are proptested against the portable ones by the tests of `kernels` and `int8`,
//! which run every kernel the machine has.

#[cfg(target_arch = "aarch64")]
pub mod aarch64;
#[cfg(target_arch = "x86_64")]
pub mod x86_64;
