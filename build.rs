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
        if optimised {
            stale_list_warning();
        }
    }
}

/// Every function's name carries a hash of its crate's dependencies, features, profile and
/// compiler: a changed `Cargo.toml` or `Cargo.lock`, or another rustc, renames them all, and
/// the list then matches nothing (measured: idle 4.6 -> 5.3 MB after one dependency was
/// added). The list's inputs are fingerprinted here; `scripts/symbol-order` keeps the
/// fingerprint it was made with beside it, and a release build made from other inputs says
/// so (a debug build's names are its own profile's, never the list's: no check).
fn stale_list_warning() {
    use std::hash::{Hash, Hasher};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut inputs = vec![root.join("Cargo.lock"), root.join("Cargo.toml")];
    let mut channels: Vec<_> = std::fs::read_dir(root.join("channels"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("Cargo.toml"))
        .collect();
    channels.sort();
    inputs.extend(channels);
    let mut hasher = std::hash::DefaultHasher::new();
    for input in &inputs {
        println!("cargo:rerun-if-changed={}", input.display());
        std::fs::read(input).unwrap_or_default().hash(&mut hasher);
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = std::process::Command::new(rustc).arg("-V").output();
    version
        .map(|o| o.stdout)
        .unwrap_or_default()
        .hash(&mut hasher);
    let fingerprint = format!("{:016x}", hasher.finish());
    // Where `scripts/symbol-order` finds the fingerprint of the build it profiled.
    if let Ok(out) = std::env::var("OUT_DIR") {
        let _ = std::fs::write(
            std::path::Path::new(&out).join("symbol-order.for"),
            &fingerprint,
        );
    }
    println!("cargo:rerun-if-changed=scripts/symbol-order.for");
    let made_for =
        std::fs::read_to_string(root.join("scripts/symbol-order.for")).unwrap_or_default();
    if made_for.trim() != fingerprint {
        println!(
            "cargo:warning=scripts/symbol-order.txt was made for other dependencies or another \
             compiler: start-up's and idle's code is not laid out together (idle memory about \
             0.7 MB higher); remake it with scripts/symbol-order"
        );
    }
}
