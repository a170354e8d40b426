//! A top-level string field of a JSON object, read from the first bytes of a body that may go
//! on past them: older runners send their token as `{"token": "..."}` in the body, and the
//! router must find it without holding the body back.

/// The string value of `field` at the top level of the JSON object that `prefix` holds whole;
/// `None` when it is not there, not a string, or the object does not end within `prefix`.
/// Other values are skipped whole, strings and nesting understood, so a `token` inside a
/// nested object is not taken. A field given twice counts as its last value, as the cell's
/// JSON parser (Ruby's) reads it: a router must not route by one token while the cell
/// authenticates another.
pub(crate) fn top_level_string(prefix: &[u8], field: &str) -> Option<String> {
    let mut at = skip_space(prefix, 0);
    if prefix.get(at) != Some(&b'{') {
        return None;
    }
    at += 1;
    let mut found = None;
    loop {
        at = skip_space(prefix, at);
        match prefix.get(at)? {
            b'}' => return found.flatten(),
            b',' => {
                at += 1;
                continue;
            }
            b'"' => {}
            _ => return None,
        }
        let (key, after) = string(prefix, at)?;
        at = skip_space(prefix, after);
        if prefix.get(at) != Some(&b':') {
            return None;
        }
        at = skip_space(prefix, at + 1);
        if key == field {
            found = Some(
                (prefix.get(at) == Some(&b'"'))
                    .then(|| string(prefix, at).map(|(value, _)| value))
                    .flatten(),
            );
        }
        at = skip_value(prefix, at)?;
    }
}

fn skip_space(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// The JSON string starting at `at` (its opening quote), unescaped, and the index after it.
fn string(bytes: &[u8], at: usize) -> Option<(String, usize)> {
    let mut end = at + 1;
    let mut escaped = false;
    loop {
        let byte = *bytes.get(end)?;
        if escaped {
            escaped = false;
        } else if byte == b'\\' {
            escaped = true;
        } else if byte == b'"' {
            break;
        }
        end += 1;
    }
    let raw = bytes.get(at..=end)?;
    let value: String = serde_json::from_slice(raw).ok()?;
    Some((value, end + 1))
}

/// The index after the JSON value starting at `at`.
fn skip_value(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => string(bytes, at).map(|(_, end)| end),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = string(bytes, i)?.1;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = at;
            while bytes
                .get(i)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace())
            {
                i += 1;
            }
            // A number or literal cut off by the prefix's end is not known to be whole.
            (i < bytes.len()).then_some(i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_top_level_field_only_and_within_the_prefix() {
        let body = br#"{"info": {"token": "nested"}, "n": 12, "list": ["a", {"token": "x"}], "token": "glrt-abc\u002d", "after": 1}"#;
        assert_eq!(
            top_level_string(body, "token").as_deref(),
            Some("glrt-abc-")
        );
        assert_eq!(top_level_string(&body[..60], "token"), None);
        // Found, but the object goes on past the prefix: another `token` may follow.
        assert_eq!(top_level_string(&body[..body.len() - 12], "token"), None);
        // Given twice: the last, as the cell reads it; a last that is not a string, none.
        assert_eq!(
            top_level_string(br#"{"token": "forged", "token": "real"}"#, "token").as_deref(),
            Some("real")
        );
        assert_eq!(
            top_level_string(br#"{"token": "forged", "token": 1}"#, "token"),
            None
        );
        assert_eq!(top_level_string(b"[1]", "token"), None);
        assert_eq!(top_level_string(br#"{"token": 5}"#, "token"), None);
        assert_eq!(
            top_level_string(br#"{"a": "}\"", "token": "t"}"#, "token").as_deref(),
            Some("t")
        );
        assert_eq!(top_level_string(b"", "token"), None);
    }
}
