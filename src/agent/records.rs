//! The files agents keep their own records in, as the server reads and writes them: only
//! regular files with no other hard link, never through a symbolic link an agent put there,
//! read up to a cap and written private.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Opens `path` for reading when it is a regular file with no other hard link, not through
/// a symbolic link (and without waiting on a FIFO); an agent may have put any of them where
/// its transcript was, to have another file read in its place.
pub fn open_regular_file(path: &Path) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = std::fs::File::from(rustix::fs::open(path, flags, Mode::empty())?);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    if meta.nlink() > 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a file with other hard links",
        ));
    }
    Ok((file, meta))
}

/// Writes `content` to a new file `path` only this user may read, making its directories
/// (private too) as needed; an existing file or link there is left alone.
pub async fn write_private(path: &std::path::Path, content: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    if let Some(dir) = path.parent() {
        tokio::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .await?;
    }
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .await?;
    file.write_all(content).await?;
    file.sync_all().await
}

/// Reads the agent's transcript at `path`, at most `max_bytes` of it: a regular file with no
/// other hard link, never what a link there points to (the agent could have linked any file
/// the server may read).
pub async fn read_transcript(path: &std::path::Path, max_bytes: usize) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt as _;
    let too_large = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the transcript is over claude.max_transcript_bytes ({max_bytes} bytes); the copy kept before stays"
            ),
        )
    };
    let (file, meta) = open_regular_file(path)?;
    if meta.len() > max_bytes as u64 {
        return Err(too_large());
    }
    let mut content = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // It may have grown since.
    tokio::fs::File::from_std(file)
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut content)
        .await?;
    if content.len() > max_bytes {
        return Err(too_large());
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::{read_transcript, write_private};

    /// A transcript is put back only as a new file, and read only from a regular file of at
    /// most the limit with no other hard link: a link at its path is never followed, to an
    /// existing file or to one that does not exist yet.
    #[tokio::test]
    async fn transcripts_are_never_written_or_read_through_a_link() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        let dangling = dir.path().join("nothing-yet");
        std::fs::write(&target, "kept").unwrap();
        for (link, to) in [("a.jsonl", &target), ("b.jsonl", &dangling)] {
            let link = dir.path().join("projects").join(link);
            std::fs::create_dir_all(link.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(to, &link).unwrap();
            assert!(write_private(&link, b"transcript").await.is_err());
            assert!(read_transcript(&link, 1 << 20).await.is_err());
        }
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "kept");
        assert!(!dangling.exists());
        // A new file is written, private, and read back.
        let new = dir.path().join("projects").join("c.jsonl");
        write_private(&new, b"transcript").await.unwrap();
        assert_eq!(read_transcript(&new, 1 << 20).await.unwrap(), b"transcript");
        // Not over the limit, nor through a hard link: it has two names then.
        let err = read_transcript(&new, 5).await.unwrap_err().to_string();
        assert!(
            err.contains("claude.max_transcript_bytes (5 bytes)"),
            "{err}"
        );
        let hard = dir.path().join("projects").join("d.jsonl");
        std::fs::hard_link(&target, &hard).unwrap();
        assert!(read_transcript(&hard, 1 << 20).await.is_err());
        assert!(read_transcript(&target, 1 << 20).await.is_err());
        let mode = std::fs::metadata(&new).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
