//! Every integration test in one binary (one link instead of one per file): the real
//! service and its adapters driven through stand-ins that speak the real protocols
//! (`common`), one module per area.

mod common;

mod adversarial;
mod agents;
mod approvals;
mod approvals_chat;
mod auth_profiles;
mod backup;
mod chaos;
mod chat_cli;
mod config_check;
mod cost;
mod discord;
mod doctor;
mod engine_loop;
mod exposure;
mod hardening;
mod health;
mod import_openclaw;
mod leaks;
mod local_model;
mod mcp;
mod media;
mod memory;
mod message_path;
mod openai_api;
mod operability;
mod plan;
mod plan_steps;
mod providers;
mod sandbox;
mod scale_out;
mod schedules;
mod slack;
mod sqlite_schema;
mod standard_webhooks;
mod store_conformance;
mod store_copy;
mod subagent_inbox;
mod subagents;
mod teams;
mod telegram;
mod tidy;
mod transport;
mod upgrades;
mod webhook;
