//! `ferroclaw pairing list|approve CODE|revoke USER`: the operator's side of pairing.

use crate::config::LoadedConfig;
use anyhow::bail;

pub enum Action {
    List,
    Approve(String),
    Revoke(String),
}

pub async fn run(loaded: &LoadedConfig, action: Action) -> anyhow::Result<()> {
    let store = crate::storage::connect(&loaded.config.storage.url).await?;
    store.migrate().await?;
    let now = crate::clock::now_ms();
    match action {
        Action::List => {
            let rows = store.pairing_list(now).await?;
            if rows.is_empty() {
                println!("no pending codes and no approved users");
            }
            for row in rows {
                match row.state.as_str() {
                    "pending" => println!(
                        "pending  {}  {} user {} ({}), expires in {} min",
                        row.code.unwrap_or_default(),
                        row.channel,
                        row.user_id,
                        row.user_name,
                        (row.expires_at - now).max(0) / 60_000
                    ),
                    _ => println!(
                        "approved {} user {} ({})",
                        row.channel, row.user_id, row.user_name
                    ),
                }
            }
        }
        Action::Approve(code) => match store
            .pairing_approve(&code.trim().to_ascii_uppercase(), now)
            .await?
        {
            Some(row) => println!(
                "approved {} user {} ({})",
                row.channel, row.user_id, row.user_name
            ),
            None => bail!("no pending pairing code {code} (codes expire after an hour)"),
        },
        Action::Revoke(user) => match store.pairing_revoke(&user).await? {
            0 => bail!("user {user} is neither approved nor pending"),
            n => println!("revoked user {user} ({n} channel(s))"),
        },
    }
    Ok(())
}
