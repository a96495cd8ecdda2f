//! How quiclab writes CSV (RFC 4180), for the export's tables and the figures' data alike.

use std::borrow::Cow;

/// A field as CSV writes it: in double quotes, its own doubled, when it holds a comma, a quote
/// or a line break; as it is otherwise.
pub fn field(s: &str) -> Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// A CSV text held in memory: a header line, then one line per row.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    text: String,
    columns: usize,
}

impl Table {
    /// A table whose first line names `columns`.
    pub fn new(columns: &[&str]) -> Table {
        let mut t = Table {
            text: String::new(),
            columns: columns.len(),
        };
        t.push_line(columns.iter().copied());
        t
    }

    /// One row: as many fields as the header has columns (an empty field for a value that is
    /// not known).
    pub fn row<S: AsRef<str>>(&mut self, fields: &[S]) {
        assert_eq!(
            fields.len(),
            self.columns,
            "a CSV row of {} fields under {} columns",
            fields.len(),
            self.columns
        );
        self.push_line(fields.iter().map(|f| f.as_ref()));
    }

    fn push_line<'a>(&mut self, fields: impl Iterator<Item = &'a str>) {
        for (i, f) in fields.enumerate() {
            if i > 0 {
                self.text.push(',');
            }
            self.text.push_str(&field(f));
        }
        self.text.push('\n');
    }

    /// The rows written so far, the header not counted.
    pub fn rows(&self) -> usize {
        self.text.lines().count().saturating_sub(1)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn into_string(self) -> String {
        self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_only_where_they_must_be() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(field("two\nlines"), "\"two\nlines\"");
        let mut t = Table::new(&["arm", "ttlb_ms"]);
        t.row(&["h3, quinn", "12.5"]);
        t.row(&[String::from("h2"), String::new()]);
        assert_eq!(t.as_str(), "arm,ttlb_ms\n\"h3, quinn\",12.5\nh2,\n");
        assert_eq!(t.rows(), 2);
    }

    #[test]
    #[should_panic(expected = "a CSV row of 1 fields under 2 columns")]
    fn a_row_of_the_wrong_width_is_refused() {
        Table::new(&["a", "b"]).row(&["only one"]);
    }
}
