//! CPU and memory quantities as Kubernetes and Cloud Run write them: `1000m`, `2`, `0.5`,
//! `512Mi`, `8G`, `1.5Gi`.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A quantity as written in the manifest. YAML numbers (`cpu: 2`) are accepted and kept as their
/// text; whether the text parses is checked by validation, so that a bad value is reported with
/// every other error rather than stopping the parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity(String);

impl Quantity {
    /// A quantity from its text.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The quantity in thousandths of a CPU (`1000m` and `1` are both 1000).
    pub fn cpu_millis(&self) -> Result<u64, QuantityError> {
        let (number, suffix) = split(&self.0)?;
        let scale: f64 = match suffix {
            "m" => 1.0,
            "" => 1000.0,
            "k" => 1_000_000.0,
            _ => {
                return Err(QuantityError::Suffix {
                    suffix: suffix.to_owned(),
                    kind: "cpu",
                });
            }
        };
        finite_integer(number * scale)
    }

    /// The quantity in bytes (`512Mi` is 536870912, `8G` is 8000000000).
    pub fn bytes(&self) -> Result<u64, QuantityError> {
        let (number, suffix) = split(&self.0)?;
        let scale: f64 = match suffix {
            "" => 1.0,
            "k" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            "T" => 1e12,
            "P" => 1e15,
            "Ki" => 1024.0,
            "Mi" => 1024.0 * 1024.0,
            "Gi" => 1024.0 * 1024.0 * 1024.0,
            "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
            "Pi" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
            _ => {
                return Err(QuantityError::Suffix {
                    suffix: suffix.to_owned(),
                    kind: "memory",
                });
            }
        };
        finite_integer(number * scale)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a quantity does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not start with a non-negative decimal number.
    #[error("`{text}` is not a number followed by an optional unit")]
    Number {
        /// The text as written.
        text: String,
    },
    /// The unit is not one this kind of quantity takes.
    #[error("unknown {kind} unit `{suffix}`")]
    Suffix {
        /// The unit as written.
        suffix: String,
        /// `cpu` or `memory`.
        kind: &'static str,
    },
    /// The number is too large, or has a fraction smaller than the unit can hold.
    #[error("out of range")]
    Range,
}

fn split(text: &str) -> Result<(f64, &str), QuantityError> {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(end);
    // `parse::<f64>` takes "inf", "1e3" and "-1"; the scan above has already refused those.
    let valid = !number.is_empty() && number != "." && number.matches('.').count() <= 1;
    match number.parse::<f64>() {
        Ok(n) if valid => Ok((n, suffix)),
        _ => Err(QuantityError::Number {
            text: text.to_owned(),
        }),
    }
}

fn finite_integer(value: f64) -> Result<u64, QuantityError> {
    // u64::MAX as f64 rounds up, so compare with a strict bound well inside it.
    if !value.is_finite() || value >= 1.8e19 || value.fract() != 0.0 {
        return Err(QuantityError::Range);
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(value as u64)
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Text(String),
            Int(u64),
            Float(f64),
        }
        Ok(match Repr::deserialize(deserializer)? {
            Repr::Text(text) => Self(text),
            Repr::Int(n) => Self(n.to_string()),
            Repr::Float(n) => Self(n.to_string()),
        })
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A quantity: a number with an optional unit (`m` for CPU; `k`, `M`, `G`, `Ki`, `Mi`, `Gi` and the like for memory).",
            "type": ["string", "number"],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu() {
        assert_eq!(Quantity::new("1000m").cpu_millis(), Ok(1000));
        assert_eq!(Quantity::new("2").cpu_millis(), Ok(2000));
        assert_eq!(Quantity::new("0.5").cpu_millis(), Ok(500));
        assert_eq!(Quantity::new("250m").cpu_millis(), Ok(250));
        assert!(Quantity::new("2Gi").cpu_millis().is_err());
        assert!(Quantity::new("0.0001").cpu_millis().is_err());
        assert!(Quantity::new("-1").cpu_millis().is_err());
        assert!(Quantity::new("").cpu_millis().is_err());
        assert!(Quantity::new("m").cpu_millis().is_err());
    }

    #[test]
    fn memory() {
        assert_eq!(Quantity::new("512Mi").bytes(), Ok(512 * 1024 * 1024));
        assert_eq!(Quantity::new("8G").bytes(), Ok(8_000_000_000));
        assert_eq!(Quantity::new("1.5Gi").bytes(), Ok(1_610_612_736));
        assert_eq!(Quantity::new("1024").bytes(), Ok(1024));
        assert!(Quantity::new("512MB").bytes().is_err());
        assert!(Quantity::new("1e9").bytes().is_err());
        assert!(Quantity::new("inf").bytes().is_err());
        assert!(Quantity::new("1.2.3Mi").bytes().is_err());
        assert!(Quantity::new("99999999999999999999Pi").bytes().is_err());
    }
}
