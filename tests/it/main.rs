//! Integration tests: a real `agentmux serve` process on an ephemeral port, real WebSocket
//! clients, a real SQLite file; and the fakes that stand in for the Claude CLI and its API.

mod acp;
mod acp_real;
mod activity;
mod bench;
mod bodies;
mod claude;
mod cli_chat;
mod cli_review;
mod cluster;
mod cluster_trust;
mod common;
mod conformance;
mod cross_site;
mod fake_cli;
mod faults;
mod gateway;
mod history;
mod images;
mod imports;
mod inproc;
mod isolation;
mod layers;
mod limits;
mod metrics;
mod permissions;
mod projects;
mod real_cli;
mod refused;
mod rest;
mod schedules;
mod security;
mod spans;
mod store;
mod warm;
mod worktrees;
