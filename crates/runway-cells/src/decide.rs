//! One request against the rules: the first rule that matches, transforms and validates
//! decides; a request no rule takes goes to the legacy cell.

use base64::Engine as _;
use http::HeaderMap;
use routable_token::Claims;

use crate::body::top_level_string;
use crate::rules::{ClassifyType, Match, MatchType, Name, Rule, RuleAction, Rules, TransformType};
use crate::template::Values;

/// What a rule router sees of a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The path, without the query.
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    /// The first bytes of the body, read for a `json-body` rule; `None` when not read.
    pub body_prefix: Option<&'a [u8]>,
}

/// What the rules decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ask the topology for a cell.
    Classify { kind: ClassifyType, value: String },
    /// The legacy cell.
    Proxy,
}

impl Action {
    /// `X-Gitlab-Http-Router-Rule-Action`'s value.
    pub fn header_value(&self) -> &'static str {
        match self {
            Self::Classify { .. } => "classify",
            Self::Proxy => "proxy",
        }
    }
}

/// The decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The rule that decided; `None` when none did (the legacy cell).
    pub rule: Option<String>,
    pub action: Action,
    /// The claims its transform decoded.
    pub claims: Option<Claims>,
}

/// Why a rule did not decide, for `runway cells route`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    pub rule: String,
    pub reason: String,
}

impl Rules {
    /// Whether a rule reads the body (a `json-body` match): only then is its prefix read.
    pub fn reads_body(&self) -> bool {
        self.0.iter().any(|rule| {
            rule.matcher
                .as_ref()
                .is_some_and(|m| m.kind == MatchType::JsonBody)
        })
    }

    /// Whether the body's first bytes could change `decision` (made without them): a
    /// `json-body` rule comes before the rule that decided, or none decided. A request a
    /// header rule places is never held for its body.
    pub fn needs_body(&self, decision: &Decision) -> bool {
        let decided = decision
            .rule
            .as_ref()
            .and_then(|id| self.0.iter().position(|rule| &rule.id == id))
            .unwrap_or(self.0.len());
        self.0[..decided].iter().any(|rule| {
            rule.matcher
                .as_ref()
                .is_some_and(|m| m.kind == MatchType::JsonBody)
        })
    }

    /// The decision for `request`.
    pub fn decide(&self, request: &RequestView<'_>) -> Decision {
        self.decide_inner(request, None)
    }

    /// The decision for `request`, and why each rule before it did not decide.
    pub fn explain(&self, request: &RequestView<'_>) -> (Decision, Vec<Passed>) {
        let mut passed = Vec::new();
        let decision = self.decide_inner(request, Some(&mut passed));
        (decision, passed)
    }

    fn decide_inner(
        &self,
        request: &RequestView<'_>,
        mut passed: Option<&mut Vec<Passed>>,
    ) -> Decision {
        for rule in &self.0 {
            match apply(rule, request) {
                Ok(decision) => return decision,
                Err(reason) => {
                    if let Some(passed) = passed.as_deref_mut() {
                        passed.push(Passed {
                            rule: rule.id.clone(),
                            reason,
                        });
                    }
                }
            }
        }
        Decision {
            rule: None,
            action: Action::Proxy,
            claims: None,
        }
    }
}

