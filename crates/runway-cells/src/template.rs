//! `${name}` templates: a rule's transform inputs, classification value and checks name a
//! match's captures (`${payload}`) or a transform's decoded claims (`${decoded.c}`).

use std::collections::HashMap;

use routable_token::Claims;

/// One part of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Capture(String),
    Claim { output: String, key: String },
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
    source: String,
}

/// What a template reads: the match's captures and the transform's claims.
#[derive(Debug, Default)]
pub(crate) struct Values<'a> {
    pub(crate) captures: HashMap<String, String>,
    pub(crate) decoded: Option<(&'a str, Claims)>,
}

impl Template {
    /// Parses `text`; `${` without its `}`, or an empty or malformed reference, is an error.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            if start > 0 {
                parts.push(Part::Text(rest[..start].to_owned()));
            }
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("`${{` without its `}}` in `{text}`"))?;
            let reference = &after[..end];
            let valid = |name: &str| {
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            };
            let part = match reference.split_once('.') {
                Some((output, key)) if valid(output) && valid(key) => Part::Claim {
                    output: output.to_owned(),
                    key: key.to_owned(),
                },
                None if valid(reference) => Part::Capture(reference.to_owned()),
                _ => {
                    return Err(format!(
                        "`${{{reference}}}` is not a reference: expected `${{capture}}` or \
                         `${{output.claim}}`"
                    ));
                }
            };
            parts.push(part);
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        Ok(Self {
            parts,
            source: text.to_owned(),
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The first reference not among `captures` and `output`, for a rule's check at load.
    pub(crate) fn unknown_reference(
        &self,
        captures: &[String],
        output: Option<&str>,
    ) -> Option<String> {
        self.parts.iter().find_map(|part| match part {
            Part::Text(_) => None,
            Part::Capture(name) => (!captures.contains(name)).then(|| format!("${{{name}}}")),
            Part::Claim { output: out, key } => {
                (Some(out.as_str()) != output).then(|| format!("${{{out}.{key}}}"))
            }
        })
    }

    /// The text with every reference filled in; `None` when one has no value (a capture that
    /// did not take part in the match, a claim the token does not carry).
    pub(crate) fn expand(&self, values: &Values<'_>) -> Option<String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Capture(name) => out.push_str(values.captures.get(name)?),
                Part::Claim { output, key } => {
                    let (name, claims) = values.decoded.as_ref()?;
                    if name != output {
                        return None;
                    }
                    out.push_str(&claims.get(key)?.to_string());
                }
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn references_and_text() {
        let template = Template::parse("cell-${decoded.c}/${x}").unwrap();
        let mut values = Values::default();
        values.captures.insert("x".into(), "y".into());
        values.decoded = Some(("decoded", Claims::new().with("c", 7)));
        assert_eq!(template.expand(&values).as_deref(), Some("cell-7/y"));
        assert_eq!(
            template.unknown_reference(&["x".into()], Some("decoded")),
            None
        );
        assert_eq!(
            template.unknown_reference(&[], Some("decoded")).as_deref(),
            Some("${x}")
        );
        values.decoded = Some(("decoded", Claims::new()));
        assert_eq!(template.expand(&values), None);
        assert!(Template::parse("${a").is_err());
        assert!(Template::parse("${}").is_err());
        assert!(Template::parse("${a.b.c}").is_err());
    }
}
