//! Escaping of text put into HTML or SVG. Every string that comes from a campaign (names,
//! labels, reasons, provenance) passes through [`esc`] before it reaches the page.

/// `s` with `&`, `<`, `>`, `"` and `'` replaced by character references: safe in element
/// content and in quoted attribute values, in HTML and in XML (SVG).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newline are not allowed in XML.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_characters() {
        assert_eq!(esc("<b>&\"'"), "&lt;b&gt;&amp;&quot;&#39;");
        assert_eq!(esc("loss-1%"), "loss-1%");
        assert_eq!(esc("a\u{1}b"), "a\u{fffd}b");
    }
}
