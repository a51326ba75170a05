//! Integration tests: a real `agentmux serve` process on an ephemeral port, real WebSocket
//! clients, a real SQLite file.

mod common;
mod gateway;
