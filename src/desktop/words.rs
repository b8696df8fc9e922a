//! How the tray words amounts for a person.

/// A duration in words: `45s`, `4m 30s`, `2h 5m`, `6d 23h`.
pub fn countdown(ms: u64) -> String {
    let secs = ms.div_ceil(1000);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h {}m", secs / 3600, (secs % 3600) / 60),
        _ => format!("{}d {}h", secs / 86_400, (secs % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_span_is_said_in_its_own_units() {
        let said: Vec<String> =
            [45_000, 270_000, 7_500_000, 604_800_000, 601_200_001].into_iter().map(super::countdown).collect();
        assert_eq!(said, ["45s", "4m 30s", "2h 5m", "7d 0h", "6d 23h"]);
    }
}
