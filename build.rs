//! Link settings for the `ferroclaw` binary only (no crate is rebuilt for them), and the
//! migrations folder watched (its files are embedded at compile time).
//!
//! `-z pack-relative-relocs` stores the position-independent executable's relative
//! relocations as DT_RELR (a bitmap, a few KB) instead of 24-byte RELA entries (1.2 MB here)
//! that the dynamic loader reads at every start: less start-up work and about 1.2 MB less
//! resident memory, with ASLR kept. Needs glibc 2.36 and binutils 2.38 or newer (Debian 12).
//!
//! Optimised builds are stripped by the linker, and the functions start-up and the idle
//! service run are laid out together (`scripts/symbol-order.txt`): see the comments below.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The migrations are embedded by `sqlx::migrate!`: a changed file rebuilds the crate.
    println!("cargo:rerun-if-changed=migrations");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux-gnu") {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    // Optimised builds are stripped here (see Cargo.toml's profiles), unless kept for
    // `scripts/symbol-order`. Debug builds keep their symbols for backtraces.
    println!("cargo:rerun-if-env-changed=FERROCLAW_LINK_SYMBOLS");
    let optimised = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    if optimised && std::env::var_os("FERROCLAW_LINK_SYMBOLS").is_none() {
        println!("cargo:rustc-link-arg-bins=-Wl,--strip-all");
    }
    // The functions start-up and the idle service run, placed together (idle's first):
    // see `scripts/symbol-order`. Only with the linker Rust uses here by default (LLD on
    // x86_64 Linux since 1.90); a linker chosen by hand is left alone.
    println!("cargo:rerun-if-changed=scripts/symbol-order.txt");
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let own_linker = flags.contains("link")
        || std::env::var_os("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_some();
    if target == "x86_64-unknown-linux-gnu" && !own_linker {
        let order =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/symbol-order.txt");
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        // A name the build no longer has (code changed since the list was made) is skipped.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
