//! Text the platform's tenants control, made safe to print for people. An app's output, the
//! events and reasons that quote it, an instance's message, a variable's value: printed as they
//! are, their control characters would reach the operator's terminal, where an escape sequence
//! can clear the screen, move the cursor, recolour or rewrite what was printed before it.
//!
//! Every human output of the control plane's commands goes through [`line()`] or [`text`]: each
//! control character (C0 but tab, DEL, C1 U+0080–U+009F) is shown as an escape, as `cat -v`
//! and journalctl do: `\x1b[2J` is printed as those seven characters, a carriage return as
//! `\r`. `--output json` prints the values as the server sent them.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` on one line (a log line, a table cell, a field after a label): every control
/// character escaped, newlines too.
pub(crate) fn line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// `text` over several lines (a deployment's reason with the last lines of a crashed instance,
/// an error): its newlines kept, every other control character escaped.
pub(crate) fn text(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, newlines: bool) -> Cow<'_, str> {
    let kept = |c: char| !c.is_control() || c == '\t' || (newlines && c == '\n');
    if text.chars().all(kept) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if kept(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            // C0 and DEL as the byte they are; C1 as the code point (its UTF-8 is two bytes).
            c if c.is_ascii() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_is_left_as_it_is() {
        for text in [
            "",
            "listening on :8080",
            "tab\tseparated",
            "naïve café ✓",
            r"C:\x1b",
        ] {
            assert!(matches!(line(text), Cow::Borrowed(_)), "{text}");
            assert_eq!(line(text), text);
        }
        assert!(matches!(text("two\nlines"), Cow::Borrowed(_)));
    }

    #[test]
    fn control_characters_are_shown_as_escapes() {
        assert_eq!(line("\x1b[2Jgone"), r"\x1b[2Jgone");
        assert_eq!(line("100%\rdone"), r"100%\rdone");
        assert_eq!(line("bell\x07 nul\0 del\x7f"), r"bell\x07 nul\x00 del\x7f");
        // C1: the single-character CSI, and NEL.
        assert_eq!(line("\u{9b}31m red \u{85}"), r"\u{9b}31m red \u{85}");
        assert_eq!(line("one\ntwo"), r"one\ntwo");
    }

    #[test]
    fn text_keeps_its_newlines_only() {
        assert_eq!(
            text("crashed:\n\x1b[31mpanic\x1b[0m\r\n"),
            "crashed:\n\\x1b[31mpanic\\x1b[0m\\r\n"
        );
    }
}
