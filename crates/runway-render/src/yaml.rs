//! JSON values to YAML text, in the values' own key order.
//!
//! saphyr's emitter quotes what YAML 1.2 would read as something other than a string. The
//! readers of our files (kubectl and Helm, through `sigs.k8s.io/yaml`) speak YAML 1.1, which also
//! reads `y`, `n`, `1_000`, `0b101` and dates as non-strings; those are quoted here too.

use std::borrow::Cow;

use saphyr::{Mapping, Scalar, ScalarStyle, Yaml, YamlEmitter};
use serde_json::Value;

/// One YAML document, ending with a line break and without a `---` line.
pub(crate) fn document(value: &Value) -> String {
    let mut out = String::new();
    // The emitter fails only when its writer does, and writing to a `String` cannot fail.
    YamlEmitter::new(&mut out)
        .dump(&to_yaml(value))
        .expect("writing to a String cannot fail");
    let mut text = match out.strip_prefix("---\n") {
        Some(rest) => rest.to_owned(),
        None => out,
    };
    text.push('\n');
    text
}

/// The value as a saphyr node.
fn to_yaml(value: &Value) -> Yaml<'static> {
    match value {
        Value::Null => Yaml::Value(Scalar::Null),
        Value::Bool(b) => Yaml::Value(Scalar::Boolean(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Yaml::Value(Scalar::Integer(i)),
            None => Yaml::Value(Scalar::FloatingPoint(n.as_f64().unwrap_or(f64::NAN).into())),
        },
        Value::String(s) => string(s),
        Value::Array(items) => Yaml::Sequence(items.iter().map(to_yaml).collect()),
        Value::Object(map) => {
            let mut mapping = Mapping::new();
            for (k, v) in map {
                mapping.insert(string(k), to_yaml(v));
            }
            Yaml::Mapping(mapping)
        }
    }
}

/// A string node: double-quoted when YAML 1.1 would read it as something else, otherwise left
/// to the emitter, which quotes what YAML 1.2 would misread.
fn string(s: &str) -> Yaml<'static> {
    if yaml11_non_string(s) {
        // Only letters, digits and `_.+-:` reach here, so nothing needs escaping.
        Yaml::Representation(Cow::Owned(s.to_owned()), ScalarStyle::DoubleQuoted, None)
    } else {
        Yaml::Value(Scalar::String(Cow::Owned(s.to_owned())))
    }
}

/// Whether a YAML 1.1 reader would take the plain scalar `s` for a boolean, a null, a number or
/// a timestamp. Errs towards `true`: a needless pair of quotes is harmless.
fn yaml11_non_string(s: &str) -> bool {
    const WORDS: [&str; 24] = [
        "y", "Y", "n", "N", "yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false",
        "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", "null", "Null",
    ];
    let numeric_start = match s.as_bytes() {
        [first, ..] if first.is_ascii_digit() => true,
        [b'+' | b'-' | b'.', second, ..] => second.is_ascii_digit(),
        _ => false,
    };
    WORDS.contains(&s)
        || s == "NULL"
        || s == "~"
        || (numeric_start
            && s.chars()
                .all(|c| c.is_ascii_hexdigit() || "xXoObB_.+-:".contains(c)))
}

#[cfg(test)]
mod tests {
    use saphyr::LoadableYamlNode;
    use serde_json::{Map, json};

    use super::*;

    /// The value a YAML node holds, as JSON.
    fn to_json(node: &Yaml<'_>) -> Value {
        match node {
            Yaml::Value(Scalar::Null) => Value::Null,
            Yaml::Value(Scalar::Boolean(b)) => json!(b),
            Yaml::Value(Scalar::Integer(i)) => json!(i),
            Yaml::Value(Scalar::FloatingPoint(f)) => json!(f.into_inner()),
            Yaml::Value(Scalar::String(s)) => json!(s),
            Yaml::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
            Yaml::Mapping(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| match to_json(k) {
                        Value::String(k) => (k, to_json(v)),
                        other => panic!("non-string key {other}"),
                    })
                    .collect::<Map<_, _>>(),
            ),
            other => panic!("unexpected node {other:?}"),
        }
    }

    const TRICKY: [&str; 26] = [
        "8080",
        "true",
        "",
        "false",
        "null",
        "~",
        "y",
        "N",
        "yes",
        "off",
        "1.5",
        "1e3",
        "0x1F",
        "0o17",
        "0b101",
        "1_000",
        "2024-05-01",
        "+1",
        "-1",
        ".5",
        "1:30",
        "25%",
        " padded ",
        "a: b",
        "#hash",
        "line\nbreak",
    ];

    #[test]
    fn strings_that_look_like_other_things_round_trip() {
        let env: Vec<Value> = TRICKY
            .iter()
            .map(|s| json!({"name": s, "value": s}))
            .collect();
        let value = json!({"env": env, "8080": "key that looks like a number", "num": 1, "n": "key that YAML 1.1 reads as false", "b": true});
        let text = document(&value);
        let parsed = Yaml::load_from_str(&text).unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(to_json(&parsed[0]), value, "{text}");
        for needle in [
            "\"8080\"",
            "\"true\"",
            "\"\"",
            "\"y\"",
            "\"2024-05-01\"",
            "\"1_000\"",
        ] {
            assert!(text.contains(needle), "{needle} not quoted in\n{text}");
        }
        assert!(
            text.contains("num: 1\n") && text.contains("\"n\": key") && text.contains("b: true\n"),
            "{text}"
        );
    }

    #[test]
    fn ordinary_strings_stay_plain() {
        let text =
            document(&json!({"cpu": "1000m", "memory": "512Mi", "image": "a/b:1.2", "s": "25%"}));
        assert_eq!(
            text,
            "cpu: 1000m\nmemory: 512Mi\nimage: \"a/b:1.2\"\ns: 25%\n"
        );
    }
}
