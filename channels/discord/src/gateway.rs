//! Receiving from Discord: the gateway connection (serenity's shard, which reconnects and
//! resumes by itself), messages and slash commands handed to the inbox, readiness from the
//! connection stage. Discord has no acknowledgement to withhold: a message seen again after a
//! resume or a restart is deduplicated by the journal (its id is the platform message id).

use crate::channel::DiscordChannel;
use crate::translate::{self, Place};
use ferroclaw_channel_core::backoff::Backoff;
use ferroclaw_channel_core::{
    Channel, ChatCommand, ChatKind, DecisionRequest, InboundMessage, Inbox,
};
use serenity::all::{
    ClientBuilder, Command, CommandOptionType, ConnectionStage, Context, CreateCommand,
    CreateCommandOption, CreateInteractionResponse, CreateInteractionResponseMessage, EventHandler,
    GatewayIntents, Interaction, Message, Ready, ResumedEvent,
};
use serenity::gateway::{GatewayError, ShardManager};
use serenity::http::Http;
use serenity::model::channel::Channel as DiscordChannelKind;
use serenity::model::id::{ChannelId, UserId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the gateway task shares with serenity's event handler.
pub(crate) struct Shared {
    pub(crate) inbox: Arc<dyn Inbox>,
    pub(crate) channel: Arc<DiscordChannel>,
    /// For discovery and lookups (the client gets its own copy).
    pub(crate) http: Arc<Http>,
    pub(crate) make_http: Box<dyn Fn() -> Http + Send + Sync>,
    pub(crate) require_mention: bool,
    pub(crate) commands: Vec<ChatCommand>,
    pub(crate) me: OnceLock<UserId>,
    /// Guild channel id → whether it is a thread (and of which channel).
    places: Mutex<HashMap<u64, Place>>,
    commands_registered: AtomicBool,
    pub(crate) cancel: CancellationToken,
}

impl Shared {
    pub(crate) fn new(
        inbox: Arc<dyn Inbox>,
        channel: Arc<DiscordChannel>,
        http: Arc<Http>,
        make_http: Box<dyn Fn() -> Http + Send + Sync>,
        require_mention: bool,
        commands: Vec<ChatCommand>,
        cancel: CancellationToken,
    ) -> Self {
        Shared {
            inbox,
            channel,
            http,
            make_http,
            require_mention,
            commands,
            me: OnceLock::new(),
            places: Mutex::new(HashMap::new()),
            commands_registered: AtomicBool::new(false),
            cancel,
        }
    }

    /// Whether a guild channel is a thread, asked once per channel.
    async fn place(&self, channel: ChannelId) -> Place {
        if let Some(place) = self.places.lock().expect("places lock").get(&channel.get()) {
            return *place;
        }
        match self.http.get_channel(channel).await {
            Ok(DiscordChannelKind::Guild(c)) => {
                let place = Place::of_guild_channel(c.kind, c.parent_id.map(|p| p.get()));
                self.places
                    .lock()
                    .expect("places lock")
                    .insert(channel.get(), place);
                place
            }
            Ok(_) => Place::Channel,
            Err(e) => {
                // Replies still reach the right channel; only the session key lacks the parent.
                tracing::warn!(error = %self.channel.redact(e.to_string()), "could not look up a Discord channel; treating it as a plain channel");
                Place::Channel
            }
        }
    }

    /// Hand a message to the inbox, retrying until it is durable (never skipped).
    async fn hand_over(&self, message: InboundMessage) {
        loop {
            match self.inbox.accept(message.clone()).await {
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "could not journal a Discord message; retrying");
                    tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    }

    /// Carry out a button press (journalled, retried until durable): what became of it, in
    /// words for the presser.
    async fn decide(&self, request: DecisionRequest) -> String {
        loop {
            match self.inbox.decide(request.clone()).await {
                Ok(outcome) => return outcome.words(),
                Err(e) => {
                    tracing::warn!(error = %e, "could not journal a Discord button press; retrying");
                    tokio::select! {
                        _ = self.cancel.cancelled() => return "The service is stopping; press again.".into(),
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
        }
    }

    async fn register_commands(&self, http: &Http) {
        if self.commands_registered.swap(true, Ordering::AcqRel) {
            return;
        }
        let commands = self
            .commands
            .iter()
            .map(|c| {
                let command = CreateCommand::new(c.name).description(c.description);
                match c.argument {
                    Some(argument) => command.add_option(
                        CreateCommandOption::new(CommandOptionType::String, "text", argument)
                            .required(false),
                    ),
                    None => command,
                }
            })
            .collect();
        if let Err(e) = Command::set_global_commands(http, commands).await {
            self.commands_registered.store(false, Ordering::Release);
            tracing::warn!(error = %self.channel.redact(e.to_string()), "registering Discord application commands failed");
        }
    }
}

struct Handler(Arc<Shared>);

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        let _ = self.0.me.set(ready.user.id);
        // Follow-ups go through the channel's own client, which needs the application id.
        self.0.http.set_application_id(ready.application.id);
        self.0.channel.set_ready(true);
        tracing::info!(bot = %ready.user.name, "discord connected");
        self.0.register_commands(&ctx.http).await;
    }

    async fn resume(&self, _ctx: Context, _event: ResumedEvent) {
        self.0.channel.set_ready(true);
        tracing::info!("discord gateway resumed");
    }

    async fn message(&self, _ctx: Context, message: Message) {
        let shared = &self.0;
        // A dispatch is proof of receiving; READY and RESUMED are not (a gateway that
        // resumes and then acknowledges nothing is not alive).
        shared.channel.liveness.received();
        shared.channel.liveness.message();
        let Some(me) = shared.me.get().copied() else {
            return;
        };
        let place = match message.guild_id {
            None => Place::Direct,
            Some(_) => shared.place(message.channel_id).await,
        };
        let Some(inbound) = translate::inbound(&message, me, place) else {
            return;
        };
        if inbound.route.kind == ChatKind::Group && shared.require_mention && !inbound.mentioned {
            return;
        }
        if place == Place::Direct {
            shared
                .channel
                .learn_dm(message.author.id.get(), message.channel_id);
        }
        shared.hand_over(inbound).await;
    }

    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        let shared = &self.0;
        let command = match interaction {
            Interaction::Command(command) => command,
            Interaction::Component(component) => {
                if let Some(request) = translate::press(&component) {
                    let words = shared.decide(request).await;
                    // Only the presser sees the answer; the prompt's edit tells everyone.
                    let answer = CreateInteractionResponse::Message(
                        CreateInteractionResponseMessage::new()
                            .content(words)
                            .ephemeral(true),
                    );
                    if let Err(e) = component.create_response(&ctx.http, answer).await {
                        tracing::warn!(error = %shared.channel.redact(e.to_string()), "could not answer a Discord button press");
                    }
                }
                return;
            }
            _ => return,
        };
        // Discord wants an answer within 3 s; the turn's answer follows up.
        if let Err(e) = command.defer(&ctx.http).await {
            tracing::warn!(error = %shared.channel.redact(e.to_string()), "could not defer a Discord slash command");
        }
        let place = translate::command_place(&command);
        if place == Place::Direct {
            shared
                .channel
                .learn_dm(command.user.id.get(), command.channel_id);
        }
        let inbound = translate::command(&command, place);
        shared
            .channel
            .await_answer(inbound.platform_message_id.clone(), command.token.clone());
        shared.hand_over(inbound).await;
    }
}

/// The gateway connection, until `cancel`: who we are, then serenity's client, started
/// again (with back-off and jitter) if it gives up or stays down by the liveness rule.
pub(crate) async fn run(shared: Arc<Shared>) {
    let cancel = shared.cancel.clone();
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(300));
    loop {
        let result = tokio::select! {
            _ = cancel.cancelled() => return,
            r = connect_once(&shared) => r,
        };
        shared.channel.set_ready(false);
        let liveness = &shared.channel.liveness;
        // A client that worked a while ago starts again at the shortest wait.
        if liveness.silent_for() < liveness.down_after() {
            backoff.reset();
        }
        backoff.failed();
        let mut wait = backoff.delay();
        match result {
            Ok(()) => return,
            Err(Stop::Refused(line)) => {
                tracing::error!("{line}");
                liveness.trouble(line);
                wait = wait.max(Duration::from_secs(60));
            }
            Err(Stop::Failed(e)) => {
                tracing::warn!(error = %e, "discord connection failed; retrying");
                liveness.trouble(e);
            }
            Err(Stop::Dead(why)) => {
                tracing::warn!("{why}; starting a new gateway client");
                liveness.trouble(why);
                liveness.restarted();
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Watch the shard: readiness from its connection stage, liveness from acknowledged
/// heartbeats (serenity's latency is known only while the last heartbeat is acknowledged).
/// Returns the reason once the rule says the connection is down.
async fn watch(shards: &ShardManager, channel: &DiscordChannel) -> String {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut last_stage = None;
    let started = std::time::Instant::now();
    loop {
        tick.tick().await;
        let (stage, acknowledged) = match shards.runners.lock().await.values().next() {
            Some(r) => (Some(r.stage), r.latency.is_some()),
            None => (None, false),
        };
        let connected = stage == Some(ConnectionStage::Connected);
        if connected != channel.is_ready() {
            tracing::info!(connected, "discord gateway connection changed");
        }
        channel.set_ready(connected);
        let liveness = &channel.liveness;
        if connected && acknowledged {
            liveness.received();
        } else if let Some(stage) = stage.filter(|_| !connected) {
            let why = if last_stage == Some(ConnectionStage::Resuming)
                && stage == ConnectionStage::Identifying
            {
                "Discord invalidated the session; identifying again".to_string()
            } else {
                format!("gateway {stage}")
            };
            liveness.trouble(why);
        } else if connected && liveness.silent_for() > Duration::from_secs(1) {
            liveness.trouble("heartbeat not acknowledged".into());
        }
        last_stage = stage;
        let silent = liveness.silent_for();
        // A new client gets the rule's whole time to come up.
        if silent > liveness.down_after() && started.elapsed() > liveness.down_after() {
            return format!(
                "no heartbeat acknowledged for {} s (stage: {})",
                silent.as_secs(),
                stage.map_or("none".to_string(), |s| s.to_string())
            );
        }
    }
}

enum Stop {
    /// Discord refused us for a reason only the operator can fix.
    Refused(String),
    Failed(String),
    /// Down by the liveness rule: the client is dropped and a new one started.
    Dead(String),
}

async fn connect_once(shared: &Arc<Shared>) -> Result<(), Stop> {
    let redact = |e: serenity::Error| shared.channel.redact(e.to_string());
    // Check the token and the REST base first: serenity falls back to Discord's own gateway
    // when discovery fails, which must never happen for a stand-in or proxy.
    shared
        .http
        .get_gateway()
        .await
        .map_err(|e| Stop::Failed(redact(e)))?;
    let intents = GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT;
    let mut client = ClientBuilder::new_with_http((shared.make_http)(), intents)
        .event_handler(Handler(shared.clone()))
        .await
        .map_err(|e| Stop::Failed(redact(e)))?;
    let shards = client.shard_manager.clone();
    let stopped = shared.cancel.clone();
    tokio::select! {
        _ = stopped.cancelled() => {
            shards.shutdown_all().await;
            Ok(())
        }
        why = watch(&shards, &shared.channel) => {
            shards.shutdown_all().await;
            Err(Stop::Dead(why))
        }
        r = client.start() => match r {
            Ok(()) => Err(Stop::Failed("the gateway connection ended".into())),
            Err(serenity::Error::Gateway(GatewayError::DisallowedGatewayIntents)) => Err(Stop::Refused(
                "Discord refused the MESSAGE_CONTENT intent: enable \"Message Content Intent\" for this bot in the Discord Developer Portal (Bot → Privileged Gateway Intents)".into(),
            )),
            Err(serenity::Error::Gateway(GatewayError::InvalidAuthentication)) => Err(Stop::Refused(
                "Discord rejected the bot token (channels.discord.token_env)".into(),
            )),
            Err(e) => Err(Stop::Failed(redact(e))),
        }
    }
}
