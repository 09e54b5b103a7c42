//! The findings that need an answer from outside the process: the database's schema
//! version against this binary's (read only, nothing migrated), and the sandbox image on
//! the Docker engine (asked only when the sandbox is on).

use super::{Finding, Findings, Severity};
use crate::config::LoadedConfig;

/// The live findings for `loaded` (most severe first).
pub async fn examine_live(loaded: &LoadedConfig) -> Vec<Finding> {
    let config = &loaded.config;
    let mut found = Findings::default();
    let mut add =
        |severity, key: &str, what: String, fix: &str| found.add(severity, key, what, fix);

    let schema = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        crate::storage::schema_state(&config.storage.url),
    )
    .await
    .unwrap_or(Err(sqlx::Error::PoolTimedOut));
    match schema {
        Ok(None) | Ok(Some(crate::storage::SchemaState { applied: None, .. })) => {}
        Ok(Some(crate::storage::SchemaState {
            applied: Some(applied),
            known,
        })) => {
            if applied > known {
                add(
                    Severity::High,
                    "storage.url",
                    format!(
                        "the database's schema is at migration {applied}, newer than this binary knows ({known})"
                    ),
                    "run the newer ferroclaw that wrote it (this one would not understand its data)",
                );
            } else if applied < known {
                add(
                    Severity::Medium,
                    "storage.url",
                    format!(
                        "the database's schema is at migration {applied}; this binary brings migrations up to {known}"
                    ),
                    "back the database up, then run `ferroclaw migrate` (serve migrates at start too)",
                );
            }
        }
        Err(e) => add(
            Severity::Medium,
            "storage.url",
            format!("the database cannot be read: {}", describe(&e)),
            "check that it is running and that storage.url names it",
        ),
    }

    let sandbox = &config.sandbox;
    if sandbox.enabled {
        match crate::sandbox::docker::image_present(&sandbox.docker_host, &sandbox.image).await {
            Ok(true) => {}
            Ok(false) => add(
                Severity::Medium,
                "sandbox.image",
                format!(
                    "`{}` is not on the Docker engine: the first `exec` would try to pull it",
                    sandbox.image
                ),
                "build a local image (scripts/sandbox-image.sh) or `docker load` one, and name it here",
            ),
            Err(e) => add(
                Severity::Medium,
                "sandbox.docker_host",
                format!("the sandbox is on but {e}"),
                "start Docker, or point sandbox.docker_host at the engine",
            ),
        }
    }
    found.sorted()
}

/// A database error in words that hold no connection string.
fn describe(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::Database(db) => db.message().to_string(),
        sqlx::Error::PoolTimedOut => "no connection within the time limit".into(),
        sqlx::Error::Tls(_) => "the TLS handshake failed".into(),
        sqlx::Error::Configuration(_) => "storage.url is not a database URL".into(),
        _ => "the database answered with an error".into(),
    }
}
