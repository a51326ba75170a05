//! What the `agentmux` command does for an operator besides serving: backing the database up
//! and restoring it (`backup.rs`). Each command returns what it prints.

pub mod backup;
