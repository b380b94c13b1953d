//! Looking at processes through /proc, for tests about child processes (Linux).
//!
//! A reader that cannot read what it was asked about panics: a test that finds "no children" or
//! "no variables" because /proc was unreadable would pass while checking nothing. Only a process
//! that exits during a scan is skipped (it is no longer there to find).

/// Pids of processes whose command line contains `needle`, each with whether it is a zombie.
pub fn with_cmdline(needle: &str) -> Vec<(u32, bool)> {
    all()
        .filter(|p| p.cmdline.contains(needle))
        .map(|p| (p.pid, p.zombie))
        .collect()
}

/// Pids of the children of `parent`, each with whether it is a zombie.
pub fn children_of(parent: u32) -> Vec<(u32, bool)> {
    all()
        .filter(|p| p.ppid == parent)
        .map(|p| (p.pid, p.zombie))
        .collect()
}

/// What `pid`'s descriptors that are not files on disk point at (pipes, sockets, anonymous
/// inodes such as pidfds): what a child process or a connection leaves behind when it leaks.
/// Files (a database, its WAL) are left out: a connection pool may open more of them on demand.
///
/// # Panics
/// When `/proc/{pid}/fd` cannot be read.
pub fn open_non_file_fds(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/fd: {e}"))
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| !target.starts_with('/'))
        .collect()
}

/// The most resident memory `pid` has used so far (`VmHWM`), in bytes.
///
/// # Panics
/// When `/proc/{pid}/status` cannot be read or has no `VmHWM` line.
pub fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status: {e}"));
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in /proc/{pid}/status"));
    kb * 1024
}

/// The names of the environment variables `pid` started with.
///
/// # Panics
/// When `/proc/{pid}/environ` cannot be read.
pub fn environment_names(pid: u32) -> Vec<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/environ: {e}"));
    String::from_utf8_lossy(&environ)
        .split('\0')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_owned()))
        .collect()
}

struct Proc {
    pid: u32,
    ppid: u32,
    zombie: bool,
    cmdline: String,
}

fn all() -> impl Iterator<Item = Proc> {
    std::fs::read_dir("/proc")
        .unwrap_or_else(|e| panic!("cannot read /proc: {e}"))
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let mut fields = rest.split_whitespace();
            let zombie = fields.next()? == "Z";
            let ppid = fields.next()?.parse().ok()?;
            // Gone since the listing: skipped like the stat above.
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .ok()?;
            Some(Proc {
                pid,
                ppid,
                zombie,
                cmdline,
            })
        })
}
