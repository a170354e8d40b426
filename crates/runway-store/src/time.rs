//! Timestamps: Unix milliseconds in SQL, RFC 3339 in JSON.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time with millisecond precision, in UTC.
///
/// Stored as Unix milliseconds (`INTEGER`) in SQL, and serialized as RFC 3339 with
/// milliseconds (`2026-11-21T13:50:39.123Z`). The range is 1970-01-01 to 9999-12-31, which every
/// timestamp the store writes falls into; [`Timestamp::from_unix_millis`] refuses the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// The last millisecond of 9999-12-31, the latest time RFC 3339's four-digit year can say.
const MAX_MILLIS: i64 = 253_402_300_799_999;

impl Timestamp {
    /// The current time, truncated to milliseconds.
    pub fn now() -> Self {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(MAX_MILLIS));
        Self(millis.clamp(0, MAX_MILLIS))
    }

    /// A timestamp from Unix milliseconds, or `None` outside 1970-01-01 to 9999-12-31.
    pub fn from_unix_millis(millis: i64) -> Option<Self> {
        (0..=MAX_MILLIS).contains(&millis).then_some(Self(millis))
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_millis(self) -> i64 {
        self.0
    }

    /// This timestamp plus `millis` milliseconds, saturating at the ends of the range.
    pub fn add_millis(self, millis: i64) -> Self {
        Self(self.0.saturating_add(millis).clamp(0, MAX_MILLIS))
    }

    /// Parses RFC 3339 in UTC (`Z` or `+00:00`), with any number of fractional digits
    /// (truncated to milliseconds).
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        let time = humantime::parse_rfc3339(text).ok()?;
        let millis = time.duration_since(UNIX_EPOCH).ok()?.as_millis();
        Self::from_unix_millis(i64::try_from(millis).ok()?)
    }

    fn system_time(self) -> SystemTime {
        // The invariant 0 <= self.0 <= MAX_MILLIS makes the cast lossless.
        UNIX_EPOCH + Duration::from_millis(self.0.unsigned_abs())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}",
            humantime::format_rfc3339_millis(self.system_time())
        )
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse_rfc3339(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid timestamp {text:?}: expected RFC 3339 in UTC between 1970 and 9999"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_parses_rfc3339() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_763_733_039_123, "2025-11-21T13:50:39.123Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (MAX_MILLIS, "9999-12-31T23:59:59.999Z"),
        ];
        for (millis, text) in cases {
            let ts = Timestamp::from_unix_millis(millis).expect("in range");
            assert_eq!(ts.to_string(), text);
            assert_eq!(Timestamp::parse_rfc3339(text), Some(ts));
            let json = serde_json::to_string(&ts).expect("serializes");
            assert_eq!(json, format!("\"{text}\""));
            let back: Timestamp = serde_json::from_str(&json).expect("deserializes");
            assert_eq!(back, ts);
        }
    }

    #[test]
    fn refuses_out_of_range_and_garbage() {
        assert_eq!(Timestamp::from_unix_millis(-1), None);
        assert_eq!(Timestamp::from_unix_millis(MAX_MILLIS + 1), None);
        assert_eq!(Timestamp::parse_rfc3339("yesterday"), None);
        assert_eq!(Timestamp::parse_rfc3339("2025-13-01T00:00:00Z"), None);
        assert_eq!(Timestamp::parse_rfc3339("2025-11-21T13:50:39+02:00"), None);
        assert!(serde_json::from_str::<Timestamp>("\"nope\"").is_err());
        assert_eq!(
            Timestamp::parse_rfc3339("2025-11-21T13:50:39.123456Z").map(Timestamp::unix_millis),
            Some(1_763_733_039_123)
        );
    }

    #[test]
    fn now_is_in_range_and_add_saturates() {
        let now = Timestamp::now();
        assert!(now.unix_millis() > 1_700_000_000_000);
        assert_eq!(now.add_millis(i64::MAX).unix_millis(), MAX_MILLIS);
        assert_eq!(now.add_millis(i64::MIN).unix_millis(), 0);
    }
}
