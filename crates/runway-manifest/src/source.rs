//! YAML text to a JSON value plus the location of every node, so that schema and semantic errors
//! found on the value can be pointed back at the line and column they came from.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use serde_json::{Map, Number, Value};

use crate::diagnostic::{Diagnostic, Location, dotted_path, pointer_segment};

/// Deepest nesting accepted. A manifest is five levels deep; this only stops hostile input.
const MAX_DEPTH: usize = 64;

/// A source file: its name as shown to the user, and its text.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// The name shown in diagnostics, e.g. `.runway/runway.yml`.
    pub name: Arc<str>,
    /// The file's contents.
    pub text: String,
}

impl SourceFile {
    /// A source file from its display name and text.
    pub fn new(name: impl Into<Arc<str>>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
        }
    }
}

/// The text's lines as YAML counts them: `\r\n`, `\r` and `\n` each end a line. (`str::lines`
/// does not end a line at a lone `\r`, so it would disagree with the line numbers saphyr
/// reports; the fuzzer found this.)
pub fn yaml_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut rest = text;
    while let Some(end) = rest.find(['\r', '\n']) {
        lines.push(&rest[..end]);
        let skip = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
    }
    if !rest.is_empty() {
        lines.push(rest);
    }
    lines
}

/// Where a node is: its key (for mapping values) and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpan {
    /// The key's position, for a value in a mapping.
    pub key: Option<Location>,
    /// The value's position.
    pub value: Location,
}

/// Node locations by JSON pointer (`/spec/scalability/min_instances`).
#[derive(Debug, Clone, Default)]
pub struct SpanMap {
    spans: HashMap<String, NodeSpan>,
    /// Pointers of the floats JSON cannot hold (`.inf`, `-.inf`, `.nan`), kept as text.
    non_finite: HashSet<String>,
}

impl SpanMap {
    /// Where the node at `pointer` is, if it came from a file.
    pub fn get(&self, pointer: &str) -> Option<&NodeSpan> {
        self.spans.get(pointer)
    }

    /// The value's location at `pointer`, or failing that its nearest ancestor's: an error about
    /// a missing field points at the mapping that lacks it.
    pub fn value_location(&self, pointer: &str) -> Option<Location> {
        self.nearest(pointer).map(|span| span.value.clone())
    }

    /// The key's location at `pointer` where there is one, else the value's.
    pub fn key_location(&self, pointer: &str) -> Option<Location> {
        self.nearest(pointer)
            .map(|span| span.key.clone().unwrap_or_else(|| span.value.clone()))
    }

    fn nearest(&self, pointer: &str) -> Option<&NodeSpan> {
        let mut pointer = pointer;
        loop {
            if let Some(span) = self.spans.get(pointer) {
                return Some(span);
            }
            pointer = &pointer[..pointer.rfind('/')?];
        }
    }

    /// Whether the node at `pointer` was a float JSON cannot hold (`.inf`, `-.inf`, `.nan`),
    /// which the value holds as text.
    pub fn is_non_finite(&self, pointer: &str) -> bool {
        self.non_finite.contains(pointer)
    }

    /// Lays `other` over `self`: where both know a node, `other`'s location wins. Used for
    /// per-environment overrides, whose values replace the base's.
    pub fn overlay(&mut self, other: &SpanMap) {
        for (pointer, span) in &other.spans {
            self.non_finite.remove(pointer);
            self.spans.insert(pointer.clone(), span.clone());
        }
        self.non_finite.extend(other.non_finite.iter().cloned());
    }

    fn insert(&mut self, pointer: String, span: NodeSpan) {
        self.spans.insert(pointer, span);
    }
}

/// A parsed YAML document.
#[derive(Debug, Clone)]
pub struct Document {
    /// The document as JSON.
    pub value: Value,
    /// Where each node came from.
    pub spans: SpanMap,
}

