//! A cache-line prefetch hint, for code that knows which memory it reads
//! next.
//!
//! On x86_64 this is `prefetcht0` through [`safe_arch`], which wraps the
//! intrinsic behind a reference (a prefetch never faults and has no
//! architectural effect), so this crate keeps `#![forbid(unsafe_code)]`.
//! Unlike a plain load, a prefetch does not hold up retirement while its
//! line is on the way, so many can be in flight behind ordinary work.
//! Elsewhere (other architectures, or x86_64 built without SSE) it compiles
//! to nothing.

/// Asks the core to bring the cache line holding `value` into every cache
/// level. Never changes a result; only timing.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    safe_arch::prefetch_t0(value);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = value;
}
