//! `ferroclaw config check`: exit 2 with one line per problem naming the key; secrets never
//! printed; the documented example is itself valid.

use crate::common::service::{Finished, run};

fn check(config: &str, env: &[(&str, &str)]) -> Finished {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("c.toml"), config).unwrap();
    run(dir.path(), &["config", "check", "-c", "c.toml"], "", env)
}

/// What `config check` printed for a configuration it refused (exit 2).
fn refused(config: &str, env: &[(&str, &str)]) -> String {
    let out = check(config, env);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    out.stderr
}

#[test]
fn an_unknown_key_is_rejected_naming_the_key() {
    let out = refused("[server]\nlisten = \"127.0.0.1:1\"\nlistne = 3\n", &[]);
    assert!(out.contains("server.listne: unknown key"), "{out}");
    let top = refused("[bogus]\nx = 1\n", &[]);
    assert!(top.contains("bogus: unknown key"), "{top}");
}

#[test]
fn an_unknown_key_in_the_environment_is_rejected_naming_the_key() {
    let out = refused("", &[("FERROCLAW__SERVER__NOPE", "1")]);
    assert!(out.contains("server.nope"), "{out}");
}

#[test]
fn a_value_of_the_wrong_kind_names_its_key_and_the_layer_it_came_from() {
    let wrong = "agent.max_iterations: invalid type";
    let file = refused("[agent]\nmax_iterations = \"many\"\n", &[]);
    assert!(
        file.contains(wrong) && file.contains("(from TOML file)"),
        "{file}"
    );
    let env = refused("", &[("FERROCLAW__AGENT__MAX_ITERATIONS", "many")]);
    assert!(
        env.contains(wrong) && env.contains("environment variable"),
        "{env}"
    );
    // A key left out of an entry of a list: the entry's index in the key.
    let missing = refused("[[bindings]]\nchannel = \"cli\"\n", &[]);
    assert!(
        missing.contains("bindings.0.agent: missing required key"),
        "{missing}"
    );
}

#[test]
fn the_environment_overrides_the_file() {
    let out = check(
        "[storage]\nurl = \"sqlite://a.db\"\n",
        &[
            ("FERROCLAW__STORAGE__URL", "sqlite://from-env.db"),
            ("FERROCLAW__AGENT__MAX_ITERATIONS", "7"),
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("url = \"sqlite://from-env.db\""),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("max_iterations = 7"), "{}", out.stdout);
}

#[test]
fn a_missing_secret_for_an_enabled_channel_names_its_key() {
    let out = refused(
        "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TEST_UNSET_TOKEN\"\n[channels.webhook.main]\nsecret_env = \"FC_TEST_UNSET_SECRET\"\n",
        &[],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "one line per problem: {}", out);
    assert!(lines.iter().any(|l| l.contains("channels.telegram.token_env") && l.contains("FC_TEST_UNSET_TOKEN")));
    assert!(
        lines
            .iter()
            .any(|l| l.contains("channels.webhook.main.secret_env"))
    );
}

#[test]
fn an_unknown_provider_in_the_model_chain_names_the_key() {
    let out = refused(
        "[agent]\nmodel = \"nope/x\"\nfallbacks = [\"openai/ok\", \"ghost/y\", \"noslash\"]\n",
        &[],
    );
    assert!(
        out.contains("agent.model: unknown provider `nope`"),
        "{}",
        out
    );
    assert!(
        out.contains("agent.fallbacks[1]: unknown provider `ghost`"),
        "{}",
        out
    );
    assert!(out.contains("agent.fallbacks[2]"), "{}", out);
    assert!(!out.contains("agent.fallbacks[0]"), "{}", out);
}

#[test]
fn a_named_config_file_that_does_not_exist_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["config", "check", "-c", "missing.toml"],
        "",
        &[],
    );
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("missing.toml"), "{}", out.stderr);
}

#[test]
fn without_a_config_file_the_built_in_defaults_apply() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["config", "check"], "", &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("url = \"sqlite://ferroclaw.db\""));
    assert!(out.stdout.contains("listen = \"127.0.0.1:8787\""));
}

