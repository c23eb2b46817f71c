//! When a failed model call is tried again, and after how long: [`RetryPolicy`] (attempts,
//! jittered exponential backoff) and [`retry_after`] (the server's own `Retry-After`). Used by
//! `call.rs`, which decides *whether* a failure may be retried: a 429, a 5xx or a connection
//! reset, and only before any word of the answer was shown. Pure, apart from the jitter.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Most attempts of one model call (the first and three retries): a rate limit or an
/// overloaded server usually clears within seconds; past four tries the user is better told.
pub const MAX_ATTEMPTS: u32 = 4;

/// Backoff before the first retry; each further one doubles it.
pub const BASE_DELAY: Duration = Duration::from_millis(500);

/// Longest backoff of our own between two attempts.
pub const MAX_DELAY: Duration = Duration::from_secs(8);

/// Longest wait a `Retry-After` may ask for and still be honoured: a turn may wait a minute
/// for a rate limit to clear, not an hour; past it the call fails with the server's answer.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1: no retry).
    pub max_attempts: u32,
    /// Backoff before the first retry (doubled per retry, capped at `max_delay`).
    pub base_delay: Duration,
    /// Cap of the backoff.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: MAX_ATTEMPTS,
            base_delay: BASE_DELAY,
            max_delay: MAX_DELAY,
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` after attempt `attempt` (from 1) failed: the
    /// server's `Retry-After` when it gave one, else the backoff `base × 2^(attempt-1)`
    /// (capped), jittered down to between half and all of it so that clients that failed
    /// together do not retry together.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            return wait;
        }
        let doubled = self
            .base_delay
            .saturating_mul(1 << attempt.saturating_sub(1).min(16));
        let backoff = doubled.min(self.max_delay);
        let half = backoff / 2;
        half + half.mul_f64(unit_random())
    }
}

/// A number in `[0, 1)`, different on every call (std's hasher keys are random per process
/// and per instance): enough for jitter, no generator crate needed.
fn unit_random() -> f64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// What the server asked for: `retry-after-ms` (milliseconds, OpenAI's and Azure's), else
/// `Retry-After` as seconds or as an HTTP date. `None` when neither is there or readable;
/// a date in the past is zero.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0)
            .then(|| Duration::from_secs_f64(seconds.min(1e9)));
    }
    let when = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = when.duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    /// Seconds, milliseconds (which win) and HTTP dates; garbage and negatives are none.
    #[test]
    fn retry_after_forms() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3")])),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "3"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            Some(Duration::ZERO)
        );
        let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30);
        let date = jiff::fmt::rfc2822::to_string(&soon.to_zoned_datetime(jiff::tz::TimeZone::UTC))
            .unwrap();
        let wait = retry_after(&headers(&[("retry-after", &date)])).unwrap();
        assert!(
            wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")])), None);
        assert_eq!(retry_after(&headers(&[])), None);
    }

    /// The backoff doubles per attempt, is capped, and is jittered within its upper half;
    /// the server's wait is taken as it is.
    #[test]
    fn backoff_doubles_is_capped_and_jittered() {
        let policy = RetryPolicy::default();
        for (attempt, full) in [(1, 500), (2, 1000), (3, 2000), (5, 8000), (30, 8000)] {
            let full = Duration::from_millis(full);
            for _ in 0..50 {
                let d = policy.delay(attempt, None);
                assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
            }
        }
        let spread: std::collections::HashSet<Duration> =
            (0..20).map(|_| policy.delay(3, None)).collect();
        assert!(spread.len() > 10, "jitter varies: {spread:?}");
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
    }
}
