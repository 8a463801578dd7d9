//! How busy the machine is, from `/proc/stat` (Linux): the measurements share their cores
//! with whatever else runs, so every result says how busy the machine was just before it
//! was timed, and `--wait-quiet` can hold the timing back until the machine calms down.

use std::time::{Duration, Instant};

/// (busy, total) jiffies over all CPUs.
fn jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

/// The fraction of all CPU time spent busy over `window` (this process included: call it
/// while idle to see the others), or `None` where `/proc/stat` is unavailable.
pub fn busy(window: Duration) -> Option<f64> {
    let (b0, t0) = jiffies()?;
    std::thread::sleep(window);
    let (b1, t1) = jiffies()?;
    let dt = t1.saturating_sub(t0);
    (dt > 0).then(|| b1.saturating_sub(b0) as f64 / dt as f64)
}

/// Waits up to `max_wait` for the machine to be busy at most `threshold` (checked every
/// half second); returns the last busy fraction seen.
pub fn wait_quiet(threshold: f64, max_wait: Duration) -> Option<f64> {
    let start = Instant::now();
    loop {
        let b = busy(Duration::from_millis(500));
        match b {
            Some(x) if x > threshold && start.elapsed() < max_wait => {
                std::thread::sleep(Duration::from_millis(500));
            }
            _ => return b,
        }
    }
}
