//! Small helpers with no state of their own: time stamps as the API server writes them,
//! random names and uids, a stable hash of a JSON value.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// `2006-01-02T15:04:05Z`, as `metav1.Time` is written.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let (secs, _) = since_epoch(t);
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `2006-01-02T15:04:05.999999999Z`, as the kubelet prefixes log lines with `timestamps=true`.
pub(crate) fn rfc3339_nanos(t: SystemTime) -> String {
    let (secs, nanos) = since_epoch(t);
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{nanos:09}Z")
}

pub(crate) fn now() -> String {
    rfc3339(SystemTime::now())
}

fn since_epoch(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(_) => (0, 0),
    }
}

/// Seconds since the epoch to (year, month, day, hour, minute, second), by Howard Hinnant's
/// `civil_from_days`.
fn civil(secs: i64) -> (i64, u32, u32, u32, u32, u32) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let narrow = |v: i64| u32::try_from(v).unwrap_or(0);
    (
        y,
        narrow(m),
        narrow(d),
        narrow(rem / 3600),
        narrow(rem % 3600 / 60),
        narrow(rem % 60),
    )
}

/// Parses the RFC 3339 forms above (and any fraction or `Z` offset), for `sinceTime`.
pub(crate) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut date = date.split('-').map(str::parse::<i64>);
    let (y, mo, d) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let (time, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut time = time.split(':').map(str::parse::<i64>);
    let (h, mi, sec) = (time.next()?.ok()?, time.next()?.ok()?, time.next()?.ok()?);
    // days_from_civil
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if mo > 2 { mo - 3 } else { mo + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3600 + mi * 60 + sec).ok()?;
    let mut nanos = 0u32;
    if !frac.is_empty() {
        let digits: String = frac.chars().take(9).collect();
        let scale = 10u32.pow(u32::try_from(9 - digits.len()).ok()?);
        nanos = digits.parse::<u32>().ok()? * scale;
    }
    Some(UNIX_EPOCH + Duration::new(secs, nanos))
}

static SEED: OnceLock<u64> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A random u64 (SplitMix64 over a per-process random seed): for names, uids and addresses,
/// not for secrets.
pub(crate) fn random() -> u64 {
    let seed = *SEED.get_or_init(|| {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        h.write_u32(std::process::id());
        h.finish()
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut z = seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The alphabet of `rand.String` in apimachinery (no vowels, no digits easily confused),
/// which generated names and the pod-template-hash use.
const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `n` random characters from [`SAFE`], as in a `generateName` suffix.
pub(crate) fn random_suffix(n: usize) -> String {
    (0..n).map(|_| safe_char(random())).collect()
}

fn safe_char(v: u64) -> char {
    let i = usize::try_from(v % SAFE.len() as u64).unwrap_or(0);
    char::from(SAFE[i])
}

/// `n` characters from [`SAFE`] derived from `hash`, as the pod-template-hash label.
pub(crate) fn safe_encode(mut hash: u64, n: usize) -> String {
    (0..n)
        .map(|_| {
            let c = safe_char(hash);
            hash = (hash / SAFE.len() as u64) ^ hash.rotate_left(17);
            c
        })
        .collect()
}

/// A random version-4 UUID, as `metadata.uid`.
pub(crate) fn uuid() -> String {
    let a = random();
    let b = random();
    let hex = format!("{a:016x}{b:016x}");
    format!(
        "{}-{}-4{}-{}{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        ["8", "9", "a", "b"][usize::from(hex.as_bytes()[16] % 4)],
        &hex[17..20],
        &hex[20..32]
    )
}

/// A stable 64-bit FNV-1a hash of a JSON value with object keys sorted, so the same template
/// hashes the same whatever order its fields were written in.
pub(crate) fn stable_hash(value: &Value) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    hash_into(value, &mut h);
    h
}

fn feed(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

fn hash_into(value: &Value, h: &mut u64) {
    match value {
        Value::Object(map) => {
            feed(h, b"{");
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for k in keys {
                feed(h, k.as_bytes());
                feed(h, b":");
                if let Some(v) = map.get(k) {
                    hash_into(v, h);
                }
                feed(h, b",");
            }
            feed(h, b"}");
        }
        Value::Array(items) => {
            feed(h, b"[");
            for v in items {
                hash_into(v, h);
                feed(h, b",");
            }
            feed(h, b"]");
        }
        other => feed(h, other.to_string().as_bytes()),
    }
}

/// A 64-character lower-case hex string derived from `seed`, for container and image ids.
pub(crate) fn hex64(seed: &str) -> String {
    let mut out = String::with_capacity(64);
    for i in 0..4u8 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(i);
        for b in seed.bytes().chain([i]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

/// `v` as an object, made one (empty) when it is anything else.
pub(crate) fn object_mut(v: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(serde_json::Map::new());
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

/// Percent-decoding of a query component (`+` is a space), as `form_urlencoded` writes it.
pub(crate) fn url_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn times_round_trip() {
        let t = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_nanos(t), "2023-11-14T22:13:20.123456789Z");
        assert_eq!(parse_rfc3339(&rfc3339_nanos(t)), Some(t));
        assert_eq!(
            parse_rfc3339("2023-11-14T22:13:20Z"),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
    }

    #[test]
    fn decode() {
        assert_eq!(url_decode("a%3Db%2Cc+d"), "a=b,c d");
        assert_eq!(url_decode("100%"), "100%");
    }

    #[test]
    fn uuid_shape() {
        let u = uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(u.as_bytes()[14], b'4');
    }
}