#[test]
fn secrets_set_in_the_environment_never_appear_in_the_output() {
    let secrets = [
        ("OPENAI_API_KEY", "sk-live-openai-0123456789"),
        ("FC_TEST_TG", "123456:telegram-secret-token"),
        ("FC_TEST_HOOK", "hook-secret-abcdef"),
        ("FERROCLAW_ADMIN_TOKEN", "admin-secret-xyz"),
        (
            "FERROCLAW__STORAGE__URL",
            "postgres://app:db-password-9876@127.0.0.1:5432/app",
        ),
    ];
    let out = check(
        "[channels.telegram]\nenabled = true\ntoken_env = \"FC_TEST_TG\"\n[channels.webhook.main]\nsecret_env = \"FC_TEST_HOOK\"\n",
        &secrets,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        !out.stdout.contains("db-password-9876"),
        "the database password is redacted"
    );
    assert!(
        out.stdout
            .contains("postgres://app:REDACTED@127.0.0.1:5432/app"),
        "{}",
        out.stdout
    );
    for (_, value) in secrets {
        assert!(
            !out.stdout.contains(value) && !out.stderr.contains(value),
            "secret leaked: {value}"
        );
    }
    assert!(
        out.stdout
            .contains("channels.telegram.token_env = FC_TEST_TG: set, [REDACTED]"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("providers.openai.api_key_env = OPENAI_API_KEY: set, [REDACTED]")
    );
}

#[test]
fn the_documented_example_config_is_valid() {
    let example =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config.toml.example"))
            .unwrap();
    let out = check(&example, &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[test]
fn migrate_creates_the_database_and_every_subcommand_has_help() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.toml"),
        "[storage]\nurl = \"sqlite://fresh.db\"\n",
    )
    .unwrap();
    let out = run(dir.path(), &["migrate", "-c", "c.toml"], "", &[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(dir.path().join("fresh.db").exists());
    let again = run(dir.path(), &["migrate", "-c", "c.toml"], "", &[]);
    assert_eq!(
        again.code,
        Some(0),
        "migrating twice is fine: {}",
        again.stderr
    );
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["chat", "--help"],
        &["migrate", "--help"],
        &["config", "check", "--help"],
        &["model", "fetch", "--help"],
        &["model", "list", "--help"],
    ] {
        let help = run(dir.path(), args, "", &[]);
        assert_eq!(help.code, Some(0), "{args:?}");
        assert!(help.stdout.contains("Usage"), "{args:?}: {}", help.stdout);
    }
}

#[test]
fn telegram_webhook_mode_needs_a_public_url_and_discord_its_token() {
    let out = refused(
        "[channels.telegram]\nenabled = true\nmode = \"webhook\"\ntoken_env = \"FC_TG_SET\"\n[channels.discord]\nenabled = true\ntoken_env = \"FC_DC_UNSET\"\n",
        &[("FC_TG_SET", "1:abc")],
    );
    assert!(out.contains("server.public_url: must be set"), "{}", out);
    assert!(
        out.contains("channels.discord.token_env: environment variable FC_DC_UNSET is not set"),
        "{}",
        out
    );
    assert!(!out.contains("channels.telegram.token_env"), "{}", out);
}

#[test]
fn a_database_password_in_the_query_or_unescaped_is_redacted_too() {
    for url in [
        "postgres://app@127.0.0.1:5432/app?password=db-password-9876",
        "postgres://app:db-password@9876/x?y@127.0.0.1:5432/app",
    ] {
        let out = check("", &[("FERROCLAW__STORAGE__URL", url)]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        assert!(
            !out.stdout.contains("db-password") && !out.stderr.contains("db-password"),
            "{url}: {}",
            out.stdout
        );
        assert!(out.stdout.contains("REDACTED"), "{}", out.stdout);
    }
}

#[test]
fn allowed_users_may_be_numbers_or_strings() {
    let out = check(
        "[channels.telegram]\nallowed_users = [7, \"8\"]\n[channels.discord]\nallowed_users = [123456789012345678]\n",
        &[],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let compact: String = out.stdout.split_whitespace().collect();
    assert!(
        compact.contains("allowed_users=[\"7\",\"8\",]"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\"123456789012345678\""),
        "{}",
        out.stdout
    );
}

/// #33.10: every value `serve` would refuse, panic on or silently ignore is refused by
/// `config check`, naming the key (one line each).
#[test]
fn values_serve_would_refuse_or_panic_on_are_refused_naming_the_key() {
    /// A config, the key it must name, and the environment it runs with.
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (
            "[server]\nmax_connections = 4611686018427387904\n",
            "server.max_connections",
            &[],
        ),
        (
            "[server]\nheader_timeout_secs = 2305843009213693952\n",
            "server.header_timeout_secs",
            &[],
        ),
        (
            "[fallback]\ncooldown_secs = 9223372036854775807\n",
            "fallback.cooldown_secs",
            &[],
        ),
        (
            "[fallback]\nmax_concurrent_requests = 4611686018427387904\n",
            "fallback.max_concurrent_requests",
            &[],
        ),
        ("[sandbox]\ncpus = nan\n", "sandbox.cpus", &[]),
        (
            "[egress]\nmode = \"allowlist\"\nallow = [\"ok.org\", \"https://x.org/\"]\n",
            "egress.allow[1]",
            &[],
        ),
        ("[egress]\ndeny = [\"x.org:443\"]\n", "egress.deny[0]", &[]),
        ("[egress]\nmode = \"closed\"\n", "egress.mode", &[]),
        ("[mcp.servers.x]\nargs = [\"a\"]\n", "mcp.servers.x", &[]),
        (
            "[mcp.servers.x]\ncommand = \"a\"\nurl = \"http://h/mcp\"\n",
            "mcp.servers.x.url",
            &[],
        ),
        (
            "[mcp.servers.a__b]\ncommand = \"a\"\n",
            "mcp.servers.a__b",
            &[],
        ),
        (
            "[agent]\nmcp = [\"nope\"]\n[mcp.servers.x]\ncommand = \"a\"\n",
            "agent.mcp[0]",
            &[],
        ),
        (
            "[mcp.servers.n]\nurl = \"http://h/mcp\"\nheaders_env = { Authorization = \"FC_UNSET_AUTH\" }\n",
            "mcp.servers.n.headers_env.Authorization",
            &[],
        ),
        ("[sandbox]\npids_limit = 0\n", "sandbox.pids_limit", &[]),
        ("[sandbox]\npids_limit = -1\n", "sandbox.pids_limit", &[]),
        ("[sandbox]\nmemory_mb = 0\n", "sandbox.memory_mb", &[]),
        ("[storage]\nurl = \"sqlite:\"\n", "storage.url", &[]),
        (
            "[channels.telegram]\nenabled = true\ntoken_env = \"FC_T\"\napi_url = \"not a url\"\n",
            "channels.telegram.api_url",
            &[("FC_T", "1:x")],
        ),
        (
            "[channels.discord]\nenabled = true\ntoken_env = \"FC_D\"\napi_url = \"::garbage\"\n",
            "channels.discord.api_url",
            &[("FC_D", "x")],
        ),
        (
            "[channels.webhook.main]\nsecret_env = \"FC_W\"\nsignature = \"standard\"\n",
            "channels.webhook.main.secret_env",
            &[("FC_W", "whsec_not base64!")],
        ),
        (
            "[channels.webhook.main]\nsecret_env = \"FC_W\"\ncallback_url = \"httpx://a\"\n",
            "channels.webhook.main.callback_url",
            &[("FC_W", "s")],
        ),
        ("[api]\nagents = [\"ghost\"]\n", "api.agents[0]", &[]),
    ];
    for (config, key, env) in cases {
        let out = check(config, env);
        assert_eq!(out.code, Some(2), "{config}: {}", out.stderr);
        assert!(
            out.stderr.lines().any(|l| l.contains(&format!("{key}:"))),
            "{config}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    }
}
