//! `quiclab fingerprint`: an implementation's choices read from the wire (docs/fingerprint.md).
//! Each probe is a trial of one GET on a new connection over a path quiclab sets (50 ms each
//! way; no rate limit for a server, so that nothing but the sender decides when a packet
//! leaves; 10 Mbit/s for a client, so that its acknowledgements follow its policy), between the
//! stack under test, in the role asked, and the registry's default stack of the same HTTP
//! version as its peer. The clean probe's log gives the first flights, the packet sizes, the
//! initial window, the bursts and the acknowledgement frequency; the jumbo probe (a 9000-byte
//! link) how far path MTU discovery goes; the first-flights-lost probe, which drops the
//! server's first flight and the client's first retransmissions, planted from the clean
//! probe's log, each side's first retransmission timer. A server's congestion response takes
//! two more: one data packet dropped in the fourth round trip of data (out of slow start), then
//! that and a second four round trips later, planted from the log of the first, whose window
//! before and after the wire shows as bytes in flight (its β); a sender whose flight the first
//! loss did not cut (BBR's startup) and whose second gives no reading (its window outgrew the
//! object) has its answer at the first. Over QUIC two
//! isolated-loss probes read the loss thresholds apart from the window: a small response (8 kB,
//! sent at once) loses a data packet with one, or three, packets let through behind it and the
//! rest of its round trip blacked out, so that only the time threshold, or the packet
//! threshold, can declare it. The clean probe's
//! capture gives a server's ServerHello and transport parameters, and the retry probe's (its
//! peer's one key share P-256, x25519 listed second) whether it asks for x25519. The tail probe
//! loses the clean transfer's last data packets (a blackout of 0.6 RTT from the byte they start
//! at) for its retransmission timer once it has measured the path; the deep-queue probe (20
//! Mbit/s into a 300 ms drop-tail queue) shows whether its slow start ends before the queue
//! overflows, and what it had queued by then. Each probe runs `runs` times; an item whose runs
//! disagree beyond its tolerance says so.
//!
//! The analysis is `quiclab_explain::fingerprint`'s (sans-IO, tested in virtual time); this
//! module makes the probes' plans, runs them through the caller's trial runner and puts the
//! answers on a card.

use std::path::Path;

use quiclab_explain::fingerprint::{
    DeepQueue, ENDED_TOO_SOON, FirstLossPlan, FirstTimeout, Framing, IsolatedLoss, IsolatedPlan,
    LossDetection, LossPlan, NO_CUT, PACED_BELOW, Response, SlowStartEnd, TailPlan, TailTimeout,
    WireCard, deep_queue, first_timeout, isolated_loss, response, response_at, tail_timeout,
    urgent_share, wire,
};
use quiclab_explain::hello::{self, Hello, TransportParams};
use quiclab_explain::one_rtt;
use quiclab_explain::server_hello::{self, ServerHandshake};
use quiclab_explain::{LinkLog, PathFacts};
pub use quiclab_model::fingerprint::{Card, Item, Role, Tolerance};
use quiclab_model::record::{HttpVersion, Transport};
use quiclab_store::TrialRecord;
use serde::Serialize;

use crate::expand::{self, TrialSpec};
use crate::plan::{self, Plan, Profile};
use crate::stacks::{self, Capability, Stack};
use crate::trial::trial_folder;

/// One way: the probes' path has a 100 ms round trip, long enough to tell a flight from the
/// next and a timer from a round trip.
pub const ONE_WAY_MS: u64 = 50;

/// The object each probe fetches: many round trips of slow start at 100 ms.
pub const OBJECT: &str = "1mb";

/// The object of the probes that read where path MTU discovery ends (a client's clean and
/// jumbo probes, and a server's long and jumbo probes), at the client probes' 10 Mbit/s: long
/// enough (4.7 s and more) for a path-MTU search that probes a round trip's multiple apart to
/// finish. quic-go's probes every 5 smoothed RTTs, halving the interval from 1280 to 1452 bytes
/// down to 20: four probes (datagrams of 1366, 1409, 1430 and 1441 bytes), sent 0.72 to 0.82,
/// 1.59 to 1.70, 2.58 to 2.66 and 3.31 to 3.39 s into the trial in four runs (their smoothed
/// RTT grows with the downlink's queue). In a 1 MB download it had sent one or two of them, and
/// its largest datagram read 1366 in some runs and 1409 in others; a server's 1 MB, without a
/// rate limit, is over in six round trips, and quic-go's had sent the first only.
pub const LONG_OBJECT: &str = "5mb";

/// The object of the congestion-response probe for a sender whose first round trip of data
/// was `initial_window` bytes: 64 of those (slow start to the eighth, the first loss, four
/// round trips of congestion avoidance, the second loss and two more round trips, with room),
/// in whole megabytes, from 1 to 8.
pub fn response_object(initial_window: u64) -> String {
    let mb = (initial_window * 64).div_ceil(1_000_000).clamp(1, 8);
    format!("{mb}mb")
}

/// The object of a congestion-response probe's next attempt when the last one ended too soon:
/// twice as many megabytes, at most 32.
pub fn bigger_object(size: &str) -> String {
    let mb: u64 = size.trim_end_matches("mb").parse().unwrap_or(8);
    format!("{}mb", (mb * 2).min(32))
}

/// How many times a probe whose planted event missed is run before its item says why.
pub const ATTEMPTS: u32 = 2;

/// The MTU of the jumbo probe's link: what path MTU discovery may find.
pub const JUMBO_MTU: u32 = 9000;

/// The client probes' rate, bits per second.
const CLIENT_RATE_BPS: u64 = 10_000_000;

/// The stack under test, its role and knobs, and its peer.
#[derive(Debug, Clone)]
pub struct Subject {
    pub stack: &'static dyn Stack,
    pub role: Role,
    /// Knobs of the arm (checked by the plan, as any arm's).
    pub knobs: Vec<(String, String)>,
    pub http: HttpVersion,
    /// The registry's default stack of `http`, at the other end.
    pub peer: &'static dyn Stack,
}

impl Subject {
    /// The subject `name` in `role`, or why it cannot be fingerprinted.
    pub fn new(name: &str, role: Role, knobs: Vec<(String, String)>) -> Result<Subject, String> {
        let stack = stacks::find(name)
            .ok_or_else(|| format!("unknown stack {name:?}; known: {}", stacks::names()))?;
        let http = [HttpVersion::Http3, HttpVersion::Hq, HttpVersion::Http2]
            .into_iter()
            .find(|h| stack.http().contains(h))
            .ok_or_else(|| {
                format!(
                    "stack {name:?} speaks neither HTTP/3, HTTP/0.9 over QUIC nor HTTP/2: a \
                     fingerprint reads a QUIC or a TLS-over-TCP handshake"
                )
            })?;
        match role {
            Role::Server if !stack.serves(Capability::GetOne) => {
                return Err(format!(
                    "stack {name:?} serves nothing: fingerprint its client (--role client)"
                ));
            }
            Role::Client if !Capability::any_covers(stack.capabilities(), Capability::GetOne) => {
                return Err(format!("stack {name:?} has no client that GETs an object"));
            }
            _ => {}
        }
        let peer = stacks::for_http(http)
            .ok_or_else(|| format!("no stack of the registry speaks {}", http.title()))?;
        Ok(Subject {
            stack,
            role,
            knobs,
            http,
            peer,
        })
    }

    /// What the probes' packets carry besides payload, and the handshake's round trips: by the
    /// HTTP version the probes speak (a stack of both, a browser's, fetches over HTTP/3).
    pub fn framing(&self) -> Framing {
        match self.http.transport() {
            Transport::Quic => Framing::QUIC,
            _ => Framing::TCP_TLS,
        }
    }

    /// The path the probes run over.
    pub fn path(&self) -> PathFacts {
        let rate = self.rate().map(|_| CLIENT_RATE_BPS);
        PathFacts {
            down_delay_ns: ONE_WAY_MS * 1_000_000,
            up_delay_ns: ONE_WAY_MS * 1_000_000,
            down_rate_bps: rate,
            up_rate_bps: rate,
        }
    }

