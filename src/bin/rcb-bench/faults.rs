//! Page faults of the calling thread, so that a table can say whether a first call had pages
//! mapped for it for the first time (a minor fault each: a 4 KiB page, or a huge page; memory
//! mapped in advance takes none). Cold caches, which no counter here sees, take no fault.

/// The minor page faults the calling thread has taken so far (`/proc/thread-self/stat`, field
/// 10), or `None` where that file cannot be read (not Linux, or no procfs). Reading it costs
/// microseconds: call it outside a timed interval.
pub fn minor() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let after_name = stat.get(stat.rfind(')')? + 1..)?;
    after_name.split_whitespace().nth(7)?.parse().ok()
}
