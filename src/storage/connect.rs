//! Choose the store implementation from `storage.url`.

use super::{PostgresStore, SqliteStore, Store, StoreResult};
use std::sync::Arc;

/// Connect to the database named by `url` (`sqlite:...` or `postgres://...`).
pub async fn connect(url: &str) -> StoreResult<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::connect(url).await?))
    } else {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    }
}
