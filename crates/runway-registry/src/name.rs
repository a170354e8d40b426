//! Repository names and manifest references, validated by the distribution spec's grammar
//! before anything touches the disk.
//!
//! A [`Repository`] is `/`-separated components of `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`, so no
//! component is empty, `.`, `..` or starts with `_`: joined under a directory it stays below
//! it, and it never meets the store's own `_blobs`, `_manifests`, `_tags` and `_referrers`.

use std::fmt;
use std::path::PathBuf;

use runway_oci::Digest;

/// The longest repository name accepted, as many clients limit it.
pub const MAX_NAME_LEN: usize = 255;

/// A valid repository name, such as `team/app`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Repository(String);

impl Repository {
    /// Parses `name`, or says why it is refused.
    pub fn parse(name: &str) -> Result<Repository, &'static str> {
        if name.is_empty() {
            return Err("empty repository name");
        }
        if name.len() > MAX_NAME_LEN {
            return Err("repository name longer than 255 characters");
        }
        if name.split('/').all(component_valid) {
            Ok(Repository(name.to_string()))
        } else {
            Err("repository name components must match [a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*")
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as a relative path, one directory per component.
    pub(crate) fn relative_path(&self) -> PathBuf {
        self.0.split('/').collect()
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Repository({})", self.0)
    }
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn component_valid(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mut i = 0;
    loop {
        // A run of alphanumerics.
        let start = i;
        while bytes.get(i).copied().is_some_and(alnum) {
            i += 1;
        }
        if i == start {
            return false;
        }
        let Some(&separator) = bytes.get(i) else {
            return true;
        };
        // A separator: `.`, `_`, `__` or one or more `-`.
        match separator {
            b'.' => i += 1,
            b'_' => {
                i += 1;
                if bytes.get(i) == Some(&b'_') {
                    i += 1;
                }
            }
            b'-' => {
                while bytes.get(i) == Some(&b'-') {
                    i += 1;
                }
            }
            _ => return false,
        }
    }
}

/// A valid tag: `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Tag(String);

impl Tag {
    /// Parses `tag`, or says why it is refused.
    pub fn parse(tag: &str) -> Result<Tag, &'static str> {
        let bytes = tag.as_bytes();
        let Some((&first, rest)) = bytes.split_first() else {
            return Err("empty tag");
        };
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        if !word(first) {
            return Err("a tag starts with a letter, a digit or _");
        }
        if rest.len() > 127 {
            return Err("tag longer than 128 characters");
        }
        if !rest.iter().all(|&b| word(b) || b == b'.' || b == b'-') {
            return Err("a tag is letters, digits, _, . and -");
        }
        Ok(Tag(tag.to_string()))
    }

    /// The tag.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a manifest is asked for by: a tag or a digest.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Reference {
    /// A tag.
    Tag(Tag),
    /// A content digest.
    Digest(Digest),
}

/// Why a reference was refused.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ReferenceError {
    /// Looked like a digest (has a `:`) but is not a sha256 digest.
    Digest,
    /// Not a valid tag.
    Tag(&'static str),
}

impl Reference {
    /// A digest when `reference` has a `:`, else a tag.
    pub fn parse(reference: &str) -> Result<Reference, ReferenceError> {
        if reference.contains(':') {
            Digest::parse(reference)
                .map(Reference::Digest)
                .map_err(|_| ReferenceError::Digest)
        } else {
            Tag::parse(reference)
                .map(Reference::Tag)
                .map_err(ReferenceError::Tag)
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Tag(tag) => tag.fmt(f),
            Reference::Digest(digest) => digest.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Component;

    #[test]
    fn names() {
        for good in [
            "a",
            "team/app",
            "a.b_c__d---e/f0",
            "0/1/2",
            "library/ubuntu",
            "x-y",
        ] {
            assert!(Repository::parse(good).is_ok(), "{good:?} refused");
        }
        for bad in [
            "",
            "/",
            "a/",
            "/a",
            "a//b",
            "..",
            "a/../b",
            ".",
            "a/./b",
            "A",
            "a_",
            "_a",
            "a___b",
            "a.-b",
            "-a",
            "a-",
            "a b",
            "a\0b",
            "a/_blobs",
            "é",
            &"a".repeat(256),
        ] {
            assert!(Repository::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn tags_and_references() {
        assert!(Tag::parse("latest").is_ok());
        assert!(Tag::parse("_v1.2-rc_3").is_ok());
        assert!(Tag::parse(&"a".repeat(128)).is_ok());
        for bad in ["", ".a", "-a", "a/b", "..", "a:b", &"a".repeat(129)] {
            assert!(Tag::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            Reference::parse("sha256:abc"),
            Err(ReferenceError::Digest),
            "a short digest is a bad digest, not a tag"
        );
        let d = format!("sha256:{}", "0".repeat(64));
        assert!(matches!(Reference::parse(&d), Ok(Reference::Digest(_))));
    }

    proptest::proptest! {
        #[test]
        fn a_valid_name_stays_below_its_root(name in "\\PC{0,40}") {
            if let Ok(repo) = Repository::parse(&name) {
                for component in repo.relative_path().components() {
                    proptest::prop_assert!(matches!(component, Component::Normal(c)
                        if !c.to_string_lossy().starts_with('_') && c != ".."));
                }
            }
        }

        #[test]
        fn names_of_the_grammar_pass(name in "[a-z0-9]{1,5}((\\.|_|__|-{1,3})[a-z0-9]{1,5}){0,3}(/[a-z0-9]{1,5}((\\.|_|__|-{1,3})[a-z0-9]{1,5}){0,3}){0,3}") {
            proptest::prop_assert!(Repository::parse(&name).is_ok());
        }
    }
}
