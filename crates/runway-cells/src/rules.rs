//! Rules in GitLab's HTTP router format, unchanged: a JSON list (or one rule), evaluated top to
//! bottom, the first that matches decides. A rule is `match` (optional: without one it matches
//! every request), `transform` (optional), `validate` (optional) and `action`: `classify`
//! (with `classify.type` and `classify.value`) or `proxy` (to the legacy cell).
//!
//! Checked when the file is read, so a mistake stops the router from starting rather than
//! sending traffic astray: unknown fields, a regular expression that does not compile, a
//! `${...}` naming a capture the match does not have or an output no transform makes, a
//! transform given the wrong number of inputs, a classification without its value.

use std::path::Path;

use regex::Regex;
use serde::Deserialize;

use crate::template::Template;

/// Where a rule reads its subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatchType {
    /// A request header (its name without regard to case).
    Header,
    /// A cookie, named exactly (`name`) or by a regular expression (`regex_name`).
    Cookie,
    /// The request's path.
    Path,
    /// Runway's own, opt-in: a top-level string field of a JSON request body, read from its
    /// first bytes only (older runners send their token as `token` in the body of
    /// `POST /api/v4/runners` and `/api/v4/jobs/request`). The body is still forwarded whole.
    JsonBody,
}

/// How a transform reads its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransformType {
    /// A routable token's base64 text and its base-36 length (`${payload}`,
    /// `${payload_length}`), decoded to its claims.
    RoutableTokenPayload,
    /// Base64 of `key:value` lines.
    Base64LineDelimited,
}

/// What a classification asks the topology for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ClassifyType {
    /// The cell of this id.
    CellId,
    /// The cell whose session prefix this is (`cell-1`).
    SessionPrefix,
    /// The first cell.
    FirstCell,
}

