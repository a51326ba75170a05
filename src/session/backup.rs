//! Backups of the server's database while it serves: for its admins only (`auth.admins`; with
//! authentication off, whoever runs it), one at a time per admin along with imports and
//! exports, written into the data dir and gone from there as soon as they are opened for
//! reading.

use std::path::Path;

use crate::limits::QuotaPermit;
use crate::protocol::{ErrorCode, Principal};
use crate::store::backup::new_private_file;

use super::errors::store_failure;
use super::{Manager, SessionError};

/// What a file being backed up into is called in the data dir until it has been opened.
const PARTIAL_PREFIX: &str = "backup-";
const PARTIAL_SUFFIX: &str = ".partial";

/// A finished backup: the copy (a file no longer named anywhere), its size, and the admin's
/// place for transfers, held until it has been read.
pub struct Backup {
    /// The copy, open for reading from its start.
    pub file: std::fs::File,
    /// Its size in bytes.
    pub bytes: u64,
    /// The admin's transfer place.
    pub permit: QuotaPermit,
}

impl Manager {
    /// A consistent copy of the whole database as it is now, for `principal`, who must be one
    /// of the server's admins.
    ///
    /// # Errors
    /// `forbidden` for anyone else, `unsupported` on PostgreSQL (which `pg_dump` backs up),
    /// `limit_exceeded` while the admin's transfers are all in use, `store_unavailable` when the
    /// copy fails.
    pub async fn backup(&self, principal: &Principal) -> Result<Backup, SessionError> {
        if !self.shared.config.auth.is_admin(principal) {
            return Err(SessionError::new(
                ErrorCode::Forbidden,
                "a backup is for the server's admins (auth.admins)",
            ));
        }
        let permit = self.acquire_transfer(principal)?;
        let path = self.shared.config.data_dir.join(format!(
            "{PARTIAL_PREFIX}{}{PARTIAL_SUFFIX}",
            uuid::Uuid::new_v4()
        ));
        let failed = |e: &dyn std::fmt::Display| {
            SessionError::new(
                ErrorCode::StoreUnavailable,
                format!("the backup failed: {e}"),
            )
        };
        new_private_file(&path).map_err(|e| failed(&e))?;
        let copied = self.shared.store.backup(&path).await;
        let opened = std::fs::File::open(&path);
        let _ = std::fs::remove_file(&path);
        match copied {
            Ok(true) => {}
            Ok(false) => {
                return Err(SessionError::new(
                    ErrorCode::Unsupported,
                    "the store is PostgreSQL: back it up with pg_dump (docs/operating.md)",
                ));
            }
            Err(err) => return Err(store_failure(err)),
        }
        let file = opened.map_err(|e| failed(&e))?;
        let bytes = file.metadata().map_err(|e| failed(&e))?.len();
        Ok(Backup {
            file,
            bytes,
            permit,
        })
    }
}

/// Removes the files of backups a crash left unfinished in `data_dir`; returns how many.
pub fn remove_unfinished(data_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with(PARTIAL_PREFIX) && name.ends_with(PARTIAL_SUFFIX)
        })
        .filter(|entry| std::fs::remove_file(entry.path()).is_ok())
        .count()
}