    /// The object of the clean probe: [`OBJECT`] for a server, [`LONG_OBJECT`] for a client.
    pub fn object(&self) -> &'static str {
        match self.role {
            Role::Server => OBJECT,
            Role::Client => LONG_OBJECT,
        }
    }

    /// The link keys of a probe that fetches [`LONG_OBJECT`]: for a server the clients' rate
    /// (a client's probes have it already), so that it lasts as long.
    fn long_keys(&self) -> Vec<(&'static str, String)> {
        match self.rate() {
            Some(_) => Vec::new(),
            None => vec![("rate", format!("{}mbit", CLIENT_RATE_BPS / 1_000_000))],
        }
    }

    /// The jumbo probe's link keys: 9000-byte packets, over a long transfer.
    fn jumbo_keys(&self) -> Vec<(&'static str, String)> {
        let mut keys = vec![("mtu", JUMBO_MTU.to_string())];
        keys.extend(self.long_keys());
        keys
    }

    /// The probes' rate limit: none for a server (nothing but the sender decides when a packet
    /// leaves); for a client, 10 Mbit/s, so that the data reach it spaced as on a real path
    /// and its acknowledgements follow its policy rather than how many packets one wake-up
    /// reads.
    fn rate(&self) -> Option<&'static str> {
        (self.role == Role::Client).then_some("10mbit")
    }

    /// The plan of one probe (`drops`: the link keys it plants), run `run` (its seed, so that
    /// each run is a trial of its own).
    pub fn plan_text(&self, probe: &str, drops: &[(&str, String)], run: u32, size: &str) -> String {
        let workload = format!("kind = \"single-object\"\nsizes = [{size:?}]");
        self.plan_of(&workload, probe, drops, run)
    }

    /// The plan of one probe whose workload is `workload` (its `[workload]` keys), as
    /// [`Subject::plan_text`].
    fn plan_of(&self, workload: &str, probe: &str, drops: &[(&str, String)], run: u32) -> String {
        let (server, client) = match self.role {
            Role::Server => (self.stack, self.peer),
            Role::Client => (self.peer, self.stack),
        };
        let mut s = format!(
            "name = \"fingerprint\"\niterations = 1\nseed = {run}\n\
             [workload]\n{workload}\n\
             [network]\ndelay = \"{ONE_WAY_MS}ms\"\n[conditions.{probe:?}]\n"
        );
        if let Some(rate) = self.rate() {
            s += &format!("rate = {rate:?}\n");
        }
        for (k, v) in drops {
            s += &format!("{k} = {v:?}\n");
        }
        s += &format!(
            "[arms.{name:?}]\nhttp = {http:?}\nserver-stack = {server:?}\nclient-stack = {client:?}\n",
            name = self.stack.name(),
            http = self.http.name(),
            server = server.name(),
            client = client.name(),
        );
        for (k, v) in &self.knobs {
            s += &format!("{k} = {v:?}\n");
        }
        s
    }

    /// The subject with its peer's stream window set to [`WIDE_PEER_WINDOW`], where the peer
    /// takes that knob and the subject's knobs do not set it already.
    pub fn with_wide_peer_window(&self) -> Subject {
        let mut wide = self.clone();
        let (window, size) = WIDE_PEER_WINDOW;
        if self.peer.knobs().iter().any(|k| k.key == window)
            && !self.knobs.iter().any(|(k, _)| k == window)
        {
            wide.knobs.push((window.into(), size.into()));
        }
        wide
    }

    /// A probe's plan, parsed and checked as any plan is, and its one trial.
    pub fn probe(
        &self,
        probe: &str,
        drops: &[(&str, String)],
        run: u32,
        size: &str,
    ) -> Result<(Plan, TrialSpec), String> {
        parsed(self.plan_text(probe, drops, run, size), probe)
    }

    /// The resumption probe: [`RESUMED_REQUESTS`] GETs of `size`, each on a new connection, the
    /// later ones resuming the session before (0-RTT where the peer's transport has it).
    pub fn resumption_probe(&self, run: u32, size: &str) -> Result<(Plan, TrialSpec), String> {
        let workload =
            format!("kind = \"repeat\"\nrequests = {RESUMED_REQUESTS}\nsizes = [{size:?}]");
        parsed(
            self.plan_of(&workload, RESUMPTION_PROBE, &[], run),
            RESUMPTION_PROBE,
        )
    }

    /// The priorities probe: a page load of [`PRIORITY_PAGE`] (its manifest written to
    /// `manifest`) at [`PRIORITY_RATE`].
    pub fn priority_probe(&self, run: u32, manifest: &Path) -> Result<(Plan, TrialSpec), String> {
        std::fs::write(manifest, PRIORITY_PAGE)
            .map_err(|e| format!("writing {}: {e}", manifest.display()))?;
        let workload = format!(
            "kind = \"pages\"\npages = [{:?}]",
            manifest.display().to_string()
        );
        let rate = [("rate", PRIORITY_RATE.to_string())];
        parsed(
            self.plan_of(&workload, PRIORITY_PROBE, &rate, run),
            PRIORITY_PROBE,
        )
    }
}

/// A probe's plan text, parsed and checked as any plan is, and its one trial.
fn parsed(text: String, probe: &str) -> Result<(Plan, TrialSpec), String> {
    let plan = plan::parse(&text, &format!("the {probe} probe"), Profile::Full)
        .map_err(|e| e.to_string())?;
    let spec = expand::expand(&plan)
        .into_iter()
        .next()
        .ok_or("the probe's plan has no trial")?;
    Ok((plan, spec))
}

/// The retry probe's peer: a key share for P-256 only, x25519 listed after it. A server that
/// prefers x25519 strongly enough asks for it (a HelloRetryRequest, a round trip more); one
/// that takes any share it supports answers P-256.
pub const RETRY_PROBE_GROUPS: &str = "p256,x25519";
/// The retry probe's object: the handshake is what it reads.
pub const RETRY_PROBE_OBJECT: &str = "10kb";

/// The probes' names, as their plans, steps and terminal lines give them (the resumption and
/// priorities probes: [`RESUMPTION_PROBE`], [`PRIORITY_PROBE`]).
pub mod probe {
    pub const CLEAN: &str = "clean";
    pub const P256_SHARE: &str = "p256 share";
    pub const JUMBO: &str = "jumbo";
    pub const LONG: &str = "long";
    pub const FIRST_FLIGHTS_LOST: &str = "first flights lost";
    pub const DEEP_QUEUE: &str = "deep queue";
    pub const TAIL_LOST: &str = "tail lost";
    pub const SMALL_CLEAN: &str = "small clean";
    pub const ONE_LOSS: &str = "one loss";
    pub const TWO_LOSSES: &str = "two losses";
}

/// How many times an isolated-loss probe runs before its items say why it could not be read:
/// its plan counts data packets, and the small packets around the response's last ones
/// (whether they go behind it, or ride in it) differ from trial to trial.
pub const ISOLATED_ATTEMPTS: u32 = 4;

/// The isolated-loss probes' object: within every server's first round trip of data (the least
/// measured here is 11 KB), so that the sender has nothing more to send behind the loss.
pub const ISOLATED_OBJECT: &str = "8kb";

/// The isolated-loss probes: each name, and how many packets show its loss (one: the time
/// threshold's; three: RFC 9002's packet threshold).
pub const ISOLATED: [(&str, u32); 2] = [("lone loss", 1), ("three behind", 3)];

/// The resumption probe's name, its GETs and its object: a handshake's worth.
pub const RESUMPTION_PROBE: &str = "resumed";
pub const RESUMED_REQUESTS: u32 = 2;
pub const RESUMPTION_OBJECT: &str = "10kb";

/// What a server did with the session its peer kept (the resumption probe's second request,
/// as the peer's record tells it), and how soon that request's first byte came. quiclab's
/// QUIC client tries 0-RTT whenever a ticket allows it, and reports a resumption only with its
/// 0-RTT accepted; its TCP client reports one either way.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Resumption {
    pub resumed: bool,
    pub zero_rtt_attempted: bool,
    pub zero_rtt_accepted: bool,
    /// The second request's first byte from its start, ms.
    pub ttfb_ms: f64,
}

impl Resumption {
    /// A code and words for the answer.
    fn worded(&self) -> (f64, String) {
        match (
            self.resumed,
            self.zero_rtt_attempted,
            self.zero_rtt_accepted,
        ) {
            (_, _, true) => (3.0, "accepts 0-RTT".into()),
            (_, true, false) => (2.0, "refuses 0-RTT".into()),
            (true, false, _) => (1.0, "resumes, without 0-RTT".into()),
            (false, false, _) => (
                0.0,
                "no 0-RTT: none of its tickets allowed early data".into(),
            ),
        }
    }
}

/// The priorities probe: a page whose document pulls in a large, least urgent response
/// (RFC 9218 urgency 7) and a small urgent script; the script pulls in an urgent stylesheet,
/// which is asked for while the large response is being sent. A server that honours the
/// requests' urgencies sends the stylesheet before the rest of the large response; one that
/// shares its sending between responses sends it alongside; one that answers in order sends it
/// after.
pub const PRIORITY_PROBE: &str = "priorities";
pub const PRIORITY_RATE: &str = "10mbit";
pub const PRIORITY_PAGE: &str = r#"name = "priorities"

[[resource]]
id = "index.html"
type = "html"
bytes = 5000

[[resource]]
id = "bulk.bin"
type = "other"
bytes = 800000
parent = "index.html"
urgency = 7
incremental = false

[[resource]]
id = "gate.js"
type = "js"
bytes = 1000
parent = "index.html"
urgency = 0

[[resource]]
id = "urgent.css"
type = "css"
bytes = 30000
parent = "gate.js"
urgency = 0
"#;

/// What the priorities probe showed: when the urgent stylesheet, asked for while the least
/// urgent response was being sent, arrived whole, against that response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Priorities {
    /// From the stylesheet's request to its last byte, ms.
    pub urgent_ms: f64,
    /// It arrived whole before the least urgent response did.
    pub before_bulk: bool,
    /// From the stylesheet's request to the least urgent response's last byte, ms.
    pub bulk_left_ms: f64,
    /// Over QUIC, the stylesheet's share of the two responses' stream bytes the server sent
    /// while it sent the stylesheet ([`urgent_share`], from the capture opened with the key log).
    pub urgent_share: Option<f64>,
    pub urgent_share_why: Option<String>,
}

/// A sent-first response's share of the bytes sent while it was sent, at least: midway
/// between an even sharing's half and a strict order's whole (quic-go's read 0.93, aioquic's,
/// which shares, 0.51).
pub const FIRST_SHARE: f64 = 0.75;

impl Priorities {
    /// A code and words for the answer.
    fn worded(&self) -> (f64, String) {
        match (self.before_bulk, self.urgent_share) {
            (false, _) => (0.0, "after the least urgent one (in order)".into()),
            (true, Some(s)) if s >= FIRST_SHARE => (
                2.0,
                format!("sent first ({:.0} % of the bytes meanwhile)", s * 100.0),
            ),
            (true, Some(s)) => (
                1.0,
                format!(
                    "shared with the least urgent one ({:.0} % of the bytes)",
                    s * 100.0
                ),
            ),
            (true, None) => (
                1.5,
                "before the least urgent one (its share not read)".into(),
            ),
        }
    }
}