/// The rule's decision, or why it makes none.
fn apply(rule: &Rule, request: &RequestView<'_>) -> Result<Decision, String> {
    let mut values = Values::default();
    if let Some(matcher) = &rule.matcher {
        matches(matcher, request, &mut values)?;
    }
    if let Some(transform) = &rule.transform {
        let inputs = transform
            .input
            .iter()
            .map(|t| {
                t.expand(&values)
                    .ok_or_else(|| format!("transform: {} has no value", t.as_str()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let claims = match transform.kind {
            TransformType::RoutableTokenPayload => {
                let length = inputs
                    .get(1)
                    .and_then(|l| usize::from_str_radix(l, 36).ok())
                    .ok_or("transform: the payload length is not base 36")?;
                routable_token::payload_claims(inputs.first().map_or("", String::as_str), length)
            }
            TransformType::Base64LineDelimited => {
                let text = inputs.first().map_or("", String::as_str);
                let bytes = LENIENT_URL_SAFE
                    .decode(text)
                    .or_else(|_| LENIENT_STANDARD.decode(text))
                    .map_err(|_| "transform: not base64".to_owned())?;
                let text =
                    String::from_utf8(bytes).map_err(|_| "transform: not text".to_owned())?;
                routable_token::lines_claims(&text)
            }
        }
        .map_err(|error| format!("transform: {error}"))?;
        values.decoded = Some((transform.output.as_str(), claims));
    }
    for check in &rule.exist {
        if check.expand(&values).is_none_or(|v| v.is_empty()) {
            return Err(format!("validate: {} does not exist", check.as_str()));
        }
    }
    let action = match &rule.action {
        RuleAction::Proxy => Action::Proxy,
        RuleAction::Classify { kind, value } => Action::Classify {
            kind: *kind,
            value: value
                .expand(&values)
                .ok_or_else(|| format!("classify: {} has no value", value.as_str()))?,
        },
    };
    Ok(Decision {
        rule: Some(rule.id.clone()),
        action,
        claims: values.decoded.map(|(_, claims)| claims),
    })
}

const LENIENT: base64::engine::GeneralPurposeConfig = base64::engine::GeneralPurposeConfig::new()
    .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent)
    .with_decode_allow_trailing_bits(true);
const LENIENT_URL_SAFE: base64::engine::GeneralPurpose =
    base64::engine::GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);
const LENIENT_STANDARD: base64::engine::GeneralPurpose =
    base64::engine::GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);

/// Whether the request has the match's subject (and its value matches), its captures kept.
fn matches(
    matcher: &Match,
    request: &RequestView<'_>,
    values: &mut Values<'_>,
) -> Result<(), String> {
    let subject: String = match (&matcher.kind, &matcher.name) {
        (MatchType::Path, _) => request.path.to_owned(),
        (MatchType::Header, Name::Exact(name)) => request
            .headers
            .get(name.as_str())
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| format!("no `{name}` header"))?
            .to_owned(),
        (MatchType::Header, Name::Pattern(pattern)) => {
            let (name, value) = request
                .headers
                .iter()
                .find(|(name, _)| pattern.is_match(name.as_str()))
                .ok_or("no header of such a name")?;
            if let Some(found) = pattern.captures(name.as_str()) {
                keep(pattern, &found, values);
            }
            value
                .to_str()
                .map_err(|_| "the header is not text")?
                .to_owned()
        }
        (MatchType::Cookie, name) => {
            let (cookie_name, value) = cookies(request.headers)
                .find(|(cookie, _)| match name {
                    Name::Exact(exact) => cookie == exact,
                    Name::Pattern(pattern) => pattern.is_match(cookie),
                    Name::None => false,
                })
                .ok_or("no such cookie")?;
            if let Name::Pattern(pattern) = name
                && let Some(found) = pattern.captures(cookie_name)
            {
                keep(pattern, &found, values);
            }
            value.to_owned()
        }
        (MatchType::JsonBody, Name::Exact(field)) => {
            let prefix = request.body_prefix.ok_or("the body was not read")?;
            top_level_string(prefix, field).ok_or_else(|| {
                format!(
                    "no `{field}` string at the top of a JSON body's first {} bytes",
                    prefix.len()
                )
            })?
        }
        _ => return Err("nothing to match".to_owned()),
    };
    if let Some(pattern) = &matcher.value {
        let found = pattern
            .captures(&subject)
            .ok_or("the value does not match")?;
        keep(pattern, &found, values);
    }
    Ok(())
}

fn keep(pattern: &regex::Regex, found: &regex::Captures<'_>, values: &mut Values<'_>) {
    for name in pattern.capture_names().flatten() {
        if let Some(value) = found.name(name) {
            values
                .captures
                .insert(name.to_owned(), value.as_str().to_owned());
        }
    }
}

/// Every cookie of every `Cookie` header, as (name, value).
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            Some((name.trim(), value.trim().trim_matches('"')))
        })
}
