//! Label and field selectors, as `labelSelector` and `fieldSelector` query parameters.

use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector: every requirement must hold. Empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(pub(crate) Vec<Requirement>);

impl LabelSelector {
    /// Parses `a=b,c!=d,e,!f,g in (h,i),j notin (k)`.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            out.push(parse_requirement(part)?);
        }
        Ok(Self(out))
    }

    /// A `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    pub(crate) fn from_object(sel: &Value) -> Self {
        let mut out = Vec::new();
        if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                out.push(Requirement::Equals(
                    k.clone(),
                    v.as_str().unwrap_or("").to_owned(),
                ));
            }
        }
        for expr in sel
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = expr
                .get("key")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let values: Vec<String> = expr
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            match expr.get("operator").and_then(Value::as_str) {
                Some("In") => out.push(Requirement::In(key, values)),
                Some("NotIn") => out.push(Requirement::NotIn(key, values)),
                Some("Exists") => out.push(Requirement::Exists(key)),
                Some("DoesNotExist") => out.push(Requirement::NotExists(key)),
                _ => {}
            }
        }
        Self(out)
    }

    /// A Service's `spec.selector` map.
    pub(crate) fn from_map(map: &serde_json::Map<String, Value>) -> Self {
        Self(
            map.iter()
                .map(|(k, v)| Requirement::Equals(k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect(),
        )
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
        })
    }

    /// The selector as `kubectl` prints it (`a=b,c in (d,e)`), as a Scale's `status.selector`.
    pub(crate) fn to_query(&self) -> String {
        self.0
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::NotExists(k) => format!("!{k}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_requirement(part: &str) -> Result<Requirement, String> {
    let bad = || format!("unable to parse requirement: {part:?}");
    let set = |rest: &str| -> Result<Vec<String>, String> {
        let rest = rest.trim();
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(bad)?;
        Ok(inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect())
    };
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::NotExists(key.trim().to_owned()));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(
            k.trim().to_owned(),
            v.trim().to_owned(),
        ));
    }
    if let Some((k, v)) = part.split_once("==") {
        return Ok(Requirement::Equals(
            k.trim().to_owned(),
            v.trim().to_owned(),
        ));
    }
    if let Some((k, v)) = part.split_once('=') {
        return Ok(Requirement::Equals(
            k.trim().to_owned(),
            v.trim().to_owned(),
        ));
    }
    if let Some((k, rest)) = part.split_once(" notin ") {
        return Ok(Requirement::NotIn(k.trim().to_owned(), set(rest)?));
    }
    if let Some((k, rest)) = part.split_once(" in ") {
        return Ok(Requirement::In(k.trim().to_owned(), set(rest)?));
    }
    if part.contains(|c: char| c.is_whitespace() || c == '(' || c == ')') {
        return Err(bad());
    }
    Ok(Requirement::Exists(part.to_owned()))
}

/// A parsed field selector: `a.b=c,d!=e`.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the selector, refusing fields the real server does not index for `plural`, with
    /// its message.
    pub(crate) fn parse(s: &str, plural: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            if !supported(plural, field) {
                return Err(format!("field label not supported: {field}"));
            }
            out.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self(out))
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = match obj.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => String::new(),
            };
            (actual == *value) == *equal
        })
    }
}

/// The field labels the real server accepts for each resource.
fn supported(plural: &str, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    let extra: &[&str] = match plural {
        "pods" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "events" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "secrets" => &["type"],
        "namespaces" => &["status.phase"],
        "services" => &["spec.clusterIP", "spec.type"],
        _ => &[],
    };
    extra.contains(&field)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn labels() {
        let obj = json!({"metadata": {"labels": {"app": "a", "tier": "web"}}});
        let ok = |s: &str| LabelSelector::parse(s).unwrap().matches(&obj);
        assert!(ok("app=a"));
        assert!(ok("app==a,tier"));
        assert!(ok("app in (a, b),tier notin (db)"));
        assert!(ok("!missing,app!=b"));
        assert!(!ok("app in (b,c)"));
        assert!(!ok("missing"));
        assert!(ok(""));
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn fields() {
        let obj =
            json!({"metadata": {"name": "x", "namespace": "n"}, "status": {"phase": "Running"}});
        let sel = FieldSelector::parse("metadata.name=x,status.phase!=Failed", "pods").unwrap();
        assert!(sel.matches(&obj));
        assert!(FieldSelector::parse("spec.foo=x", "pods").is_err());
    }
}