/// The priorities probe's answer, from the page record its client wrote and, over QUIC, its
/// capture opened with its key log.
fn priorities_of(dir: &Path, rec: &TrialRecord, quic: bool) -> Result<Priorities, String> {
    if let Err(why) = &rec.outcome {
        return Err(format!("the trial failed: {why}"));
    }
    let page: quiclab_pages::page_client::PageRecord = rec
        .requests
        .get(0)
        .cloned()
        .ok_or("the trial kept no page record")
        .and_then(|v| serde_json::from_value(v).map_err(|_| "the page record cannot be read"))?;
    let times = |id: &str| {
        page.resources
            .iter()
            .find(|r| r.id == id)
            .and_then(|r| Some((r.start_ms?, r.last_byte_ms?)))
            .ok_or(format!("the page record has no times for {id}"))
    };
    let (asked, urgent_done) = times("urgent.css")?;
    let (_, bulk_done) = times("bulk.bin")?;
    if asked >= bulk_done {
        return Err(
            "the stylesheet was asked for after the large response had arrived: the server \
             sent it in order before the small script that discovers the stylesheet"
                .into(),
        );
    }
    let share = if quic {
        from_capture(dir, rec, one_rtt::server_stream_data).and_then(|c| urgent_share(&c))
    } else {
        Err("TLS over TCP is not opened here".into())
    };
    Ok(Priorities {
        urgent_ms: urgent_done - asked,
        before_bulk: urgent_done < bulk_done,
        bulk_left_ms: bulk_done - asked,
        urgent_share: share.as_ref().ok().copied(),
        urgent_share_why: share.err(),
    })
}

/// The deep-queue probe's bottleneck, queue and object: slow start into 750 kB of queue on a
/// 250 kB path (a window of 1 MB overflows it, reached after about 2 MB of slow start).
/// Three path RTTs of queue: BBR's startup, its window 2.89 times the path's, keeps up to 1.89
/// path RTTs queued until its bandwidth estimate stops growing (Linux's BBR read 196 ms), which
/// a queue of two made a race with the overflow (tquic's BBR left first in 3 runs of 8). It
/// also shows the late delay-based exits: quic-go's and ngtcp2's, at 230 to 253 ms queued,
/// came after a 200 ms queue's overflow. 20 Mbit/s rather than less: Linux's Cubic leaves
/// slow start on its HyStart here (54.6 ms queued), not at 10 Mbit/s, where it filled the
/// queue in 4 runs of 4.
pub const DEEP_RATE: &str = "20mbit";
pub const DEEP_QUEUE_MS: u64 = 300;
pub const DEEP_OBJECT: &str = "4mb";
/// A peer's knob for the probes whose flight may outgrow the peer's default stream
/// flow-control window, where the peer takes it: a window far above their flights, so that
/// the sender's own window sets its flight. On the deep-queue probe, the 1 MB flight that
/// overflows the queue is near quinn's default, 1.25 MB (a quinn server once stopped doubling
/// at 189 ms queued with it). On the congestion-response probes, a sender that keeps growing
/// through a loss (tquic's BBR) reached that window by the second loss, and then a loss's hole
/// held the peer's window back for a round trip: its flight dipped to 0.83 to 0.98 of the
/// window, a dip of the peer's flow control that read as the sender's β.
pub const WIDE_PEER_WINDOW: (&str, &str) = ("quic-stream-window", "8mb");

/// A probe trial whose link the host held back, run again.
#[derive(Debug, Clone, Serialize)]
pub struct Stall {
    pub run: u32,
    pub probe: String,
    /// The trial set aside (its folder, kept where the probes are).
    pub trial: String,
    /// The latest a departure was handed over, past its time.
    pub late_ms: f64,
    /// The most its probe's reading takes ([`tolerated_lateness`]).
    pub tolerated_ms: f64,
}

/// One run of the probes: what was read from each, and the trials they were.
#[derive(Debug, Clone, Serialize)]
pub struct RunCard {
    pub wire: WireCard,
    /// The largest payload the stack sent on the jumbo probe's 9000-byte link.
    /// The largest datagram on the 1500-byte link: a client's in its clean probe, a
    /// server's in the long probe (as long a transfer as the jumbo probe's).
    pub largest_payload: u32,
    pub jumbo_largest_payload: u32,
    pub planted: FirstLossPlan,
    pub first_timeout: FirstTimeout,
    /// As a server: the losses planted and the window around the second (or why none).
    pub losses: Option<LossPlan>,
    pub response: Option<Response>,
    pub response_why: Option<String>,
    /// The response was read at the first loss, in slow start: the sender did not cut its
    /// flight there (above [`NO_CUT`] of the flight before), and the second loss gave no
    /// reading (its window outgrew the object).
    pub response_in_slow_start: bool,
    /// The flight before and after the first loss, in slow start (or why it was not read):
    /// the reading that tells whether the sender cuts its flight at a loss at all.
    pub slow_start_response: Option<Result<Response, String>>,
    /// Why the second loss gave no reading, where the answer is the first loss's.
    pub second_loss_why: Option<String>,
    /// As a QUIC server: each isolated loss planted ([`ISOLATED`], in its order) and when its
    /// bytes went out again, or why that could not be read.
    pub isolated: Vec<IsolatedRun>,
    /// As a server: the tail planted and its timer read (or why none).
    pub tail: Option<TailPlan>,
    pub tail_timeout: Option<TailTimeout>,
    /// As a server: the deep-queue probe's queueing (or why none).
    pub deep_queue: Option<DeepQueue>,
    pub deep_queue_why: Option<String>,
    /// As a client: its ClientHello in the clean probe's capture, or why it could not be read.
    pub hello: Option<Hello>,
    pub hello_why: Option<String>,
    /// As a server: its side of the handshake in the clean probe's capture (opened with the
    /// trial's key log), or why it could not be read.
    pub server_hello: Option<ServerHandshake>,
    pub server_hello_why: Option<String>,
    /// As a server: what the priorities probe showed (or why it was not asked).
    pub priorities: Option<Priorities>,
    pub priorities_why: Option<String>,
    /// As a server: what it did with the session its peer resumed (or why that was not asked).
    pub resumption: Option<Resumption>,
    pub resumption_why: Option<String>,
    /// As a server: its side of the handshake when the peer's one key share is P-256
    /// ([`RETRY_PROBE_GROUPS`]), or why it could not be read.
    pub retry_probe: Option<ServerHandshake>,
    pub retry_probe_why: Option<String>,
    /// The trials' folders, relative to the directory they ran in.
    pub trials: Vec<String>,
    /// The probe trials of this run whose link the host held back, each run again.
    pub stalls: Vec<Stall>,
}

/// One isolated-loss probe's plan and reading.
#[derive(Debug, Clone, Serialize)]
pub struct IsolatedRun {
    pub plan: Option<IsolatedPlan>,
    pub read: Option<IsolatedLoss>,
    pub why: Option<String>,
}

/// Reads a probe trial's link log, or why its trial told nothing.
fn log_of(dir: &Path, rec: &TrialRecord) -> Result<LinkLog, String> {
    if let Err(why) = &rec.outcome {
        return Err(format!("the trial failed: {why}"));
    }
    let p = dir.join(trial_folder(&rec.id)).join("events.jsonl");
    let f = std::fs::File::open(&p).map_err(|e| format!("reading {}: {e}", p.display()))?;
    LinkLog::parse(std::io::BufReader::new(f)).map_err(|e| format!("{}: {e}", p.display()))
}

/// A probe trial's capture of the client's side (`capture.pcap`) and its key log (`keys.log`,
/// empty without one), read by `read`; its errors name the capture.
fn from_capture<T>(
    dir: &Path,
    rec: &TrialRecord,
    read: impl FnOnce(&[hello::Captured], &[u8]) -> Result<T, String>,
) -> Result<T, String> {
    let folder = dir.join(trial_folder(&rec.id));
    let p = folder.join("capture.pcap");
    let bytes = std::fs::read(&p).map_err(|e| format!("reading {}: {e}", p.display()))?;
    let keylog = std::fs::read(folder.join("keys.log")).unwrap_or_default();
    hello::capture(&bytes)
        .and_then(|packets| read(&packets, &keylog))
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// The ClientHello in a probe trial's capture.
fn hello_of(dir: &Path, rec: &TrialRecord) -> Result<Hello, String> {
    from_capture(dir, rec, |packets, _| hello::client_hello(packets))
}

/// The server's handshake in a probe trial's capture, opened with the trial's key log
/// (without one, the transport parameters are said not read).
fn server_hello_of(dir: &Path, rec: &TrialRecord) -> Result<ServerHandshake, String> {
    from_capture(dir, rec, server_hello::server_hello)
}

/// The resumption probe's answer: its trial's second request, as the peer recorded it.
fn resumption_of(rec: &TrialRecord) -> Result<Resumption, String> {
    let m = rec
        .outcome
        .as_ref()
        .map_err(|why| format!("the trial failed: {why}"))?;
    let r = m.detail.requests.get(1).ok_or_else(|| {
        format!(
            "the trial's record holds {} of its {RESUMED_REQUESTS} requests",
            m.detail.requests.len()
        )
    })?;
    Ok(Resumption {
        resumed: r.resumed,
        zero_rtt_attempted: r.zero_rtt_attempted,
        zero_rtt_accepted: r.zero_rtt_accepted,
        ttfb_ms: r.ttfb_ms,
    })
}

/// How the server repaired an isolated-loss probe's loss (`behind`: the packets that showed
/// it): its trial's log, and its capture opened with its key log.
fn isolated_loss_of(
    dir: &Path,
    rec: &TrialRecord,
    path: &PathFacts,
    behind: u32,
) -> Result<IsolatedLoss, String> {
    let log = log_of(dir, rec)?;
    let carried = from_capture(dir, rec, one_rtt::server_stream_data)?;
    isolated_loss(&log, path, &carried, behind)
}

/// Where a fingerprint is in its work, for the caller's progress line.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    pub run: u32,
    pub runs: u32,
    pub probe: &'a str,
}

