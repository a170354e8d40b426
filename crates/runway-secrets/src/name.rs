//! Secret names: what a valid name is, and which names clash with environment variables.
//!
//! A secret reaches its instance as an environment variable of the same name, so a name must
//! be one a shell and every runtime accept: upper-case ASCII letters, digits and underscores,
//! not starting with a digit (`[A-Z_][A-Z0-9_]*`), as upstream Runway requires.
//!
//! Bounds and reservations:
//!
//! - At most [`MAX_NAME_LEN`] (255) characters. No real name comes close; the bound keeps
//!   names, and the store's index on them, small, and fits every system a name is handed to.
//! - [`RESERVED_NAMES`]: `PORT` (the port the instance must listen on), `K_SERVICE`,
//!   `K_REVISION` and `K_CONFIGURATION` (set by the platform, as Cloud Run and Knative do).
//!   The same list as the manifest's reserved environment variables
//!   (`runway_manifest::validate::RESERVED_ENV`), kept here to spare this crate the manifest's
//!   dependencies.
//! - [`RESERVED_PREFIX`]: any name starting with `RUNWAY_`, kept for the platform's own
//!   variables; `K_` too (Knative's), `PATH`, and `LD_` (the dynamic loader's: a secret must
//!   not decide which code a process runs).

use std::collections::BTreeSet;

/// The longest name allowed, in characters (all ASCII, so also bytes).
pub const MAX_NAME_LEN: usize = 255;

/// Names the platform sets itself.
pub const RESERVED_NAMES: [&str; 4] = ["PORT", "K_SERVICE", "K_REVISION", "K_CONFIGURATION"];

/// The prefix of the platform's own variables.
pub const RESERVED_PREFIX: &str = "RUNWAY_";

/// How many characters of an over-long name an error message shows.
const SHOWN: usize = 32;

/// Why a secret name is not valid. Each message says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NameError {
    /// The name is empty.
    #[error(
        "a secret name must not be empty: use upper-case letters, digits and underscores (e.g. DB_PASSWORD)"
    )]
    Empty,

    /// The name is longer than [`MAX_NAME_LEN`].
    #[error("secret name `{}…` is {len} characters long, at most {max} are allowed", start.escape_debug())]
    TooLong {
        /// The name's first characters.
        start: String,
        /// Its length in characters.
        len: usize,
        /// The limit.
        max: usize,
    },

    /// The name starts with a digit.
    #[error(
        "secret name `{}` starts with a digit, which an environment variable name cannot: \
         start it with a letter or an underscore (e.g. {suggestion})",
        name.escape_debug()
    )]
    LeadingDigit {
        /// The name as given.
        name: String,
        /// A valid name close to it.
        suggestion: String,
    },

    /// The name has a character other than `A-Z`, `0-9` and `_`.
    #[error(
        "secret name `{}` must be upper-case letters, digits and underscores (e.g. {suggestion})",
        name.escape_debug()
    )]
    Characters {
        /// The name as given.
        name: String,
        /// A valid name close to it.
        suggestion: String,
    },

    /// The platform sets a variable of this name itself.
    #[error("secret name `{name}` is reserved: {reason}")]
    Reserved {
        /// The name.
        name: String,
        /// Why, and by whom it is set.
        reason: &'static str,
    },
}

/// Checks that `name` is a valid secret name: see the module's documentation.
///
/// # Errors
/// The first rule it breaks, in the order: empty, too long, leading digit, characters,
/// reserved.
pub fn validate_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    let len = name.chars().count();
    if len > MAX_NAME_LEN {
        return Err(NameError::TooLong {
            start: name.chars().take(SHOWN).collect(),
            len,
            max: MAX_NAME_LEN,
        });
    }
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(NameError::LeadingDigit {
            name: name.to_owned(),
            suggestion: suggest(name),
        });
    }
    if !name
        .bytes()
        .all(|b| matches!(b, b'A'..=b'Z' | b'0'..=b'9' | b'_'))
    {
        return Err(NameError::Characters {
            name: name.to_owned(),
            suggestion: suggest(name),
        });
    }
    if let Some(reason) = reserved(name) {
        return Err(NameError::Reserved {
            name: name.to_owned(),
            reason,
        });
    }
    Ok(())
}

fn reserved(name: &str) -> Option<&'static str> {
    if name == "PORT" {
        Some("the platform sets PORT to the port the instance must listen on")
    } else if RESERVED_NAMES.contains(&name) || name.starts_with("K_") {
        Some(
            "the platform sets K_SERVICE, K_REVISION and K_CONFIGURATION, as Cloud Run does, and \
             keeps K_ for what Knative adds",
        )
    } else if name.starts_with(RESERVED_PREFIX) {
        Some("names starting with RUNWAY_ are kept for the platform's own variables")
    } else if name == "PATH" {
        Some("PATH says where the instance's programs are found; set it as a variable if needed")
    } else if name.starts_with("LD_") {
        Some("LD_ variables steer the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH)")
    } else {
        None
    }
}

/// A valid name close to `name`: upper-cased, every other character an underscore, a leading
/// digit behind an underscore; `DB_PASSWORD` when that is still not valid.
fn suggest(name: &str) -> String {
    let mut out: String = name
        .chars()
        .take(MAX_NAME_LEN - 1)
        .map(|c| match c.to_ascii_uppercase() {
            c @ ('A'..='Z' | '0'..='9' | '_') => c,
            _ => '_',
        })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    if validate_name(&out).is_ok() {
        out
    } else {
        "DB_PASSWORD".to_owned()
    }
}