/// Parses one YAML document. A syntax error, more than one document, an empty file or a node
/// JSON cannot hold is returned as a located diagnostic; nothing panics.
pub fn parse(file: &SourceFile) -> Result<Document, Vec<Diagnostic>> {
    let at = |line: usize, col: usize| Location {
        file: file.name.clone(),
        line,
        column: col + 1,
    };
    let docs = match MarkedYaml::load_from_str(&file.text) {
        Ok(docs) => docs,
        Err(e) => {
            let mark = e.marker();
            return Err(vec![Diagnostic::error(
                Some(at(mark.line(), mark.col())),
                "",
                format!("invalid YAML: {}", e.info()),
            )]);
        }
    };
    let mut docs = docs.into_iter();
    let Some(doc) = docs.next() else {
        return Err(vec![
            Diagnostic::error(Some(at(1, 0)), "", "the file is empty").expected("a YAML mapping"),
        ]);
    };
    if let Some(extra) = docs.next() {
        let start = extra.span.start;
        return Err(vec![Diagnostic::error(
            Some(at(start.line(), start.col())),
            "",
            "a second YAML document; the file must hold exactly one",
        )]);
    }
    let mut converter = Converter {
        file,
        spans: SpanMap::default(),
        errors: Vec::new(),
    };
    let root_location = converter.location(&doc);
    converter.spans.insert(
        String::new(),
        NodeSpan {
            key: None,
            value: root_location,
        },
    );
    let value = converter.convert(&doc, String::new(), 0);
    if converter.errors.is_empty() {
        Ok(Document {
            value,
            spans: converter.spans,
        })
    } else {
        Err(converter.errors)
    }
}

struct Converter<'a> {
    file: &'a SourceFile,
    spans: SpanMap,
    errors: Vec<Diagnostic>,
}

impl Converter<'_> {
    fn location(&self, node: &MarkedYaml<'_>) -> Location {
        Location {
            file: self.file.name.clone(),
            line: node.span.start.line(),
            column: node.span.start.col() + 1,
        }
    }

    fn error(&mut self, node: &MarkedYaml<'_>, pointer: &str, message: impl Into<String>) -> Value {
        let location = self.location(node);
        self.errors.push(Diagnostic::error(
            Some(location),
            dotted_path(pointer),
            message,
        ));
        Value::Null
    }

    fn convert(&mut self, node: &MarkedYaml<'_>, pointer: String, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            return self.error(
                node,
                &pointer,
                format!("nested deeper than {MAX_DEPTH} levels"),
            );
        }
        match &node.data {
            YamlData::Value(scalar) => {
                if matches!(scalar, Scalar::FloatingPoint(f) if !f.is_finite()) {
                    self.spans.non_finite.insert(pointer);
                }
                scalar_to_json(scalar)
            }
            YamlData::Representation(text, _, _) => Value::String(text.to_string()),
            YamlData::Tagged(_, inner) => self.convert(inner, pointer, depth + 1),
            YamlData::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    let item_pointer = format!("{pointer}/{index}");
                    let location = self.location(item);
                    self.spans.insert(
                        item_pointer.clone(),
                        NodeSpan {
                            key: None,
                            value: location,
                        },
                    );
                    out.push(self.convert(item, item_pointer, depth + 1));
                }
                Value::Array(out)
            }
            YamlData::Mapping(entries) => {
                let mut out = Map::with_capacity(entries.len());
                for (key_node, value_node) in entries {
                    let key = match &key_node.data {
                        YamlData::Value(Scalar::String(s)) => s.to_string(),
                        YamlData::Value(Scalar::Integer(i)) => i.to_string(),
                        YamlData::Value(Scalar::Boolean(b)) => b.to_string(),
                        YamlData::Representation(text, _, _) => text.to_string(),
                        _ => {
                            self.error(key_node, &pointer, "a mapping key must be a plain string");
                            continue;
                        }
                    };
                    let child = format!("{pointer}/{}", pointer_segment(&key));
                    let span = NodeSpan {
                        key: Some(self.location(key_node)),
                        value: self.location(value_node),
                    };
                    self.spans.insert(child.clone(), span);
                    let value = self.convert(value_node, child, depth + 1);
                    out.insert(key, value);
                }
                Value::Object(out)
            }
            YamlData::Alias(_) => self.error(node, &pointer, "unresolved YAML alias"),
            YamlData::BadValue => self.error(node, &pointer, "a value YAML cannot represent"),
        }
    }
}