/// Runs one probe's trial (in the directory given to [`fingerprint`], writing its link's
/// events): its record, or why it did not run.
pub type RunTrial<'a> = dyn FnMut(&Plan, &TrialSpec, Step) -> Result<Box<TrialRecord>, String> + 'a;

/// How many times a probe whose link was held back by the host (a departure handed over later
/// than [`tolerated_lateness`] allows its reading) is run again before its reading stands.
/// On the 2-core VM 28 and 36 of some 430 probe trials in two sittings had departures 50 to
/// 103 ms late, and three of the second sitting's eight disagreeing runs were among them:
/// quic-go's clean probe sending no path-MTU probe, ngtcp2's first loss planted a round trip
/// early (its flight then read 0.94 of the one before), s2n-quic's deep-queue exit at 5 ms
/// queued.
pub const STALL_RERUNS: u32 = 2;

/// How late the host may hand a probe's departures over and its reading still stand: no more
/// than half the tolerance of the items read from it, so that two runs held back by as much
/// still agree. A departure handed over late delays what the endpoint sees by as much, and the
/// endpoint's answer by as much at most. Where a probe is not named here, the least the link
/// logs ([`quiclab_link::event::LATE_EVENT`], 2 ms): a probe added is held to the strictest.
/// On the 2-core VM, when every departure 2 ms late had its trial run again, 117 of 361 probe
/// trials in two sittings were, 94 of them from the probes that run long (the jumbo and long
/// probes' 5 MB, the deep queue's 4 MB), and 111 were less than 5 ms late; those read only the
/// largest datagram or a queueing delay of 100 ms or more.
pub fn tolerated_lateness(probe: &str, role: Role) -> std::time::Duration {
    use std::time::Duration;
    match probe {
        // the largest datagram: a path-MTU search runs on round trips' timers (quic-go's one
        // probe every 5 smoothed RTTs); the stalls that once stopped one were 50 to 103 ms
        probe::JUMBO | probe::LONG => Duration::from_millis(20),
        // a client's clean probe, a 5 MB download: its hello (no timing), largest datagram and
        // data packets per acknowledgement (±20 % of some 3,600 packets; 10 ms holds back 8
        // packets at 10 Mbit/s)
        probe::CLEAN if role == Role::Client => Duration::from_millis(10),
        // the handshake's words; the resumed first byte's round trips (±0.1: 10 ms); where the
        // urgent response arrives (a round trip wide); where the isolated losses go (indices)
        probe::P256_SHARE | RESUMPTION_PROBE | PRIORITY_PROBE | probe::SMALL_CLEAN => {
            Duration::from_millis(10)
        }
        // a first timer of 200 ms or more (±10 %); the queueing at slow start's end (a round
        // trip of slow start: up to twice the less and a path RTT more)
        probe::FIRST_FLIGHTS_LOST | probe::DEEP_QUEUE => Duration::from_millis(10),
        // the tail's timer (±(10 ms + 10 %)); β, from flights a round trip (100 ms) long
        // (±0.05)
        probe::TAIL_LOST | probe::ONE_LOSS | probe::TWO_LOSSES => Duration::from_millis(5),
        // a server's first round trip of data, its span read ±(2 ms + 20 %); an isolated
        // loss's repair, 12.5 ms after an acknowledgement (±5 ms)
        _ => quiclab_link::event::LATE_EVENT,
    }
}

/// The latest a departure of a trial's link was handed over, past its time, as its events
/// (`events.jsonl`) log it, in nanoseconds (none: nothing was late by
/// [`quiclab_link::event::LATE_EVENT`] or more).
pub fn stall_in(p: &Path) -> Result<Option<u64>, String> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
    let mut most = None;
    for line in text.lines().filter(|l| l.contains("\"late\"")) {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("{}: {e}", p.display()))?;
        if v["event"] == "late" {
            let by = v["by_ns"].as_u64().unwrap_or(0);
            most = Some(most.map_or(by, |m: u64| m.max(by)));
        }
    }
    Ok(most)
}

/// How late the host handed over a departure of a trial, from its events (`events.jsonl`),
/// in nanoseconds, where that is more than its probe's reading takes (`tolerated`,
/// [`tolerated_lateness`]); none: it ran on time enough.
pub fn held_back(p: &Path, tolerated: std::time::Duration) -> Result<Option<u64>, String> {
    Ok(stall_in(p)?.filter(|&by| u128::from(by) > tolerated.as_nanos()))
}

