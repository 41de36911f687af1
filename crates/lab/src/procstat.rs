//! CPU time from `/proc`: the whole machine (`/proc/stat`, every state
//! but idle and iowait, kernel softirq work included) and one process
//! (`/proc/<pid>/stat`, its user and system time, all threads). Times are
//! in seconds, from clock ticks of `USER_HZ` = 100 (proc(5): the value every
//! Linux architecture exports to user space).
const TICKS_PER_SECOND: f64 = 100.0;

/// Busy CPU seconds of the whole machine since boot, or `None` when
/// `/proc/stat` is unreadable.
pub fn machine_busy_s() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    if fields.len() < 7 {
        return None;
    }
    let busy: u64 = fields
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4 && *i < 8)
        .map(|(_, v)| v)
        .sum();
    Some(busy as f64 / TICKS_PER_SECOND)
}

/// User plus system CPU seconds of process `pid` (all its threads), or
/// `None` when it is gone.
pub fn process_cpu_s(pid: u32) -> Option<f64> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This process's CPU seconds.
pub fn self_cpu_s() -> Option<f64> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

fn parse_stat(text: &str) -> Option<f64> {
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after the last ')'. utime and stime are fields 14, 15.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_SECOND)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stat_line_with_spaces_in_the_name_parses() {
        let line = "42 (a b) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 5 0 0";
        assert_eq!(super::parse_stat(line), Some(3.0));
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        assert!(super::self_cpu_s().is_some());
        assert!(super::machine_busy_s().is_some());
    }
}
