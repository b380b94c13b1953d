//! Looking at processes through /proc, for tests about child processes (Linux).

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

/// Open file descriptors of `pid`.
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

struct Proc {
    pid: u32,
    ppid: u32,
    zombie: bool,
    cmdline: String,
}

fn all() -> impl Iterator<Item = Proc> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            let mut fields = rest.split_whitespace();
            let zombie = fields.next()? == "Z";
            let ppid = fields.next()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            Some(Proc {
                pid,
                ppid,
                zombie,
                cmdline,
            })
        })
}
