//! Schema versions: the migrations of each engine, the newest version this build knows, and
//! what a failed migration means for a person, above all a database made by a newer agentmux.

use sqlx::migrate::{MigrateError, Migrator};

/// The SQLite schema: `migrations/sqlite`, embedded.
pub(super) static SQLITE: Migrator = sqlx::migrate!("./migrations/sqlite");

/// The PostgreSQL schema: `migrations/postgres`, embedded.
pub(super) static POSTGRES: Migrator = sqlx::migrate!("./migrations/postgres");

/// The newest version among `migrator`'s migrations.
pub(super) fn newest(migrator: &Migrator) -> i64 {
    migrator.iter().map(|m| m.version).max().unwrap_or(0)
}

/// What `err`, from running `migrator`, means. A database that has a version this build lacks
/// was made by a newer agentmux: that is said in so many words, with both versions (and
/// nothing was changed).
pub(super) fn explain(err: &MigrateError, migrator: &Migrator) -> String {
    match err {
        MigrateError::VersionMissing(version) => newer(*version, migrator),
        other => other.to_string(),
    }
}

/// Why a database at schema `version`, newer than what `migrator` knows, is refused.
pub(super) fn newer(version: i64, migrator: &Migrator) -> String {
    format!(
        "it was made by a newer agentmux: it has schema version {version}, and this agentmux \
         ({}) knows versions up to {}. Run the newer agentmux, or restore a backup made by \
         this one (a database is never migrated back)",
        env!("AGENTMUX_VERSION"),
        newest(migrator)
    )
}
