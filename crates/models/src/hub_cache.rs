//! Writing into the Hugging Face tools' cache (huggingface_hub's layout), so what wgllm downloads
//! they see, and the reverse: a repository's files live once as
//! `models--OWNER--REPO/blobs/SHA256`, each revision's view of them as `snapshots/COMMIT/FILE`
//! links into `blobs/`, and `refs/REVISION` holds the commit a branch or tag was at.

use std::io;
use std::path::{Path, PathBuf};

/// Where one downloaded file goes in the cache at `hub_cache`.
#[derive(Clone, Debug)]
pub struct Target {
    /// The file's bytes: `blobs/SHA256`.
    pub blob: PathBuf,
    /// The snapshot's entry for it: `snapshots/COMMIT/FILE`.
    pub link: PathBuf,
    /// `refs/REVISION`, for a revision that is not the commit itself.
    pub reference: Option<PathBuf>,
    pub commit: String,
}

impl Target {
    /// Where the blob is written until it is complete (huggingface_hub's name for it).
    pub fn incomplete(&self) -> PathBuf {
        let mut name = self.blob.file_name().unwrap_or_default().to_os_string();
        name.push(".incomplete");
        self.blob.with_file_name(name)
    }

    /// Once the blob is complete: the snapshot's link to it and the revision's ref.
    pub fn publish(&self) -> io::Result<()> {
        let dir = self.link.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        // From the link's folder up to the repository: `snapshots/COMMIT` and FILE's folders.
        let depth = self.link.components().count() - self.blob.components().count() + 1;
        let mut rel = PathBuf::new();
        for _ in 0..depth {
            rel.push("..");
        }
        rel.push("blobs");
        rel.push(self.blob.file_name().unwrap_or_default());
        match std::fs::remove_file(&self.link) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        link(&rel, &self.blob, &self.link)?;
        if let Some(r) = &self.reference {
            std::fs::create_dir_all(r.parent().unwrap_or(Path::new(".")))?;
            std::fs::write(r, &self.commit)?;
        }
        Ok(())
    }
}

/// `at` pointing at `blob` (`rel` from `at`'s folder): a symbolic link, as huggingface_hub makes
/// one; a hard link, else a copy, where the system refuses symbolic links.
fn link(rel: &Path, blob: &Path, at: &Path) -> io::Result<()> {
    #[cfg(unix)]
    if std::os::unix::fs::symlink(rel, at).is_ok() {
        return Ok(());
    }
    #[cfg(not(unix))]
    let _ = rel;
    std::fs::hard_link(blob, at).or_else(|_| std::fs::copy(blob, at).map(drop))
}
