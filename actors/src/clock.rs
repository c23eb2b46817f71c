//! The server's clock: every timestamp it writes (`createdAt`, display-log entries, request
//! journal records) comes from here, so there is one format and one source of time.

/// Now as ISO-8601 UTC with milliseconds, like JavaScript's `new Date().toISOString()`.
pub fn now_iso() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// Milliseconds since the Unix epoch.
pub fn now_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    /// `new Date().toISOString()`'s shape: `2026-12-01T04:30:00.123Z`.
    #[test]
    fn now_iso_is_javascripts_format() {
        let now = super::now_iso();
        assert_eq!(now.len(), 24, "{now}");
        assert_eq!(
            (&now[4..5], &now[10..11], &now[19..20], &now[23..]),
            ("-", "T", ".", "Z")
        );
        assert!(now[20..23].bytes().all(|b| b.is_ascii_digit()), "{now}");
    }
}
