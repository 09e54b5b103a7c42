//! ferroclaw: a self-hosted chat-channel bot service.
//!
//! The flow of one message (see ARCHITECTURE.md): a channel adapter normalises a platform
//! message and hands it to [`ingress::Ingress`] (journal, deduplicated) → [`lanes::Lanes`]
//! (one lane per busy session) → [`engine::Engine`] (model call through
//! [`providers::FallbackChain`], one committed transaction) → [`outbox`] (delivery worker per
//! channel) → the adapter.

pub mod admin;
pub mod agents;
pub mod alerts;
pub mod app;
pub mod approvals;
pub mod backup;
pub mod channels;
pub mod chat;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod component;
pub mod config;
pub mod coordination;
pub mod doctor;
pub mod egress;
pub mod engine;
pub mod exec;
pub mod features;
pub mod health;
pub mod heap;
pub mod http;
pub mod import_openclaw;
pub mod ingress;
pub mod interned;
pub mod lanes;
pub mod mcp;
pub mod media;
pub mod memory;
pub mod metrics;
pub mod models;
pub mod outbox;
pub mod plan;
pub mod policy;
pub mod previews;
pub mod providers;
pub mod recent_errors;
pub mod redact;
pub mod sandbox;
pub mod schedules;
pub mod serve;
pub mod server;
pub mod signals;
pub mod skills;
pub mod spawn;
pub mod storage;
pub mod store_copy;
pub mod subagents;
pub mod teams;
pub mod tools;
pub mod usage;
pub mod workspace_fs;
