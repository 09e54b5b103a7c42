//! The real SmolLM2 model for the local-model tests: fetched once by `ferroclaw model fetch`
//! into a cache kept between runs (`FERROCLAW_TEST_HOME`, default
//! `/var/cache/ferroclaw-home`), the same way a user fetches it.

use std::path::PathBuf;
use std::sync::Mutex;

pub const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The `FERROCLAW_HOME` holding the model, fetched first when missing (fails loudly when it
/// cannot be).
pub fn home_with_model() -> PathBuf {
    static FETCHING: Mutex<()> = Mutex::new(());
    let home = std::env::var_os("FERROCLAW_TEST_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/ferroclaw-home"));
    let file = home.join("models").join(FILE);
    let _one = FETCHING.lock().unwrap_or_else(|e| e.into_inner());
    if !file.is_file() {
        let out = std::process::Command::new(super::service::BIN)
            .args(["model", "fetch", "smollm2-135m"])
            .env("FERROCLAW_HOME", &home)
            .env_remove("FERROCLAW_OFFLINE")
            .output()
            .expect("run ferroclaw model fetch");
        assert!(
            out.status.success() && file.is_file(),
            "could not fetch the local model into {}: {}",
            home.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    home
}