/// The secret names that are also environment variable names, sorted, each once.
///
/// A secret reaches the instance as a variable of its name, so a clash leaves it unclear
/// which value wins: it is an error, reported for every clash at once.
///
/// # Errors
/// The clashing names.
pub fn check_clashes<S, E>(secret_names: S, env_var_names: E) -> Result<(), Vec<String>>
where
    S: IntoIterator,
    S::Item: AsRef<str>,
    E: IntoIterator,
    E::Item: AsRef<str>,
{
    let env: BTreeSet<String> = env_var_names
        .into_iter()
        .map(|n| n.as_ref().to_owned())
        .collect();
    let clashes: BTreeSet<String> = secret_names
        .into_iter()
        .filter(|n| env.contains(n.as_ref()))
        .map(|n| n.as_ref().to_owned())
        .collect();
    if clashes.is_empty() {
        Ok(())
    } else {
        Err(clashes.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn valid_names() {
        for name in [
            "DB_PASSWORD",
            "A",
            "_",
            "_PRIVATE",
            "API_KEY_2",
            "X9",
            "PORTS",
            "MY_PORT",
            "RUNWAY",
            "KSERVICE",
            &"A".repeat(MAX_NAME_LEN),
        ] {
            assert_eq!(validate_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn invalid_names_say_what_was_expected() {
        let cases: &[(&str, &str)] = &[
            (
                "",
                "a secret name must not be empty: use upper-case letters, digits and underscores (e.g. DB_PASSWORD)",
            ),
            (
                "db-password",
                "secret name `db-password` must be upper-case letters, digits and underscores (e.g. DB_PASSWORD)",
            ),
            (
                "Api.Key",
                "secret name `Api.Key` must be upper-case letters, digits and underscores (e.g. API_KEY)",
            ),
            (
                "DB PASSWORD",
                "secret name `DB PASSWORD` must be upper-case letters, digits and underscores (e.g. DB_PASSWORD)",
            ),
            (
                "CLÉ",
                "secret name `CLÉ` must be upper-case letters, digits and underscores (e.g. CL_)",
            ),
            (
                "A\nB",
                "secret name `A\\nB` must be upper-case letters, digits and underscores (e.g. A_B)",
            ),
            (
                "port",
                "secret name `port` must be upper-case letters, digits and underscores (e.g. DB_PASSWORD)",
            ),
            (
                "1PASSWORD",
                "secret name `1PASSWORD` starts with a digit, which an environment variable name cannot: start it with a letter or an underscore (e.g. _1PASSWORD)",
            ),
            (
                "9-lives",
                "secret name `9-lives` starts with a digit, which an environment variable name cannot: start it with a letter or an underscore (e.g. _9_LIVES)",
            ),
            (
                "PORT",
                "secret name `PORT` is reserved: the platform sets PORT to the port the instance must listen on",
            ),
            (
                "K_REVISION",
                "secret name `K_REVISION` is reserved: the platform sets K_SERVICE, K_REVISION and K_CONFIGURATION, as Cloud Run does, and keeps K_ for what Knative adds",
            ),
            (
                "RUNWAY_TOKEN",
                "secret name `RUNWAY_TOKEN` is reserved: names starting with RUNWAY_ are kept for the platform's own variables",
            ),
            (
                "RUNWAY_",
                "secret name `RUNWAY_` is reserved: names starting with RUNWAY_ are kept for the platform's own variables",
            ),
        ];
        for (name, message) in cases {
            let err = validate_name(name).unwrap_err();
            assert_eq!(err.to_string(), *message, "{name:?}");
        }
        for name in RESERVED_NAMES.into_iter().chain([
            "K_ANYTHING",
            "PATH",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "RUNWAY_X",
        ]) {
            assert!(
                matches!(validate_name(name), Err(NameError::Reserved { .. })),
                "{name}"
            );
        }
        for name in ["PATHS", "OLD_PATH", "KEY", "LDAP_URL"] {
            assert_eq!(validate_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn too_long() {
        let name = "A".repeat(MAX_NAME_LEN + 1);
        let err = validate_name(&name).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "secret name `{}…` is 256 characters long, at most 255 are allowed",
                "A".repeat(32)
            )
        );
    }

    #[test]
    fn clashes_are_all_named_once_and_sorted() {
        assert_eq!(check_clashes(["A", "B"], ["C", "D"]), Ok(()));
        assert_eq!(check_clashes(Vec::<String>::new(), ["C"]), Ok(()));
        assert_eq!(
            check_clashes(
                vec![
                    "Z_KEY".to_owned(),
                    "DB_URL".to_owned(),
                    "TOKEN".to_owned(),
                    "DB_URL".to_owned()
                ],
                &["TOKEN", "DB_URL", "Z_KEY", "OTHER"]
            ),
            Err(vec![
                "DB_URL".to_owned(),
                "TOKEN".to_owned(),
                "Z_KEY".to_owned()
            ])
        );
        // Names are compared exactly: environment variables are case-sensitive.
        assert_eq!(check_clashes(["TOKEN"], ["token"]), Ok(()));
    }

    proptest! {
        #[test]
        fn suggestions_are_valid(name in "\\PC{1,300}") {
            match validate_name(&name) {
                Ok(()) => {}
                Err(NameError::LeadingDigit { suggestion, .. } | NameError::Characters { suggestion, .. }) => {
                    prop_assert_eq!(validate_name(&suggestion), Ok(()));
                }
                Err(_) => {}
            }
        }

        #[test]
        fn the_pattern_is_exactly_what_is_accepted(name in "[A-Z_][A-Z0-9_]{0,40}") {
            let expected = !(RESERVED_NAMES.contains(&name.as_str())
                || name.starts_with(RESERVED_PREFIX)
                || name.starts_with("K_")
                || name.starts_with("LD_")
                || name == "PATH");
            prop_assert_eq!(validate_name(&name).is_ok(), expected);
        }
    }
}
