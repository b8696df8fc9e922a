//! How the tray words amounts for a person.

/// A duration in words: `45s`, `4m 30s`, `2h 5m`.
pub fn countdown(ms: u64) -> String {
    let secs = ms.div_ceil(1000);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, (secs % 3600) / 60),
    }
}
