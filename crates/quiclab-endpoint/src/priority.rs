//! RFC 9218 priorities, as clients send them in the `priority` request header and servers
//! schedule by them.

use serde::{Deserialize, Serialize};

/// An RFC 9218 priority: urgency 0 (most urgent) to 7, and whether the response is useful in
/// pieces (incremental) so it may share the link with others of its urgency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Priority {
    pub urgency: u8,
    pub incremental: bool,
}

impl Priority {
    /// RFC 9218's default for a request without the header: `u=3`, not incremental.
    pub const DEFAULT: Priority = Priority {
        urgency: 3,
        incremental: false,
    };

    /// The `priority` request header's value (RFC 9218, section 4), e.g. `u=5, i`.
    pub fn header(self) -> String {
        if self.incremental {
            format!("u={}, i", self.urgency)
        } else {
            format!("u={}", self.urgency)
        }
    }

    /// Reads a `priority` header leniently, as RFC 9218 asks: unknown parameters and values out
    /// of range are ignored (the default stays).
    pub fn parse_header(value: &str) -> Priority {
        let mut p = Priority::DEFAULT;
        for item in value.split(',') {
            let item = item.trim();
            if let Some(u) = item.strip_prefix("u=") {
                if let Ok(u) = u.trim().parse::<u8>()
                    && u <= 7
                {
                    p.urgency = u;
                }
            } else if item == "i" || item == "i=?1" {
                p.incremental = true;
            } else if item == "i=?0" {
                p.incremental = false;
            }
        }
        p
    }
}