impl ClassifyType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CellId => "CELL_ID",
            Self::SessionPrefix => "SESSION_PREFIX",
            Self::FirstCell => "FIRST_CELL",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ActionType {
    Classify,
    Proxy,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: String,
    #[serde(rename = "match")]
    matcher: Option<RawMatch>,
    transform: Option<RawTransform>,
    validate: Option<RawValidate>,
    action: ActionType,
    classify: Option<RawClassify>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMatch {
    #[serde(rename = "type")]
    kind: MatchType,
    name: Option<String>,
    regex_name: Option<String>,
    #[serde(rename = "regexValue")]
    regex_value_camel: Option<String>,
    regex_value: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTransform {
    #[serde(rename = "type")]
    kind: TransformType,
    input: Vec<String>,
    output: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawValidate {
    #[serde(default)]
    exist: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClassify {
    #[serde(rename = "type")]
    kind: ClassifyType,
    value: Option<String>,
}

/// How a rule picks its subject's name.
#[derive(Debug, Clone)]
pub(crate) enum Name {
    /// Exactly this (a header's without regard to case).
    Exact(String),
    /// Any name this matches (an older file's `regex_name`).
    Pattern(Regex),
    /// None: a path has no name.
    None,
}

/// A rule's `match`.
#[derive(Debug, Clone)]
pub(crate) struct Match {
    pub(crate) kind: MatchType,
    pub(crate) name: Name,
    /// Without one, the subject's presence is the match.
    pub(crate) value: Option<Regex>,
}

/// A rule's `transform`.
#[derive(Debug, Clone)]
pub(crate) struct Transform {
    pub(crate) kind: TransformType,
    pub(crate) input: Vec<Template>,
    pub(crate) output: String,
}

/// A rule's `action`.
#[derive(Debug, Clone)]
pub(crate) enum RuleAction {
    Classify { kind: ClassifyType, value: Template },
    Proxy,
}

/// One rule, checked.
#[derive(Debug, Clone)]
pub struct Rule {
    pub(crate) id: String,
    pub(crate) matcher: Option<Match>,
    pub(crate) transform: Option<Transform>,
    pub(crate) exist: Vec<Template>,
    pub(crate) action: RuleAction,
}

impl Rule {
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = RawRule::deserialize(deserializer)?;
        let id = raw.id.clone();
        Rule::check(raw)
            .map_err(|message| serde::de::Error::custom(format!("rule `{id}`: {message}")))
    }
}

fn regex(field: &str, pattern: &str) -> Result<Regex, String> {
    // JavaScript's and Go's `(?<name>...)` and `(?P<name>...)` are both this crate's.
    Regex::new(pattern).map_err(|error| {
        let detail = error.to_string();
        let last = detail.lines().last().unwrap_or_default().trim().to_owned();
        format!("{field}: not a regular expression this router can run: {last}")
    })
}

fn template(field: &str, text: &str) -> Result<Template, String> {
    Template::parse(text).map_err(|message| format!("{field}: {message}"))
}

impl Rule {
    fn check(raw: RawRule) -> Result<Self, String> {
        let matcher = raw.matcher.map(check_match).transpose()?;
        let captures: Vec<String> = matcher
            .iter()
            .flat_map(|m| {
                let names = |r: &Regex| {
                    r.capture_names()
                        .flatten()
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                };
                let mut all = m.value.as_ref().map(names).unwrap_or_default();
                if let Name::Pattern(pattern) = &m.name {
                    all.extend(names(pattern));
                }
                all
            })
            .collect();
        let transform = match raw.transform {
            None => None,
            Some(t) => {
                let wanted = match t.kind {
                    TransformType::RoutableTokenPayload => 2,
                    TransformType::Base64LineDelimited => 1,
                };
                if t.input.len() != wanted {
                    return Err(format!(
                        "transform.input: {} inputs, expected {wanted} for this type",
                        t.input.len()
                    ));
                }
                let input = t
                    .input
                    .iter()
                    .enumerate()
                    .map(|(i, text)| template(&format!("transform.input[{i}]"), text))
                    .collect::<Result<Vec<_>, _>>()?;
                for (i, input) in input.iter().enumerate() {
                    if let Some(name) = input.unknown_reference(&captures, None) {
                        return Err(unknown(
                            &format!("transform.input[{i}]"),
                            &name,
                            &captures,
                            None,
                        ));
                    }
                }
                if t.output.is_empty() || t.output.contains('.') {
                    return Err("transform.output: expected a name, e.g. `decoded`".to_owned());
                }
                Some(Transform {
                    kind: t.kind,
                    input,
                    output: t.output,
                })
            }
        };
        let output = transform.as_ref().map(|t| t.output.as_str());
        let exist = raw
            .validate
            .map(|v| v.exist)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, text)| {
                let field = format!("validate.exist[{i}]");
                let parsed = template(&field, text)?;
                match parsed.unknown_reference(&captures, output) {
                    Some(name) => Err(unknown(&field, &name, &captures, output)),
                    None => Ok(parsed),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let action = match (raw.action, raw.classify) {
            (ActionType::Proxy, None) => RuleAction::Proxy,
            (ActionType::Proxy, Some(_)) => {
                return Err("classify: given, but the action is `proxy`".to_owned());
            }
            (ActionType::Classify, None) => {
                return Err("classify: missing: the action `classify` needs `classify.type` and `classify.value`".to_owned());
            }
            (ActionType::Classify, Some(c)) => {
                let value = match (c.kind, c.value) {
                    (_, Some(value)) => template("classify.value", &value)?,
                    (ClassifyType::FirstCell, None) => template("classify.value", "")?,
                    (_, None) => {
                        return Err(format!(
                            "classify.value: missing: {} needs a value, e.g. `${{decoded.c}}`",
                            c.kind.as_str()
                        ));
                    }
                };
                if let Some(name) = value.unknown_reference(&captures, output) {
                    return Err(unknown("classify.value", &name, &captures, output));
                }
                RuleAction::Classify {
                    kind: c.kind,
                    value,
                }
            }
        };
        Ok(Self {
            id: raw.id,
            matcher,
            transform,
            exist,
            action,
        })
    }
}

fn unknown(field: &str, name: &str, captures: &[String], output: Option<&str>) -> String {
    let mut known: Vec<String> = captures.iter().map(|c| format!("${{{c}}}")).collect();
    if let Some(output) = output {
        known.push(format!("${{{output}.<claim>}}"));
    }
    let known = if known.is_empty() {
        "none: the rule has no named capture and no transform".to_owned()
    } else {
        known.join(", ")
    };
    format!("{field}: {name} names nothing this rule makes (it makes {known})")
}

fn check_match(raw: RawMatch) -> Result<Match, String> {
    let value = match (raw.regex_value_camel, raw.regex_value) {
        (Some(_), Some(_)) => {
            return Err("match: give `regexValue` or `regex_value`, not both".to_owned());
        }
        (Some(v), None) => Some(regex("match.regexValue", &v)?),
        (None, Some(v)) => Some(regex("match.regex_value", &v)?),
        (None, None) => None,
    };
    let name = match (raw.kind, raw.name, raw.regex_name) {
        (_, Some(_), Some(_)) => {
            return Err("match: give `name` or `regex_name`, not both".to_owned());
        }
        (MatchType::Path, None, None) => Name::None,
        (MatchType::Path, _, _) => {
            return Err("match: a `path` match has no name".to_owned());
        }
        (MatchType::Header, Some(name), None) => Name::Exact(name.to_ascii_lowercase()),
        (MatchType::Cookie | MatchType::JsonBody, Some(name), None) => Name::Exact(name),
        (MatchType::Cookie, None, Some(pattern)) => {
            // A cookie's whole name: `_gitlab_session(_[0-9a-f]+)?` is not `x_gitlab_session`.
            Name::Pattern(regex("match.regex_name", &format!("^(?:{pattern})$"))?)
        }
        (MatchType::Header, None, Some(pattern)) => {
            // A header's whole name, without regard to case.
            Name::Pattern(regex("match.regex_name", &format!("(?i)^(?:{pattern})$"))?)
        }
        (_, None, Some(_)) => {
            return Err(
                "match.regex_name: only a header's or a cookie's name may be a pattern".to_owned(),
            );
        }
        (kind, None, None) => {
            return Err(format!(
                "match.name: missing: a `{}` match names its {}",
                match kind {
                    MatchType::Header => "header",
                    MatchType::Cookie => "cookie",
                    _ => "json-body",
                },
                match kind {
                    MatchType::JsonBody => "field",
                    MatchType::Header => "header",
                    _ => "cookie",
                }
            ));
        }
    };
    if raw.kind == MatchType::Path && value.is_none() {
        return Err("match.regexValue: missing: a `path` match needs one".to_owned());
    }
    Ok(Match {
        kind: raw.kind,
        name,
        value,
    })
}

/// An error reading a rule or topology file: where, and what.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}{}: {key}: {message}", location(*.line, *.column))]
    Invalid {
        path: String,
        line: Option<u64>,
        column: Option<u64>,
        key: String,
        message: String,
    },
}

fn location(line: Option<u64>, column: Option<u64>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(":{line}:{column}"),
        (Some(line), None) => format!(":{line}"),
        _ => String::new(),
    }
}

/// The text of the file at `path`.
pub(crate) fn read(path: &Path) -> Result<String, FileError> {
    std::fs::read_to_string(path).map_err(|source| FileError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Parses `text` (JSON, or YAML) as `T`, errors naming `path`, the line and the key path.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(
    path: &Path,
    text: &str,
) -> Result<T, FileError> {
    let mut key = String::new();
    serde_saphyr::with_deserializer_from_str(text, |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            key = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let at = e.location();
        let message = e.to_string();
        FileError::Invalid {
            path: path.display().to_string(),
            line: at.as_ref().map(serde_saphyr::Location::line),
            column: at.as_ref().map(serde_saphyr::Location::column),
            key: if key.is_empty() { ".".to_owned() } else { key },
            message: message.lines().next().unwrap_or_default().to_owned(),
        }
    })
}

/// The rules of a file, in order.
#[derive(Debug, Clone, Default)]
pub struct Rules(pub(crate) Vec<Rule>);

impl Rules {
    /// Reads the rule file at `path`: a list of rules, or one.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        Self::parse(path, &read(path)?)
    }

    /// Parses rules as read from `path`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, FileError> {
        let trimmed = text.trim_start();
        let rules: Vec<Rule> = if trimmed.starts_with('[') || trimmed.starts_with('-') {
            parse(path, text)?
        } else {
            vec![parse::<Rule>(path, text)?]
        };
        let mut seen = std::collections::HashSet::new();
        for (index, rule) in rules.iter().enumerate() {
            if !seen.insert(rule.id.as_str()) {
                return Err(FileError::Invalid {
                    path: path.display().to_string(),
                    line: None,
                    column: None,
                    key: format!("[{index}].id"),
                    message: format!(
                        "rule `{}` twice: ids name a rule in metrics and logs",
                        rule.id
                    ),
                });
            }
        }
        Ok(Self(rules))
    }

    /// The rule file's text as JSON (it may be YAML), to be carried in a route table.
    pub fn to_json(path: &Path, text: &str) -> Result<serde_json::Value, FileError> {
        parse(path, text)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
