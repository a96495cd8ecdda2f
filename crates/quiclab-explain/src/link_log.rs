//! The link's per-packet log (`events.jsonl`, written by the emulator) as packets with their
//! fates, per direction.

use std::io::BufRead;

use serde::Deserialize;

/// What became of a packet the link took in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Left the link (delivered) at this time, ns from the link's epoch.
    Departed(u64),
    /// Dropped at this time (any reason).
    Dropped(u64),
    /// Still in the link when its log ended.
    Held,
}

/// One packet of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet {
    /// When it entered the link, ns from the link's epoch.
    pub arrive_ns: u64,
    /// IP packet size, bytes.
    pub size: u32,
    pub fate: Fate,
}

/// Every packet of both directions, in arrival order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkLog {
    /// Towards the client (the server's sending side).
    pub down: Vec<Packet>,
    /// Towards the server.
    pub up: Vec<Packet>,
}

#[derive(Deserialize)]
struct Line<'a> {
    t_ns: u64,
    dir: &'a str,
    index: u64,
    size: u32,
    event: &'a str,
}

/// The largest log read: a 25 MB transfer's packets, many times over.
const MAX_PACKETS: u64 = 4_000_000;

impl LinkLog {
    /// Reads an event log. A line that is not an event is an error naming its number; a
    /// duplicate's second departure counts once.
    pub fn parse(reader: impl BufRead) -> Result<LinkLog, String> {
        let mut log = LinkLog::default();
        for (n, line) in reader.lines().enumerate() {
            let line = line.map_err(|e| format!("line {}: {e}", n + 1))?;
            if line.is_empty() {
                continue;
            }
            let l: Line =
                serde_json::from_str(&line).map_err(|e| format!("line {}: {e}", n + 1))?;
            if l.index >= MAX_PACKETS {
                return Err(format!(
                    "line {}: packet index {} beyond the {MAX_PACKETS} read",
                    n + 1,
                    l.index
                ));
            }
            let packets = match l.dir {
                "down" => &mut log.down,
                "up" => &mut log.up,
                other => return Err(format!("line {}: direction {other:?}", n + 1)),
            };
            let i = l.index as usize;
            if l.event == "arrive" {
                if packets.len() <= i {
                    packets.resize(
                        i + 1,
                        Packet {
                            arrive_ns: l.t_ns,
                            size: 0,
                            fate: Fate::Held,
                        },
                    );
                }
                packets[i] = Packet {
                    arrive_ns: l.t_ns,
                    size: l.size,
                    fate: Fate::Held,
                };
                continue;
            }
            let Some(p) = packets.get_mut(i) else {
                return Err(format!(
                    "line {}: {} of packet {} {} before its arrival",
                    n + 1,
                    l.event,
                    l.index,
                    l.dir
                ));
            };
            match l.event {
                "depart" if p.fate == Fate::Held => p.fate = Fate::Departed(l.t_ns),
                "drop" if p.fate == Fate::Held => p.fate = Fate::Dropped(l.t_ns),
                _ => {}
            }
        }
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_take_their_fates_and_a_bad_line_is_named() {
        let text = r#"{"t_ns":5,"dir":"up","index":0,"size":1228,"event":"arrive"}
{"t_ns":5,"dir":"up","index":0,"size":1228,"event":"enqueue","backlog_bytes":1228,"backlog_packets":1}
{"t_ns":9,"dir":"up","index":0,"size":1228,"event":"depart"}
{"t_ns":10,"dir":"down","index":0,"size":1500,"event":"arrive"}
{"t_ns":11,"dir":"down","index":1,"size":1400,"event":"arrive"}
{"t_ns":11,"dir":"down","index":1,"size":1400,"event":"drop","reason":"random"}
{"t_ns":30,"dir":"down","index":0,"size":1500,"event":"depart"}
{"t_ns":31,"dir":"down","index":0,"size":1500,"event":"depart"}
{"t_ns":40,"dir":"down","index":2,"size":80,"event":"arrive"}
"#;
        let log = LinkLog::parse(text.as_bytes()).unwrap();
        assert_eq!(log.up.len(), 1);
        assert_eq!(log.up[0].fate, Fate::Departed(9));
        assert_eq!(
            log.down[0].fate,
            Fate::Departed(30),
            "a duplicate counts once"
        );
        assert_eq!(log.down[1].fate, Fate::Dropped(11));
        assert_eq!(log.down[2].fate, Fate::Held);
        assert_eq!(log.down[1].size, 1400);
        let bad =
            "{\"t_ns\":1,\"dir\":\"down\",\"index\":0,\"size\":1,\"event\":\"arrive\"}\nnot json\n";
        let e = LinkLog::parse(bad.as_bytes()).unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
        let early = "{\"t_ns\":1,\"dir\":\"down\",\"index\":3,\"size\":1,\"event\":\"depart\"}\n";
        let e = LinkLog::parse(early.as_bytes()).unwrap_err();
        assert!(e.contains("before its arrival"), "{e}");
    }
}
