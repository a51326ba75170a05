//! Processes as the OS reports them: a process's resident memory, CPU time and children from
//! `/proc`, `kill -9`, and this process's limit on open files.

/// Resident memory of process `pid`, in KiB (`VmRSS`); 0 when it can't be read.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// CPU time process `pid` has used so far (user + system, all threads), in seconds.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks_per_sec = rustix::param::clock_ticks_per_second();
    (ticks_per_sec > 0).then_some(())?;
    Some(cpu_ticks(&stat)? as f64 / ticks_per_sec as f64)
}

/// `utime + stime` (fields 14 and 15) of a `/proc/<pid>/stat` line, in clock ticks. The
/// command name (field 2) is in parentheses and may hold spaces and parentheses itself, so
/// the fields are counted from the last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// Raises the soft limit on open files to the hard limit, so that many sockets fit.
pub fn raise_fd_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = Rlimit {
            current: limit.maximum,
            ..limit
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// Running (not zombie) children of `parent` whose executable is `exe` (canonical).
pub fn children(parent: u32, exe: &std::path::Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let mut rest = stat
                    .rsplit_once(')')
                    .map_or("", |(_, r)| r)
                    .split_whitespace();
                let state = rest.next();
                let ppid = rest.next().and_then(|p| p.parse::<u32>().ok());
                state != Some("Z") && ppid == Some(parent)
            })
        })
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe))
        .collect()
}

/// Sends SIGKILL to process `pid`.
pub fn kill9(pid: u32) {
    use rustix::process::{Pid, Signal, kill_process};
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process(pid, Signal::KILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_utime_plus_stime() {
        let stat = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 2185 0 0 0 731 96 0 0 20 0 9 0 \
                    5000 100000 2000 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(731 + 96));
        assert_eq!(cpu_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let pid = std::process::id();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        assert!(x != 1);
        assert!(cpu_secs(pid).is_some_and(|s| s >= 0.0));
        assert!(rss_kib(pid) > 0);
    }
}
