//! The project's integration tests.

mod fake_cli;
