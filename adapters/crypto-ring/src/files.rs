//! Key files: created new, readable by their owner only.

use std::path::Path;

/// Opens `path` for writing as a new file (never over an existing one), mode 0600.
pub(crate) fn create_owner_only(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}
