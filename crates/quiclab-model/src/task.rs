//! What a trial asks of its client, as data: a workload says *what* to fetch or send (a
//! [`Request`]); the client's stack says *how* (its program, its arguments), and refuses by
//! name what it cannot do.
//!
//! Every kind of request is a variant of [`Ask`], so a new kind does not compile until each
//! stack handles or refuses it. A property every stack must see (for example a priority) is a
//! field of [`Request`]: only the workload that sets it and the stacks that honour it change.

use serde::{Deserialize, Serialize};

/// The largest body `GET /bytes/N` serves: 1 TB (bulk downloads run for a time, not to the end).
pub const MAX_BYTES: u64 = 1_000_000_000_000;

/// What a workload asks a trial's client to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub ask: Ask,
    /// The client prints one JSON record per request (the trial's metrics read them). A timed
    /// phase, measured by the link and the clock instead, asks for none.
    pub records: bool,
}

impl Request {
    /// `ask`, with a JSON record per request.
    pub fn recorded(ask: Ask) -> Request {
        Request { ask, records: true }
    }

    /// `ask`, with no records (a timed phase).
    pub fn unrecorded(ask: Ask) -> Request {
        Request {
            ask,
            records: false,
        }
    }
}

/// The kinds of request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Ask {
    /// GET URLs in order.
    Get(Get),
    /// POST `bytes` (the server's pattern) to `url` on a new connection; the server answers
    /// with the count it received.
    Upload { url: String, bytes: u64 },
    /// Load a web page as a browser does: `url` is the server's origin, `page` the page's
    /// manifest (a built-in name or a file; the client's default page when `None`).
    Page { url: String, page: Option<String> },
    /// Send telemetry units to `url`.
    Telemetry(Telemetry),
}

/// GETs of URLs in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Get {
    pub urls: Vec<String>,
    /// One connection for all requests, or a new one each.
    pub connection: Connection,
    /// The list is fetched this many times (at least 1).
    pub repeat: u32,
    /// Later connections resume the TLS session of an earlier one (0-RTT where the transport
    /// has it).
    pub resume: bool,
}

impl Get {
    /// One GET of `url` on a new connection.
    pub fn one(url: String) -> Get {
        Get {
            urls: vec![url],
            connection: Connection::New,
            repeat: 1,
            resume: false,
        }
    }

    /// How many requests it makes.
    pub fn requests(&self) -> u64 {
        self.urls.len() as u64 * u64::from(self.repeat.max(1))
    }

    /// It is one GET on a new connection (what a browser's page script does for one object).
    pub fn is_one_new(&self) -> bool {
        self.requests() == 1 && self.connection == Connection::New && !self.resume
    }
}

/// Which connection a request goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Connection {
    /// The client's one connection to the server.
    Reuse,
    /// A connection of its own.
    New,
}

impl Connection {
    /// As command lines and records write it.
    pub fn name(self) -> &'static str {
        match self {
            Connection::Reuse => "reuse",
            Connection::New => "new",
        }
    }
}

/// A telemetry run: units at a constant rate, flushed in groups, for a while.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Telemetry {
    pub url: String,
    pub units_per_second: u32,
    pub flush_units: u32,
    pub duration_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_count_urls_times_repeats() {
        let mut g = Get::one("https://h/bytes/1".into());
        assert_eq!(g.requests(), 1);
        assert!(g.is_one_new());
        g.repeat = 3;
        g.urls.push("https://h/bytes/2".into());
        assert_eq!(g.requests(), 6);
        assert!(!g.is_one_new());
        let mut r = Get::one("u".into());
        r.resume = true;
        assert!(!r.is_one_new(), "a resumed GET needs an earlier session");
        r.resume = false;
        r.connection = Connection::Reuse;
        assert!(!r.is_one_new());
    }

    #[test]
    fn a_request_round_trips_through_json_with_its_kind_named() {
        let r = Request::recorded(Ask::Telemetry(Telemetry {
            url: "https://10.0.0.2".into(),
            units_per_second: 100,
            flush_units: 10,
            duration_ms: 5000,
        }));
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains(r#""kind":"telemetry""#), "{text}");
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), r);
        let g = Request::unrecorded(Ask::Get(Get::one("u".into())));
        let text = serde_json::to_string(&g).unwrap();
        assert!(text.contains(r#""connection":"new""#), "{text}");
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), g);
    }
}
