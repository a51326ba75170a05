//! What the `agentmux` command does for an operator besides serving: backing the database up
//! and restoring it (`backup.rs`), and checking what a server needs (`doctor.rs`). Each command
//! returns what it prints.

pub mod backup;
pub mod doctor;