fn scalar_to_json(scalar: &Scalar<'_>) -> Value {
    match scalar {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(*b),
        Scalar::Integer(i) => Value::Number((*i).into()),
        Scalar::FloatingPoint(f) => {
            // JSON has no infinity or NaN: keep YAML's spelling as text, so the schema reports a
            // type error (which the span map's `is_non_finite` lets it word).
            let f = f.into_inner();
            Number::from_f64(f).map_or_else(
                || {
                    Value::String(
                        match (f.is_nan(), f.is_sign_negative()) {
                            (true, _) => ".nan",
                            (false, true) => "-.inf",
                            (false, false) => ".inf",
                        }
                        .to_owned(),
                    )
                },
                Value::Number,
            )
        }
        Scalar::String(s) => Value::String(s.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Document, Vec<Diagnostic>> {
        parse(&SourceFile::new("t.yml", text))
    }

    #[test]
    fn values_and_locations() {
        let doc = parse_str("a:\n  b: 1\n  c: [x, 2.5]\n").unwrap();
        assert_eq!(
            doc.value,
            serde_json::json!({"a": {"b": 1, "c": ["x", 2.5]}})
        );
        let b = doc.spans.get("/a/b").unwrap();
        assert_eq!((b.value.line, b.value.column), (2, 6));
        assert_eq!(b.key.as_ref().map(|k| (k.line, k.column)), Some((2, 3)));
        assert_eq!(
            doc.spans.value_location("/a/c/1").map(|l| l.column),
            Some(10)
        );
        assert_eq!(
            doc.spans.value_location("/a/missing").map(|l| l.line),
            Some(2)
        );
    }

    #[test]
    fn syntax_errors_are_located() {
        let errors = parse_str("a: [1, 2\n").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].message.starts_with("invalid YAML"),
            "{}",
            errors[0]
        );
        assert_eq!(errors[0].location.as_ref().map(|l| l.line), Some(2));
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let errors = parse_str("a: 1\na: 2\n").unwrap_err();
        assert!(
            errors[0].message.contains("duplicated key"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn empty_and_multi_document_files() {
        assert!(parse_str("").unwrap_err()[0].message.contains("empty"));
        assert!(
            parse_str("a: 1\n---\nb: 2\n").unwrap_err()[0]
                .message
                .contains("second")
        );
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let text = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse_str(&text).is_err());
    }

    #[test]
    fn lines_end_as_yaml_ends_them() {
        assert_eq!(yaml_lines("a\r\nb\rc\nd"), ["a", "b", "c", "d"]);
        assert_eq!(yaml_lines("a\n"), ["a"]);
        let errors = parse_str("a: 1\r\r\rb c\n: :\n").unwrap_err();
        let line = errors[0].location.as_ref().unwrap().line;
        assert!(
            line <= yaml_lines("a: 1\r\r\rb c\n: :\n").len() + 1,
            "{line}"
        );
    }

    #[test]
    fn infinity_becomes_text() {
        let doc = parse_str("a: .inf\nb: [-.inf, .NaN, 1.5]\nc: \".inf\"\n").unwrap();
        assert_eq!(
            doc.value,
            serde_json::json!({"a": ".inf", "b": ["-.inf", ".nan", 1.5], "c": ".inf"})
        );
        assert!(doc.spans.is_non_finite("/a"));
        assert!(doc.spans.is_non_finite("/b/0") && doc.spans.is_non_finite("/b/1"));
        assert!(!doc.spans.is_non_finite("/b/2"));
        assert!(
            !doc.spans.is_non_finite("/c"),
            "a quoted string is a string"
        );
    }
}
