//! Link settings for the `ferroclaw` binary only (no crate is rebuilt for them), and the
//! migrations folder watched (its files are embedded at compile time).
//!
//! `-z pack-relative-relocs` stores the position-independent executable's relative
//! relocations as DT_RELR (a bitmap, a few KB) instead of 24-byte RELA entries (1.2 MB here)
//! that the dynamic loader reads at every start: less start-up work and about 1.2 MB less
//! resident memory, with ASLR kept. Needs glibc 2.36 and binutils 2.38 or newer (Debian 12).
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The migrations are embedded by `sqlx::migrate!`: a changed file rebuilds the crate.
    println!("cargo:rerun-if-changed=migrations");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