/// Runs the probes `runs` times through `run_trial` (which runs one trial in `dir`, writing
/// its link's events) and makes the card. `Err` says which probe told nothing and why.
pub fn fingerprint(
    subject: &Subject,
    runs: u32,
    dir: &Path,
    run_trial: &mut RunTrial,
) -> Result<Card, String> {
    // a probe whose link the host held back is run again, as a trial of its own: what it read
    // was the host's stall, not the stack
    let stalled = std::cell::RefCell::new(Vec::new());
    let mut run_trial =
        |plan: &Plan, spec: &TrialSpec, step: Step| -> Result<Box<TrialRecord>, String> {
            let mut again = spec.clone();
            let tolerated = tolerated_lateness(step.probe, subject.role);
            for n in 1..=STALL_RERUNS + 1 {
                let rec = run_trial(plan, &again, step)?;
                let events = dir.join(trial_folder(&rec.id)).join("events.jsonl");
                match held_back(&events, tolerated) {
                    Ok(Some(by)) if n <= STALL_RERUNS => {
                        stalled.borrow_mut().push(Stall {
                            run: step.run,
                            probe: step.probe.to_string(),
                            trial: trial_folder(&rec.id),
                            late_ms: by as f64 / 1e6,
                            tolerated_ms: tolerated.as_secs_f64() * 1e3,
                        });
                        again.id = format!("{}-again{n}", spec.id);
                    }
                    _ => return Ok(rec),
                }
            }
            unreachable!("the last try returns")
        };
    let run_trial = &mut run_trial;
    let path = subject.path();
    let framing = subject.framing();
    let mut cards = Vec::new();
    for run in 0..runs {
        let step = |probe| Step {
            run: run + 1,
            runs,
            probe,
        };
        let (plan, spec) = subject.probe(probe::CLEAN, &[], run, subject.object())?;
        let rec = run_trial(&plan, &spec, step(probe::CLEAN))?;
        let clean_log =
            log_of(dir, &rec).map_err(|e| format!("the clean probe (run {}): {e}", run + 1))?;
        let clean = wire(&clean_log, &path, &framing)
            .map_err(|e| format!("the clean probe (run {}): {e}", run + 1))?;
        let (hello, hello_why) = match subject.role {
            Role::Client => match hello_of(dir, &rec) {
                Ok(h) => (Some(h), None),
                Err(e) => (None, Some(e)),
            },
            Role::Server => (None, None),
        };
        let (server_hello, server_hello_why) = match subject.role {
            Role::Server => match server_hello_of(dir, &rec) {
                Ok(h) => (Some(h), None),
                Err(e) => (None, Some(e)),
            },
            Role::Client => (None, None),
        };
        let mut trials = vec![trial_folder(&rec.id)];
        // the retry probe: the peer's one key share is P-256, x25519 listed after it
        let (mut retry_probe, mut retry_probe_why) = (None, None);
        let peer_sets_groups = subject.peer.knobs().iter().any(|k| k.key == "groups");
        if subject.role == Role::Server && !peer_sets_groups {
            retry_probe_why = Some(format!(
                "its peer here, {}, takes no key-exchange groups to offer",
                subject.peer.name()
            ));
        } else if subject.role == Role::Server {
            let mut peer = subject.clone();
            peer.knobs.retain(|(k, _)| k != "groups");
            peer.knobs
                .push(("groups".into(), RETRY_PROBE_GROUPS.into()));
            let (p, sp) = peer.probe(probe::P256_SHARE, &[], run, RETRY_PROBE_OBJECT)?;
            let r = run_trial(&p, &sp, step(probe::P256_SHARE))?;
            trials.push(trial_folder(&r.id));
            match server_hello_of(dir, &r) {
                Ok(h) => retry_probe = Some(h),
                Err(e) => retry_probe_why = Some(e),
            }
        }
        // resumption: two GETs, the second on a new connection resuming the first's session
        let (mut resumption, mut resumption_why) = (None, None);
        if subject.role == Role::Server && !subject.peer.resumes() {
            resumption_why = Some(format!(
                "its peer here, {}, does not resume sessions",
                subject.peer.name()
            ));
        } else if subject.role == Role::Server {
            let (p, sp) = subject.resumption_probe(run, RESUMPTION_OBJECT)?;
            let r = run_trial(&p, &sp, step(RESUMPTION_PROBE))?;
            trials.push(trial_folder(&r.id));
            match resumption_of(&r) {
                Ok(x) => resumption = Some(x),
                Err(e) => resumption_why = Some(e),
            }
        }
        // priorities: a page load whose urgent stylesheet is asked for while a least urgent
        // response is being sent
        let (mut priorities, mut priorities_why) = (None, None);
        if subject.role == Role::Server
            && !Capability::any_covers(subject.peer.capabilities(), Capability::PageLoad)
        {
            priorities_why = Some(format!(
                "its peer here, {}, loads no pages",
                subject.peer.name()
            ));
        } else if subject.role == Role::Server {
            // a stack whose server loads no pages is refused by the probe's plan: the item
            // says so
            let manifest = dir.join("priorities-page.toml");
            match subject.priority_probe(run, &manifest) {
                Ok((p, sp)) => {
                    let r = run_trial(&p, &sp, step(PRIORITY_PROBE))?;
                    trials.push(trial_folder(&r.id));
                    let quic = subject.http.transport() == Transport::Quic;
                    match priorities_of(dir, &r, quic) {
                        Ok(x) => priorities = Some(x),
                        Err(e) => priorities_why = Some(e),
                    }
                }
                Err(e) => priorities_why = Some(e),
            }
        }
        // path MTU discovery: the same transfer where the link takes 9000-byte packets
        let (p, sp) = subject.probe(probe::JUMBO, &subject.jumbo_keys(), run, LONG_OBJECT)?;
        let r = run_trial(&p, &sp, step(probe::JUMBO))?;
        trials.push(trial_folder(&r.id));
        let jumbo = log_of(dir, &r)
            .and_then(|log| wire(&log, &path, &framing))
            .map_err(|e| format!("the jumbo probe (run {}): {e}", run + 1))?;
        // a server's largest datagram on the 1500-byte link: over a transfer as long as the
        // jumbo probe's (its clean one, without a rate limit, is over in six round trips, and
        // quic-go's path-MTU search had sent its first probe, 1366 bytes, in 7 runs of 8, and
        // none in the other); a client's clean probe is that long already
        let largest_payload = match subject.role {
            Role::Client => clean.client_largest_payload,
            Role::Server => {
                let (p, sp) = subject.probe(probe::LONG, &subject.long_keys(), run, LONG_OBJECT)?;
                let r = run_trial(&p, &sp, step(probe::LONG))?;
                trials.push(trial_folder(&r.id));
                log_of(dir, &r)
                    .and_then(|log| wire(&log, &path, &framing))
                    .map_err(|e| format!("the long probe (run {}): {e}", run + 1))?
                    .server_largest_payload
            }
        };
        // a probe whose planted event missed (a busy host split a flight the clean probe sent
        // whole, or the other way round) is run once more, as a seed of its own, planted from
        // its own first flights
        let mut planted = FirstLossPlan::of(&clean);
        let mut timeout = None;
        for attempt in 0..ATTEMPTS {
            let (p, sp) = subject.probe(
                probe::FIRST_FLIGHTS_LOST,
                &planted.link_keys(),
                run + 100 * attempt,
                OBJECT,
            )?;
            let r = run_trial(&p, &sp, step(probe::FIRST_FLIGHTS_LOST))?;
            trials.push(trial_folder(&r.id));
            let lost = log_of(dir, &r)
                .map_err(|e| format!("the first-flights-lost probe (run {}): {e}", run + 1))?;
            let t = first_timeout(&lost, &planted);
            let told = match subject.role {
                Role::Server => t.server_ms.is_some(),
                Role::Client => t.client_ms.is_some(),
            };
            timeout = Some(t);
            if told {
                break;
            }
            planted = FirstLossPlan::of_log(&lost);
        }
        let (mut losses, mut resp, mut response_why) = (None, None, None);
        let mut response_in_slow_start = false;
        let mut slow_start_response = None;
        let mut second_loss_why = None;
        let quic = subject.http.transport() == Transport::Quic;
        let (mut tail, mut tail_read) = (None, None);
        let (mut deep, mut deep_why) = (None, None);
        let mut isolated = Vec::new();
        if subject.role == Role::Server {
            let keys = [
                ("down-rate", DEEP_RATE.to_string()),
                ("down-queue", format!("{DEEP_QUEUE_MS}ms")),
            ];
            let wide = subject.with_wide_peer_window();
            let (p, sp) = wide.probe(probe::DEEP_QUEUE, &keys, run, DEEP_OBJECT)?;
            let r = run_trial(&p, &sp, step(probe::DEEP_QUEUE))?;
            trials.push(trial_folder(&r.id));
            match log_of(dir, &r).and_then(|log| deep_queue(&log, &path, &framing)) {
                Ok(q) => deep = Some(q),
                Err(e) => deep_why = Some(e),
            }
            // the tail: a probe whose last flight came out later or longer than the clean
            // probe's (its blackout ended before the transfer's end) runs once more; one that
            // lost no data (the server sent fewer bytes before its tail than the clean probe:
            // msquic's once did, a clean transfer 10 kB longer than the others having planned
            // it) is a clean transfer itself, and plans the next try. The peer's window is
            // wide (where it takes the knob): its client then sends nothing but
            // acknowledgements over the 1 MB (quinn announces more window only once an eighth
            // of it is read), so that the server's last packet that arms its timer is its last
            // data. With quinn's default window the client's MAX_STREAM_DATA frames had the
            // server acknowledge them within the tail, and aioquic bundles a PING with an
            // acknowledgement of several ranges when its packet number is a multiple of 8
            // (an ACK-of-ACK trigger): that PING, the blackout's too, re-armed its timer 32 ms
            // after its last data, and its tail read 160 ms in 2 runs of 6, 127 to 129 in the
            // others (its qlog: the same 128 ms timer in all six)
            let mut plan = TailPlan::of(&clean_log, &path, &framing)
                .map_err(|e| format!("the tail probe (run {}): {e}", run + 1))?;
            for attempt in 0..ATTEMPTS {
                tail = Some(plan);
                let (p, sp) = wide.probe(
                    probe::TAIL_LOST,
                    &plan.link_keys(),
                    run + 100 * attempt,
                    OBJECT,
                )?;
                let r = run_trial(&p, &sp, step(probe::TAIL_LOST))?;
                trials.push(trial_folder(&r.id));
                let log = log_of(dir, &r)
                    .map_err(|e| format!("the tail-lost probe (run {}): {e}", run + 1))?;
                let t = tail_timeout(&log, &plan, &framing);
                let told = t.ms.is_some();
                if t.data_dropped == 0
                    && let Ok(next) = TailPlan::of(&log, &path, &framing)
                {
                    plan = next;
                }
                tail_read = Some(t);
                if told {
                    break;
                }
            }
            // isolated losses: planted from a small clean transfer's log, each run once more,
            // planted from its own log, where it landed elsewhere than its plan said
            if quic {
                let (p, sp) = subject.probe(probe::SMALL_CLEAN, &[], run, ISOLATED_OBJECT)?;
                let r = run_trial(&p, &sp, step(probe::SMALL_CLEAN))?;
                trials.push(trial_folder(&r.id));
                let small = log_of(dir, &r);
                for (probe, behind) in ISOLATED {
                    let mut plan = small
                        .as_ref()
                        .map_err(Clone::clone)
                        .and_then(|log| IsolatedPlan::of(log, &path, &framing, behind));
                    let mut out = IsolatedRun {
                        plan: None,
                        read: None,
                        why: None,
                    };
                    for attempt in 0..ISOLATED_ATTEMPTS {
                        let planted = match &plan {
                            Ok(p) => *p,
                            Err(e) => {
                                out.why = Some(e.clone());
                                break;
                            }
                        };
                        out.plan = Some(planted);
                        let (p, sp) = subject.probe(
                            probe,
                            &planted.link_keys(),
                            run + 100 * attempt,
                            ISOLATED_OBJECT,
                        )?;
                        let r = run_trial(&p, &sp, step(probe))?;
                        trials.push(trial_folder(&r.id));
                        match isolated_loss_of(dir, &r, &path, behind) {
                            Ok(x) => {
                                out.read = Some(x);
                                out.why = None;
                                break;
                            }
                            Err(e) => {
                                out.why = Some(e);
                                plan = log_of(dir, &r).and_then(|log| {
                                    IsolatedPlan::of(&log, &path, &framing, behind)
                                });
                            }
                        }
                    }
                    isolated.push(out);
                }
            }
            let mut size = response_object(clean.first_data_flight.map_or(0, |f| f.bytes));
            // (the second value: read at the first loss, which did not cut the flight)
            let mut respond = |seed: u32, size: &str| -> Result<(Response, bool), String> {
                second_loss_why = None;
                let first = LossPlan::first_of(&clean_log, &path, &framing)?;
                losses = Some(first);
                let (p, s) = wide.probe(probe::ONE_LOSS, &first.link_keys(), seed, size)?;
                let r = run_trial(&p, &s, step(probe::ONE_LOSS))?;
                trials.push(trial_folder(&r.id));
                let once = log_of(dir, &r)?;
                // the flight at the first loss, in slow start: a sender that cuts there shows
                // it (but a paced one whose flight lagged its window may not: ngtcp2's read
                // 0.94 once, 0.70 to 0.81 in the others), and one that keeps its flight
                // through a loss (BBR's startup) reads about 1
                let at_first = first
                    .index_in(&once, first.first)
                    .and_then(|i| response_at(&once, &path, &framing, i));
                slow_start_response = Some(at_first.clone());
                if let Err(e) = &at_first
                    && e == ENDED_TOO_SOON
                {
                    return Err(e.clone());
                }
                let kept = at_first.as_ref().ok().filter(|x| x.beta > NO_CUT).copied();
                // the second loss, in congestion avoidance, where the flight is the window,
                // gives β; where it cannot be read (a window that outgrew the object: Linux's
                // BBR even with 32 MB) a flight kept through the first stands as no cut
                let second = (|| {
                    let plan = first.then(&once, &path, &framing)?;
                    losses = Some(plan);
                    let (p, s) = wide.probe(probe::TWO_LOSSES, &plan.link_keys(), seed, size)?;
                    let r = run_trial(&p, &s, step(probe::TWO_LOSSES))?;
                    trials.push(trial_folder(&r.id));
                    response(&log_of(dir, &r)?, &path, &framing, &plan)
                })();
                match (second, kept) {
                    (Ok(x), _) => Ok((x, false)),
                    (Err(e), Some(x)) => {
                        second_loss_why = Some(e);
                        Ok((x, true))
                    }
                    (Err(e), None) => Err(e),
                }
            };
            for attempt in 0..ATTEMPTS {
                match respond(run + 100 * attempt, &size) {
                    Ok((r, at_first)) => {
                        resp = Some(r);
                        response_in_slow_start = at_first;
                        response_why = None;
                        break;
                    }
                    Err(e) => {
                        // a window that outgrew the object (no cut at the first loss): the
                        // next attempt fetches twice as much
                        if e == ENDED_TOO_SOON {
                            size = bigger_object(&size);
                        }
                        response_why = Some(e);
                    }
                }
            }
        }
        cards.push(RunCard {
            largest_payload,
            jumbo_largest_payload: match subject.role {
                Role::Server => jumbo.server_largest_payload,
                Role::Client => jumbo.client_largest_payload,
            },
            wire: clean,
            planted,
            first_timeout: timeout.expect("at least one attempt"),
            losses,
            response: resp,
            response_why,
            response_in_slow_start,
            slow_start_response,
            second_loss_why,
            isolated,
            tail,
            tail_timeout: tail_read,
            deep_queue: deep,
            deep_queue_why: deep_why,
            hello,
            hello_why,
            server_hello,
            server_hello_why,
            retry_probe,
            retry_probe_why,
            resumption,
            resumption_why,
            priorities,
            priorities_why,
            trials,
            stalls: stalled.borrow_mut().drain(..).collect(),
        });
    }
    Ok(Card {
        stack: subject.stack.name().to_string(),
        implementation: subject.stack.implementation().to_string(),
        role: subject.role,
        peer: subject.peer.name().to_string(),
        http: subject.http.title().to_string(),
        knobs: subject.knobs.clone(),
        path: match subject.rate() {
            Some(r) => format!(
                "{ONE_WAY_MS} ms each way, {r}, one GET of {} ({OBJECT} with its first flights lost)",
                subject.object()
            ),
            None => format!(
                "{ONE_WAY_MS} ms each way, no rate limit, one GET of {OBJECT} (the long and jumbo \
                 probes': {LONG_OBJECT} at {} Mbit/s)",
                CLIENT_RATE_BPS / 1_000_000
            ),
        },
        items: items(
            subject.role,
            subject.http.transport() == Transport::Quic,
            &cards,
        ),
        runs: cards
            .iter()
            .map(|c| serde_json::to_value(c).unwrap_or_default())
            .collect(),
    })
}

