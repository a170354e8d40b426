//! Durations written the way Go writes them: `time.ParseDuration` and `Duration.String()`.
//!
//! GitLab Runner's flags (`--process-termination-timeout 10s`) and GRIT's (`--timeout 1m30s`)
//! take Go durations, so Runway's wrapper and the `deployer` read and print the same text.
//!
//! Parsing accepts what Go accepts: an optional `+` sign, then one or more numbers each followed
//! by a unit (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`), where a number may have a fraction
//! (`1.5s`, `.5s`, `1.s`); the bare `0` is the only number allowed without a unit. Unlike Go,
//! a negative duration (`-1s`) is refused: a timeout cannot be negative. Fractions are truncated
//! to the nanosecond (exactly, where Go goes through a float), and the total must fit Go's
//! `time.Duration` (about 292 years).
//!
//! Formatting prints what Go prints: `0s`, `250ms`, `1.5µs`, `10s`, `1m30s`, `1h0m0s`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Go's `time.Duration` is an `int64` count of nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000), // U+00B5 MICRO SIGN, which Go prints
    ("μs", 1_000), // U+03BC GREEK SMALL LETTER MU
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
];

const EXPECTED: &str = "expected numbers with units such as 10s, 1m30s, 1h, 250ms or 1.5s (units: ns, us, ms, s, m, h)";

/// Why a text is not a Go duration. The message names the text and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("invalid duration {text:?}: {EXPECTED}")]
    Invalid { text: String },
    #[error("invalid duration {text:?}: missing unit after {number:?}; {EXPECTED}")]
    MissingUnit { text: String, number: String },
    #[error("invalid duration {text:?}: unknown unit {unit:?}; {EXPECTED}")]
    UnknownUnit { text: String, unit: String },
    #[error("invalid duration {text:?}: negative durations are not allowed")]
    Negative { text: String },
    #[error(
        "invalid duration {text:?}: longer than the largest duration, 2562047h47m16.854775807s"
    )]
    TooLong { text: String },
}

/// Parses a duration as Go's `time.ParseDuration` does (see the module's documentation).
///
/// ```
/// use std::time::Duration;
/// use runway_wrapper::duration::parse;
///
/// assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
/// assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
/// assert!(parse("10").is_err()); // a unit is required, except for "0"
/// ```
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let invalid = || DurationError::Invalid {
        text: text.to_owned(),
    };
    let mut rest = text;
    let mut negative = false;
    if let Some(stripped) = rest.strip_prefix('-') {
        negative = true;
        rest = stripped;
    } else if let Some(stripped) = rest.strip_prefix('+') {
        rest = stripped;
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        // The number: digits, then optionally a '.' and more digits; at least one digit.
        let integer_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (integer, after) = rest.split_at(integer_len);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after_dot) => {
                let len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(len)
            }
            None => ("", after),
        };
        if integer.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let number = &rest[..rest.len() - after.len()];
        // The unit: everything up to the next digit or '.'.
        let unit_len = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(DurationError::MissingUnit {
                text: text.to_owned(),
                number: number.to_owned(),
            });
        }
        let Some(&(_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(DurationError::UnknownUnit {
                text: text.to_owned(),
                unit: unit.to_owned(),
            });
        };
        let too_long = || DurationError::TooLong {
            text: text.to_owned(),
        };
        let mut whole: u128 = 0;
        for digit in integer.bytes() {
            whole = whole * 10 + u128::from(digit - b'0');
            if whole > MAX_NANOS {
                return Err(too_long());
            }
        }
        let mut nanos = whole.checked_mul(scale).ok_or_else(too_long)?;
        // 18 digits of the fraction keep every nanosecond of the largest unit; Go also drops
        // the digits past what an int64 holds.
        let mut numerator: u128 = 0;
        let mut denominator: u128 = 1;
        for digit in fraction.bytes().take(18) {
            numerator = numerator * 10 + u128::from(digit - b'0');
            denominator *= 10;
        }
        nanos += numerator * scale / denominator;
        total = total.checked_add(nanos).ok_or_else(too_long)?;
        if total > MAX_NANOS {
            return Err(too_long());
        }
        rest = after;
    }
    if negative && total != 0 {
        return Err(DurationError::Negative {
            text: text.to_owned(),
        });
    }
    let seconds = u64::try_from(total / 1_000_000_000).map_err(|_| invalid())?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| invalid())?;
    Ok(Duration::new(seconds, nanos))
}

