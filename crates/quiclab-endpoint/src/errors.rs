//! Errors as text for records: a failed request keeps its whole cause chain.

use std::error::Error as StdError;

/// An error with all its causes, for a record.
pub fn error_chain(e: &dyn StdError) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}