/// The largest datagram on the jumbo probe's link.
fn jumbo(runs: &[RunCard]) -> Item {
    Item::new(
        "jumbo_largest_payload",
        "largest datagram, 9000-byte link (path MTU discovery)",
        "bytes",
        Tolerance::Exact,
        runs.iter()
            .map(|r| Some(r.jumbo_largest_payload as f64))
            .collect(),
        None,
    )
}

/// The isolated-loss probes' items: for each, when the lost bytes went out again from the
/// sending, in words with the time from the acknowledgement that could first declare the loss
/// (the first packet behind it's for the time threshold, the third's for the packet
/// threshold). That second time is the reading's condition, not its answer: a paced sender
/// spaces the packets behind the loss (aioquic's read 3.3 and 14.5 ms after the one behind's
/// acknowledgement, each 113.6 to 114.6 ms after the sending).
fn isolated_items(runs: &[RunCard]) -> Vec<Item> {
    // each probe's time from the acknowledgement that could first declare its loss: the first
    // packet behind it's (a time threshold), or the third's (the packet threshold)
    let item =
        |k: usize, key: &str, label: &str, after: &str, from: fn(&LossDetection) -> Option<f64>| {
            let (ms, words) = worded(runs, |r| {
                let d = r.isolated.get(k)?.read.as_ref()?.detection;
                let from = from(&d);
                let ack = from.map_or(String::new(), |a| format!(", {a:.1} ms after {after}"));
                Some((d.ms, format!("{:.1} ms{ack}", d.ms)))
            });
            Item::new(
                key,
                label,
                "ms",
                Tolerance::Share(0.1),
                ms,
                runs.iter()
                    .find_map(|r| r.isolated.get(k).and_then(|i| i.why.clone())),
            )
            .with_words(words)
        };
    vec![
        item(
            0,
            "lone_loss_retransmit",
            "a loss one packet shows, nothing more to send: from the lost packet to its bytes sent again (RFC 9002's time threshold: 9/8 RTT)",
            "that packet's acknowledgement",
            |d| d.after_first_ms,
        ),
        item(
            1,
            "three_behind_retransmit",
            "a loss three packets show, nothing more to send: from the lost packet to its bytes sent again (RFC 9002's packet threshold: a round trip)",
            "the third's acknowledgement",
            |d| d.after_third_ms,
        ),
    ]
}

/// A transport parameter's card item: its key, label, unit and where it is in the parameters.
type Param = (
    &'static str,
    &'static str,
    &'static str,
    fn(&TransportParams) -> u64,
);

/// Items of transport parameters, each run's read by `get` (`why`: why a run has none).
fn param_items(
    runs: &[RunCard],
    get: &dyn Fn(&RunCard) -> Option<TransportParams>,
    why: Option<String>,
    params: &[Param],
) -> Vec<Item> {
    params
        .iter()
        .map(|(key, label, unit, f)| {
            Item::new(
                key,
                label,
                unit,
                Tolerance::Exact,
                runs.iter().map(|r| get(r).map(|p| f(&p) as f64)).collect(),
                why.clone(),
            )
        })
        .collect()
}

/// Each run's answer as a number and the words it stands for (`None`: the run could not tell).
fn worded(
    runs: &[RunCard],
    f: impl Fn(&RunCard) -> Option<(f64, String)>,
) -> (Vec<Option<f64>>, Vec<Option<String>>) {
    runs.iter()
        .map(|r| f(r).map_or((None, None), |(n, w)| (Some(n), Some(w))))
        .unzip()
}

/// A server's handshake items, from its ServerHello (and over QUIC its transport parameters):
/// each named list is a code per answer (equal for equal answers), with its words.
fn server_handshake_items(runs: &[RunCard], quic: bool) -> Vec<Item> {
    let why = runs.iter().find_map(|r| r.server_hello_why.clone());
    let named = |f: &dyn Fn(&ServerHandshake) -> (f64, String)| {
        worded(runs, |r| r.server_hello.as_ref().map(f))
    };
    let mut out = Vec::new();
    let (codes, words) = named(&|h| (f64::from(h.group), hello::group_name(h.group)));
    out.push(
        Item::new(
            "server_group",
            "key-exchange group it chose (ServerHello; offered: the peer's default)",
            "group",
            Tolerance::Exact,
            codes,
            why.clone(),
        )
        .with_words(words),
    );
    let (codes, words) = named(&|h| match h.retry_group {
        Some(g) => (f64::from(g), format!("asks for {}", hello::group_name(g))),
        None => (0.0, "none".to_string()),
    });
    out.push(
        Item::new(
            "hello_retry",
            "HelloRetryRequest to the peer's first share",
            "group",
            Tolerance::Exact,
            codes,
            why.clone(),
        )
        .with_words(words),
    );
    let (codes, words) = named(&|h| {
        (
            f64::from(h.cipher_suite),
            server_hello::suite_name(h.cipher_suite),
        )
    });
    out.push(
        Item::new(
            "cipher_suite",
            "cipher suite it chose",
            "suite",
            Tolerance::Exact,
            codes,
            why.clone(),
        )
        .with_words(words),
    );
    // the retry probe: what the server does with a P-256 share when it could have x25519
    let retry_why = runs.iter().find_map(|r| r.retry_probe_why.clone());
    let (codes, words) = worded(runs, |r| {
        r.retry_probe.as_ref().map(|h| match h.retry_group {
            Some(g) => (f64::from(g), format!("asks for {}", hello::group_name(g))),
            None => (
                f64::from(h.group),
                format!("takes {}", hello::group_name(h.group)),
            ),
        })
    });
    out.push(
        Item::new(
            "retry_to_p256",
            "to a P-256 share, x25519 listed second: the group it takes, or asks for (HelloRetryRequest)",
            "group",
            Tolerance::Exact,
            codes,
            retry_why,
        )
        .with_words(words),
    );
    // the priorities probe: the urgent stylesheet against the least urgent response
    let priorities_why = runs.iter().find_map(|r| r.priorities_why.clone());
    let (codes, words) = worded(runs, |r| {
        r.priorities.as_ref().map(|p| {
            let (code, words) = p.worded();
            // its time is the answer's words: it moves with how full the sender keeps the
            // bottleneck's queue ahead of it (quinn with a 20 KB initial window and NewReno
            // read 210.1 and 164.6 ms)
            (
                code,
                format!("{words}, {:.0} ms from its request", p.urgent_ms),
            )
        })
    });
    out.push(
        Item::new(
            "priorities",
            "an urgent response (RFC 9218 urgency 0, 30 kB) asked for while a least urgent one (7, 800 kB) is being sent, at 10 Mbit/s",
            "answer",
            Tolerance::Exact,
            codes,
            priorities_why,
        )
        .with_words(words),
    );
    // the resumption probe: what the server does with a resumed session, and when the
    // resumed request's first byte came, in round trips of the path
    let resumption_why = runs.iter().find_map(|r| r.resumption_why.clone());
    let (codes, words) = worded(runs, |r| r.resumption.map(|x| x.worded()));
    out.push(
        Item::new(
            "zero_rtt",
            "its peer's second connection, resuming the first's session: 0-RTT accepted, refused, or not possible",
            "answer",
            Tolerance::Exact,
            codes,
            resumption_why.clone(),
        )
        .with_words(words),
    );
    let rtt_ms = (2 * ONE_WAY_MS) as f64;
    out.push(Item::new(
        "resumed_ttfb",
        "the second connection's request: its first byte from its start (1 round trip with 0-RTT, 2 without over QUIC, 3 over TCP with TLS)",
        "round trips",
        Tolerance::Within(0.25),
        runs.iter()
            .map(|r| r.resumption.map(|x| (x.ttfb_ms / rtt_ms * 100.0).round() / 100.0))
            .collect(),
        resumption_why,
    ));
    if quic {
        let params_why = why.or_else(|| {
            runs.iter()
                .find_map(|r| r.server_hello.as_ref().and_then(|h| h.quic_why.clone()))
        });
        out.extend(param_items(
            runs,
            &|r| r.server_hello.as_ref().and_then(|h| h.quic),
            params_why,
            &[
                (
                    "max_data",
                    "connection flow-control limit on what the client sends (initial_max_data)",
                    "bytes",
                    |p| p.max_data,
                ),
                (
                    "max_stream_data",
                    "limit on each request the client sends (initial_max_stream_data_bidi_remote)",
                    "bytes",
                    |p| p.max_stream_data_bidi_remote,
                ),
                (
                    "max_streams_bidi",
                    "requests a client may have open at once (initial_max_streams_bidi)",
                    "streams",
                    |p| p.max_streams_bidi,
                ),
                (
                    "max_ack_delay",
                    "max_ack_delay it announces (the client's PTO adds it)",
                    "ms",
                    |p| p.max_ack_delay_ms,
                ),
                (
                    "idle_timeout",
                    "idle timeout it announces (0: none)",
                    "ms",
                    |p| p.idle_timeout_ms,
                ),
            ],
        ));
    }
    out
}