/// Formats a duration as Go's `Duration.String()` does: `1h0m0s`, `1m30s`, `1.5s`, `250ms`.
///
/// ```
/// use std::time::Duration;
/// use runway_wrapper::duration::format;
///
/// assert_eq!(format(Duration::from_secs(3600)), "1h0m0s");
/// assert_eq!(format(Duration::from_millis(1500)), "1.5s");
/// ```
pub fn format(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if nanos < 1_000_000_000 {
        // Below a second Go picks the largest unit that keeps a non-zero integer part.
        let (digits, unit) = match nanos {
            n if n < 1_000 => return format!("{n}ns"),
            n if n < 1_000_000 => (3, "µs"),
            _ => (6, "ms"),
        };
        let scale = 10u128.pow(digits);
        return format!("{}{}{unit}", nanos / scale, fraction(nanos % scale, digits));
    }
    let seconds = nanos / 1_000_000_000;
    let fraction = fraction(nanos % 1_000_000_000, 9);
    let (minutes, seconds) = (seconds / 60, seconds % 60);
    if minutes == 0 {
        return format!("{seconds}{fraction}s");
    }
    let (hours, minutes) = (minutes / 60, minutes % 60);
    if hours == 0 {
        return format!("{minutes}m{seconds}{fraction}s");
    }
    format!("{hours}h{minutes}m{seconds}{fraction}s")
}

/// `.5`, `.005` or nothing: `value` in units of 10^-digits, trailing zeros dropped.
fn fraction(value: u128, digits: u32) -> String {
    if value == 0 {
        return String::new();
    }
    let padded = format!("{value:0width$}", width = digits as usize);
    format!(".{}", padded.trim_end_matches('0'))
}

/// A [`Duration`] that parses and prints as Go does; the type of duration flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration(pub Duration);

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse(text).map(Self)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(self.0))
    }
}

impl From<Duration> for GoDuration {
    fn from(duration: Duration) -> Self {
        Self(duration)
    }
}

impl From<GoDuration> for Duration {
    fn from(duration: GoDuration) -> Self {
        duration.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(text: &str) -> Duration {
        parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    #[test]
    fn parses_what_go_parses() {
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("+0"), Duration::ZERO);
        assert_eq!(ok("-0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        assert_eq!(ok("10s"), Duration::from_secs(10));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("1h0m0s"), Duration::from_secs(3600));
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok(".5s"), Duration::from_millis(500));
        assert_eq!(ok("1.s"), Duration::from_secs(1));
        assert_eq!(ok("3us"), Duration::from_micros(3));
        assert_eq!(ok("3µs"), Duration::from_micros(3));
        assert_eq!(ok("3μs"), Duration::from_micros(3));
        assert_eq!(ok("7ns"), Duration::from_nanos(7));
        assert_eq!(ok("1h2m3.004005006s"), Duration::new(3723, 4_005_006));
        assert_eq!(ok("2s1ms"), Duration::from_millis(2001));
        assert_eq!(ok("1.0000000001s"), Duration::from_secs(1));
        assert_eq!(
            ok("2562047h47m16.854775807s"),
            Duration::new(9_223_372_036, 854_775_807)
        );
    }

    #[test]
    fn refuses_what_go_refuses_with_the_text_and_what_was_expected() {
        for (text, says) in [
            ("", "invalid duration \"\""),
            ("1", "missing unit after \"1\""),
            ("10", "missing unit"),
            ("s", "invalid duration \"s\""),
            (".s", "invalid duration \".s\""),
            ("1x", "unknown unit \"x\""),
            ("1S", "unknown unit \"S\""),
            ("1 s", "unknown unit \" s\""),
            ("1d", "unknown unit \"d\""),
            ("-1s", "negative durations are not allowed"),
            ("3000000h", "longer than the largest duration"),
            ("9223372036854775808ns", "longer than the largest duration"),
            ("1s-", "unknown unit \"s-\""),
        ] {
            let error = parse(text).expect_err(text).to_string();
            assert!(error.contains(says), "{text:?}: {error}");
            assert!(error.contains(&format!("{text:?}")), "{text:?}: {error}");
        }
        let error = parse("10").expect_err("10").to_string();
        assert!(error.contains("such as 10s, 1m30s"), "{error}");
    }

    #[test]
    fn formats_as_go_does() {
        for (duration, text) in [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(1), "1ns"),
            (Duration::from_nanos(1_100), "1.1µs"),
            (Duration::from_micros(2_200), "2.2ms"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(10), "10s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::new(3723, 4_005_006), "1h2m3.004005006s"),
            (
                Duration::new(9_223_372_036, 854_775_807),
                "2562047h47m16.854775807s",
            ),
        ] {
            assert_eq!(format(duration), text);
            assert_eq!(GoDuration(duration).to_string(), text);
        }
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(nanos in 0..=i64::MAX as u64) {
            let duration = Duration::from_nanos(nanos);
            prop_assert_eq!(parse(&format(duration)), Ok(duration));
        }

        #[test]
        fn components_add_up(h in 0u64..1000, m in 0u64..1000, s in 0u64..1000, ms in 0u64..1000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let expected = Duration::from_secs(h * 3600 + m * 60 + s) + Duration::from_millis(ms);
            prop_assert_eq!(parse(&text), Ok(expected));
        }

        #[test]
        fn no_text_panics(text in "\\PC{0,12}") {
            let _ = parse(&text);
        }
    }
}
