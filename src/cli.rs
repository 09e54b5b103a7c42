//! Command-line interface (clap): `serve`, `chat`, `config check`, `migrate`, `pairing`.

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "ferroclaw",
    version,
    about = "Self-hosted chat-channel bot service"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log lines as text for people or JSON for collectors
    #[arg(
        long,
        global = true,
        value_enum,
        env = "FERROCLAW_LOG_FORMAT",
        default_value = "human"
    )]
    pub log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

/// `-c FILE`, shared by every subcommand.
#[derive(Debug, Clone, clap::Args)]
pub struct ConfigArg {
    /// Configuration file (default ./config.toml; built-in defaults when it does not exist)
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl ConfigArg {
    /// The path to load and whether the user named it explicitly.
    pub fn path(&self) -> (PathBuf, bool) {
        match &self.config {
            Some(path) => (path.clone(), true),
            None => (PathBuf::from("config.toml"), false),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: HTTP server, enabled channels, workers
    Serve(ConfigArg),
    /// Chat with the agent in the terminal (reads stdin line by line; works piped)
    Chat {
        #[command(flatten)]
        config: ConfigArg,
        /// Session name (the session key is agent:main:cli:NAME)
        #[arg(long, default_value = "default")]
        session: String,
    },
    /// Configuration tools
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Apply database migrations and exit
    Migrate {
        #[command(flatten)]
        config: ConfigArg,
        /// List the migrations that would be applied, and apply none
        #[arg(long)]
        dry_run: bool,
    },
    /// Check a deployment: print findings (HIGH, MEDIUM, LOW) with their fixes; exit 1 when
    /// any is HIGH
    Doctor(ConfigArg),
    /// Manage who may talk to the bot in `pairing` access mode
    Pairing {
        #[command(subcommand)]
        command: PairingCommand,
    },
    /// Write a consistent snapshot of the store, the workspaces and the configuration (its
    /// secrets redacted) to one file, while the service runs
    Backup {
        /// Where to write it (default: ferroclaw-backup-<unix time>.zip here)
        file: Option<std::path::PathBuf>,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Print the channel table of a running service (its state, the age of the last
    /// receive): `GET /v1/admin/channels` with the admin token from the environment
    Status {
        /// The service's base URL (default: http://<server.listen>)
        #[arg(long)]
        url: Option<String>,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Bring agents, skills, allowlists and memories over from another assistant
    Import {
        #[command(subcommand)]
        from: ImportSource,
    },
    /// Move the store between SQLite and PostgreSQL
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Restore a backup into an empty store and workspace
    Restore {
        file: std::path::PathBuf,
        /// Replace a store and workspaces that are not empty
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// MCP servers: their states and tools, and a quick call
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Local model files (the cache in $FERROCLAW_HOME/models)
    Model {
        #[command(subcommand)]
        command: ModelCommand,
    },
    /// Internal: read a PDF's text from stdin within limits (run by the service itself)
    #[command(hide = true)]
    PdfText {
        #[arg(long)]
        memory_bytes: u64,
        #[arg(long)]
        cpu_secs: u64,
        #[arg(long)]
        max_text_bytes: usize,
    },
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Start every configured server, then print its state and tools
    List(ConfigArg),
    /// Call one tool of one server with JSON arguments and print the result
    Call {
        /// The server's id (`[mcp.servers.ID]`)
        id: String,
        /// The tool's name as the server lists it
        tool: String,
        /// The arguments, a JSON object
        #[arg(default_value = "{}")]
        arguments: String,
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Download a known model into the cache (again, even when it is there)
    Fetch {
        /// The model's name (see `model list`)
        #[arg(default_value = "smollm2-135m")]
        name: String,
    },
    /// List the known models and which are cached
    List,
}

#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// List pending pairing codes and approved users
    List(ConfigArg),
    /// Approve a pending pairing code
    Approve {
        code: String,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Remove a user's approval (or pending code) on every channel
    Revoke {
        user: String,
        #[command(flatten)]
        config: ConfigArg,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration and print it with secrets redacted (exit 2 when invalid)
    Check(ConfigArg),
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy every aggregate from one store to another (SQLite to PostgreSQL or back);
    /// refuses while a service uses the source; run again after an interruption
    Copy {
        /// The source store URL (sqlite://… or postgres://…)
        #[arg(long)]
        from: String,
        /// The destination store URL (migrated to this binary's schema first)
        #[arg(long)]
        to: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImportSource {
    /// An OpenClaw state directory (~/.openclaw): openclaw.json, workspace/, skills/
    Openclaw {
        dir: PathBuf,
        /// Print what would be imported, and change nothing
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        config: ConfigArg,
    },
}