/// The card's items for `role` from each run's answers (`quic`: the probes spoke QUIC, whose
/// hello carries transport parameters).
fn items(role: Role, quic: bool, runs: &[RunCard]) -> Vec<Item> {
    let each = |f: &dyn Fn(&RunCard) -> Option<f64>| runs.iter().map(f).collect::<Vec<_>>();
    let why_of =
        |f: &dyn Fn(&FirstTimeout) -> Option<String>| runs.iter().find_map(|r| f(&r.first_timeout));
    // what each side shows of itself: its first flight, its first and largest datagrams
    let own = |r: &RunCard| match role {
        Role::Server => (
            r.wire.server_first_flight,
            r.wire.server_first_payload,
            r.wire.server_largest_payload,
        ),
        Role::Client => (
            r.wire.client_first_flight,
            r.wire.client_first_payload,
            r.wire.client_largest_payload,
        ),
    };
    let packet = runs.iter().map(|r| own(r).2).max().unwrap_or(0) as f64;
    let flight_label = match role {
        Role::Server => "first flight",
        Role::Client => "first flight (hello)",
    };
    let mut out = vec![
        Item::new(
            "first_flight_packets",
            flight_label,
            "packets",
            Tolerance::Exact,
            each(&|r| Some(own(r).0.packets as f64)),
            None,
        ),
        Item::new(
            "first_flight_bytes",
            flight_label,
            "bytes",
            Tolerance::Bytes(packet),
            each(&|r| Some(own(r).0.bytes as f64)),
            None,
        ),
        Item::new(
            "first_payload",
            "first datagram",
            "bytes",
            Tolerance::Exact,
            each(&|r| Some(own(r).1 as f64)),
            None,
        ),
        Item::new(
            "largest_payload",
            "largest datagram",
            "bytes",
            Tolerance::Exact,
            each(&|r| Some(r.largest_payload as f64)),
            None,
        ),
        jumbo(runs),
    ];
    match role {
        Role::Server => {
            let flight = |r: &RunCard| r.wire.first_data_flight;
            out.push(Item::new(
                "initial_window",
                "initial window (first round trip of data)",
                "bytes",
                Tolerance::Bytes(packet),
                each(&|r| flight(r).map(|f| f.bytes as f64)),
                None,
            ));
            out.push(Item::new(
                "first_flight_span",
                "first round trip of data sent over",
                "ms",
                // the host wakes a pacing timer late now and then: a millisecond or two on
                // any flight, and more over a paced one's many wake-ups (quic-go's 37.1 to
                // 41.7 ms, Linux BBR's 5.0 to 7.3 ms)
                Tolerance::WithinPlusShare(2.0, 0.2),
                each(&|r| flight(r).map(|f| f.span_us as f64 / 1000.0)),
                None,
            ));
            // The burst a sender chooses is its first round trip's: later bursts also hold
            // what the acknowledgements' timing lets out at once, which moves with the host's
            // scheduling of both endpoints (an unpaced sender's read 29 and 54 packets in two
            // runs).
            out.push(Item::new(
                "first_burst",
                "largest burst in the first round trip of data",
                "packets",
                // a pacer's timer woken late lets a few more packets out together: quic-go's
                // read 9, 10, 12 and 12 in four runs
                Tolerance::WithinPlusShare(2.0, 0.2),
                each(&|r| flight(r).map(|f| f64::from(f.largest_burst))),
                None,
            ));
            // Later, whether it paces: a pacer spreads a round trip's data over the round trip,
            // in bursts of its own choosing, where an unpaced sender lets its data out as the
            // acknowledgements come, in bursts whose length moves with how the hosts schedule
            // both endpoints (quiche's typical burst read 30 and 132 packets in two runs, 47 to
            // 126 in four; Linux Cubic's 87 and 127). The answer is yes or no; the share and the
            // typical burst (the packet-weighted median, which read the same in four runs of
            // each paced stack, 2 to 10 packets, and ngtcp2's GSO batches 32 to 45) are its
            // words
            let (paces, words) = worded(runs, |r| {
                let (share, packets) = r.wire.busiest_tenth?;
                let burst = r.wire.typical_burst.map_or(String::new(), |b| {
                    format!(", its typical packet in a burst of {b}")
                });
                let yes = share < PACED_BELOW;
                Some((
                    if yes { 1.0 } else { 0.0 },
                    format!(
                        "{}: {:.0} % of its fullest round trip ({packets} packets) within a tenth of it{burst}",
                        if yes { "yes" } else { "no" },
                        share * 100.0
                    ),
                ))
            });
            out.push(
                Item::new(
                    "paces",
                    "paces: spreads a round trip's data over it (less than half of its fullest round trip within a tenth of one)",
                    "yes/no",
                    Tolerance::Exact,
                    paces,
                    None,
                )
                .with_words(words),
            );
            // β with the window it was read at: that window is where the sender stood when
            // the loss came (where slow start ended moves with the host's timing by a few
            // packets, and the window four round trips later with it: one CI run read 66.8
            // and 84.2 KB for quinn), not a choice of its own, so it is the answer's words,
            // not an answer checked between runs
            let (beta, words) = worded(runs, |r| {
                r.response.map(|x| {
                    let window = x.before_bytes as f64 / 1000.0;
                    if r.response_in_slow_start {
                        (
                            1.0,
                            format!(
                                "no cut at a loss in slow start, its flight {:.2} × the {window:.1} KB before it",
                                x.beta
                            ),
                        )
                    } else if x.beta > NO_CUT {
                        (
                            1.0,
                            format!("no cut ({:.2} of a {window:.1} KB window)", x.beta),
                        )
                    } else {
                        (
                            x.beta,
                            format!("{:.2} (of a {window:.1} KB window)", x.beta),
                        )
                    }
                })
            });
            out.push(
                Item::new(
                    "beta",
                    "window after a loss / before it (β), congestion avoidance",
                    "ratio",
                    Tolerance::Within(0.05),
                    beta,
                    runs.iter().find_map(|r| r.response_why.clone()),
                )
                .with_words(words),
            );
            out.push(Item::new(
                "first_pto",
                "first retransmission timer (first flight lost)",
                "ms",
                Tolerance::Share(0.1),
                each(&|r| r.first_timeout.server_ms),
                why_of(&|t| t.server_why.clone()),
            ));
            // one typical burst of its largest packets at the deep queue's rate, ms
            let deep_rate: quiclab_link::units::Rate =
                DEEP_RATE.parse().expect("the deep queue's rate is a rate");
            let most_burst = runs
                .iter()
                .filter_map(|r| r.wire.typical_burst)
                .max()
                .unwrap_or(1);
            let burst_ms = deep_rate
                .serialisation(u64::from(most_burst) * (packet as u64 + 28))
                .as_secs_f64()
                * 1000.0;
            let burst_ms = (burst_ms * 10.0).ceil() / 10.0;
            let (left, words) = worded(runs, |r| {
                r.deep_queue.map(|q| {
                    let (yes, how) = match q.ended {
                        SlowStartEnd::Left => (1.0, "yes: its flight stopped doubling"),
                        SlowStartEnd::Overflow => (0.0, "no: the queue overflowed"),
                        SlowStartEnd::TransferEnded => (0.0, "no: the transfer ended first"),
                    };
                    (yes, format!("{how} in round trip {}", q.round + 1))
                })
            });
            out.push(
                Item::new(
                    "slow_start_exit",
                    "left slow start before the deep queue overflowed (on delay, bandwidth or a window cap)",
                    "yes/no",
                    Tolerance::Exact,
                    left,
                    runs.iter().find_map(|r| r.deep_queue_why.clone()),
                )
                .with_words(words),
            );
            out.push(Item::new(
                "deep_queue_exit",
                "queueing when its slow start ended (20 Mbit/s, 300 ms queue: all of it without a delay-based exit)",
                "ms",
                // a round trip of slow start more or less: an exit on a delay signal is
                // decided by whether a round trip's RTT samples show the queue, and one that
                // misses a round trip comes after one more doubling, with twice the queue and a
                // path RTT's more (Linux's Cubic read 54.6 ms in 14 runs of 16 and 155 ms in 2;
                // ngtcp2's HyStart++ set its threshold at 107 and 109 ms queued in 2 runs of
                // 10, and in the others its window stopped at its cap, 2.89 times its largest
                // delivery rate's window, with 238 to 247 ms queued); and the exit comes
                // between two of its bursts, and the queue holds a burst more or less
                // (s2n-quic's read 104.2, 104.2, 116.0 and 127.9 ms, steps of its 20-packet
                // bursts at 20 Mbit/s)
                Tolerance::OneDoubling((2 * ONE_WAY_MS) as f64 + burst_ms),
                each(&|r| r.deep_queue.map(|q| q.peak_ms)),
                runs.iter().find_map(|r| r.deep_queue_why.clone()),
            ));
            // the tail probe, timed from where its transport's RFC starts the timer: RFC 9002's
            // PTO runs from the last ack-eliciting packet sent (an acknowledgement re-arms it
            // from there), RFC 8985's tail-loss probe from the last acknowledgement (Linux's,
            // 2 x smoothed RTT, read 208.7 to 218.0 ms from it in four runs, and 307 to 361 ms
            // from its last packet, which came 98 or 140 ms before that acknowledgement). The
            // other time is the answer's words: it moves with when the client's last
            // acknowledgement came
            let (pto, words) = worded(runs, |r| {
                let t = r.tail_timeout.as_ref()?;
                let sent = t.ms?;
                let ack = t.after_ack_ms;
                if quic {
                    let ack = ack.map_or(String::new(), |a| {
                        format!(", {a:.1} ms after the last acknowledgement")
                    });
                    Some((sent, format!("{sent:.1} ms from its last packet{ack}")))
                } else {
                    let a = ack?;
                    Some((
                        a,
                        format!(
                            "{a:.1} ms from the last acknowledgement, {sent:.1} ms after its last packet"
                        ),
                    ))
                }
            });
            out.push(
                Item::new(
                    "tail_pto",
                    "tail lost whole: to its first probe or retransmission, from where its RFC starts the timer (QUIC: its last packet; TCP: the last acknowledgement)",
                    "ms",
                    // RFC 9002's timer holds 4 × the RTT variance, which the client's delayed
                    // acknowledgements feed: quiche's read 130.7 to 150.9 ms
                    Tolerance::WithinPlusShare(10.0, 0.1),
                    pto,
                    runs.iter()
                        .find_map(|r| r.tail_timeout.as_ref().and_then(|t| t.why.clone())),
                )
                .with_words(words),
            );
            if quic {
                out.extend(isolated_items(runs));
            }
            out.extend(server_handshake_items(runs, quic));
        }
        Role::Client => {
            // the hello's key shares and groups: a code per list (equal for equal lists), named
            let hello_why = runs.iter().find_map(|r| r.hello_why.clone());
            let lists = |f: &dyn Fn(&Hello) -> &[u16]| {
                worded(runs, |r| {
                    r.hello
                        .as_ref()
                        .map(|h| (hello::groups_code(f(h)), hello::group_names(f(h))))
                })
            };
            let (codes, names) = lists(&|h| &h.key_shares);
            out.push(
                Item::new(
                    "key_shares",
                    "key shares offered (ClientHello)",
                    "groups",
                    Tolerance::Exact,
                    codes,
                    hello_why.clone(),
                )
                .with_words(names),
            );
            let (codes, names) = lists(&|h| &h.groups);
            out.push(
                Item::new(
                    "groups",
                    "groups offered (supported_groups)",
                    "groups",
                    Tolerance::Exact,
                    codes,
                    hello_why.clone(),
                )
                .with_words(names),
            );
            out.push(Item::new(
                "hello_bytes",
                "ClientHello",
                "bytes",
                // GREASE and padding extensions may vary it a little between connections
                Tolerance::Share(0.1),
                each(&|r| r.hello.as_ref().map(|h| h.bytes as f64)),
                hello_why.clone(),
            ));
            // the limits its hello's transport parameters set on what the server sends (a
            // QUIC hello without them is no QUIC v1 hello: the item says so)
            let params_why = hello_why.or_else(|| {
                runs.iter()
                    .any(|r| r.hello.as_ref().is_some_and(|h| h.quic.is_none()))
                    .then(|| "its hello carries no quic_transport_parameters".to_string())
            });
            if quic {
                out.extend(param_items(
                    runs,
                    &|r| r.hello.as_ref().and_then(|h| h.quic),
                    params_why,
                    &[
                        (
                            "max_data",
                            "connection flow-control limit offered (initial_max_data)",
                            "bytes",
                            |p| p.max_data,
                        ),
                        (
                            "max_stream_data",
                            "limit on each response (initial_max_stream_data_bidi_local)",
                            "bytes",
                            |p| p.max_stream_data_bidi_local,
                        ),
                        ("max_ack_delay", "max_ack_delay it announces", "ms", |p| {
                            p.max_ack_delay_ms
                        }),
                    ],
                ));
            }
            out.push(Item::new(
                "data_per_ack",
                "data packets per acknowledgement",
                "packets",
                Tolerance::Share(0.2),
                each(&|r| r.wire.data_per_ack.map(|x| (x * 100.0).round() / 100.0)),
                None,
            ));
            out.push(Item::new(
                "first_pto",
                "first retransmission timer (no answer to the hello)",
                "ms",
                Tolerance::Share(0.1),
                each(&|r| r.first_timeout.client_ms),
                why_of(&|t| t.client_why.clone()),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_held_back_by_the_host_is_read_from_its_events() {
        use quiclab_link::Direction;
        use quiclab_link::event::{Event, EventKind};
        use std::time::Duration;
        let dir = std::env::temp_dir().join(format!("quiclab-stall-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("events.jsonl");
        let line = |index, kind| {
            let e = Event {
                t: Duration::from_millis(index),
                dir: Direction::Down,
                index,
                size: 1280,
                kind,
            };
            serde_json::to_string(&e).unwrap() + "\n"
        };
        let on_time = line(0, EventKind::Depart);
        std::fs::write(&p, &on_time).unwrap();
        assert_eq!(stall_in(&p), Ok(None));
        let late = [3_000_000, 97_400_000, 2_500_000]
            .map(|by_ns| line(1, EventKind::Late { by_ns }))
            .concat();
        std::fs::write(&p, on_time + &late).unwrap();
        assert_eq!(stall_in(&p), Ok(Some(97_400_000)));
        // 3.7 ms late: more than a server's first round trip's span (±(2 ms + 20 %)) takes,
        // less than a probe read for its largest datagram does
        let most = line(2, EventKind::Late { by_ns: 3_700_000 });
        std::fs::write(&p, line(0, EventKind::Depart) + &most).unwrap();
        assert_eq!(
            held_back(&p, tolerated_lateness(probe::CLEAN, Role::Server)),
            Ok(Some(3_700_000))
        );
        assert_eq!(
            held_back(&p, tolerated_lateness(probe::JUMBO, Role::Server)),
            Ok(None)
        );
        assert_eq!(
            held_back(&p, tolerated_lateness(probe::TAIL_LOST, Role::Server)),
            Ok(None)
        );
        // and a probe not named is held to the strictest
        assert_eq!(
            held_back(&p, tolerated_lateness("a new probe", Role::Server)),
            Ok(Some(3_700_000))
        );
        let most = line(2, EventKind::Late { by_ns: 5_100_000 });
        std::fs::write(&p, line(0, EventKind::Depart) + &most).unwrap();
        assert_eq!(
            held_back(&p, tolerated_lateness(probe::TAIL_LOST, Role::Server)),
            Ok(Some(5_100_000))
        );
        assert_eq!(
            held_back(&p, tolerated_lateness(probe::CLEAN, Role::Client)),
            Ok(None)
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(stall_in(&p).unwrap_err().contains("events.jsonl"));
    }

    #[test]
    fn a_response_probe_that_ended_too_soon_fetches_twice_as_much_up_to_32_mb() {
        assert_eq!(response_object(12_000), "1mb");
        assert_eq!(response_object(41_800), "3mb");
        assert_eq!(bigger_object("3mb"), "6mb");
        assert_eq!(bigger_object("8mb"), "16mb");
        assert_eq!(bigger_object("16mb"), "32mb");
        assert_eq!(bigger_object("32mb"), "32mb");
    }

    #[test]
    fn every_registered_stack_with_a_handshake_makes_probes_that_parse() {
        let mut made = 0;
        for s in stacks::all() {
            for role in [Role::Server, Role::Client] {
                let Ok(subject) = Subject::new(s.name(), role, Vec::new()) else {
                    continue;
                };
                let drops = FirstLossPlan {
                    server_flight: 3,
                    client_flight: 2,
                }
                .link_keys();
                let (plan, spec) = subject
                    .probe(probe::FIRST_FLIGHTS_LOST, &drops, 1, OBJECT)
                    .unwrap_or_else(|e| panic!("{} as {}: {e}", s.name(), role.name()));
                assert_eq!(plan.conditions.len(), 1);
                let cfg = spec.config(&plan).to_string();
                assert!(cfg.contains("0-2") && cfg.contains("2-3"), "{cfg}");
                made += 1;
            }
        }
        // at least the two default stacks, each in both roles
        assert!(made >= 4, "{made}");
    }

    #[test]
    fn a_stack_without_the_role_is_refused_by_name() {
        let server_only = stacks::all()
            .into_iter()
            .find(|s| !s.serves(Capability::GetOne) && s.http().contains(&HttpVersion::Http3));
        if let Some(s) = server_only {
            let e = Subject::new(s.name(), Role::Server, Vec::new()).unwrap_err();
            assert!(e.contains("--role client"), "{e}");
        }
        let e = Subject::new("no-such-stack", Role::Server, Vec::new()).unwrap_err();
        assert!(e.contains("unknown stack \"no-such-stack\""), "{e}");
    }
}
