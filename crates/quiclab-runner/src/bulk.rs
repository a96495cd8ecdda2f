//! The measurements of a bulk trial (study S2): how many bytes the server's connections had
//! acknowledged between two instants, the CPU time of a process, and the UDP payload a QUIC
//! server settled on and when.
//!
//! Contract: [`samples`] reads the server's timeline (JSON lines of [`TimelineSample`], one
//! sampler per connection, cumulative acknowledged bytes); lines that are not samples are errors
//! (the server writes nothing else there). The other timeline functions take its samples. Times are CLOCK_MONOTONIC
//! microseconds like every record.

use std::collections::BTreeMap;
use std::time::Duration;

use quiclab_model::record::TimelineSample;
use quiclab_netns::Process;

/// How long a bulk trial runs before it measures: a fifth of the measured interval, at most
/// 1 s (connections are open and past slow start by then).
pub fn warmup(measured: Duration) -> Duration {
    (measured / 5).min(Duration::from_secs(1))
}

/// The samples of a timeline (its text), in file order.
pub fn samples(timeline: &str) -> Result<Vec<TimelineSample>, String> {
    timeline
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("timeline line {}: {e}", i + 1)))
        .collect()
}

/// Bytes acknowledged over all connections between `t0` and `t1`: per connection, the last
/// cumulative value at or before `t1` minus the last at or before `t0` (zero for a connection
/// that started after `t0`).
pub fn acked_between(samples: &[TimelineSample], t0: u64, t1: u64) -> u64 {
    let mut per_conn: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for s in samples {
        let acked = s.acked_bytes.unwrap_or(0);
        let e = per_conn.entry(s.connection).or_insert((0, 0));
        if s.t_us <= t0 {
            e.0 = acked;
        }
        if s.t_us <= t1 {
            e.1 = acked;
        }
    }
    per_conn.values().map(|&(a, b)| b.saturating_sub(a)).sum()
}

/// The largest UDP payload any connection used at its last sample, and how long after its
/// first sample (its start) the first connection to use it reached it, ms. `None` when the
/// timeline has no payloads (TCP).
pub fn udp_payload(samples: &[TimelineSample]) -> (Option<u32>, Option<f64>) {
    let mut first: BTreeMap<u32, u64> = BTreeMap::new();
    let mut last: BTreeMap<u32, u32> = BTreeMap::new();
    for s in samples {
        first.entry(s.connection).or_insert(s.t_us);
        if let Some(p) = s.udp_payload {
            last.insert(s.connection, p);
        }
    }
    let Some(&settled) = last.values().max() else {
        return (None, None);
    };
    let reached = samples
        .iter()
        .filter(|s| s.udp_payload == Some(settled))
        .map(|s| s.t_us.saturating_sub(first[&s.connection]))
        .min()
        .map(|us| us as f64 / 1000.0);
    (Some(settled), reached)
}

/// CPU seconds (user + system) the server and all clients have used so far.
pub fn cpu_s(server: &Process, clients: &[Process]) -> (f64, f64) {
    let of = |p: &Process| p.pid().map_or(0.0, process_cpu_s);
    (of(server), clients.iter().map(of).sum())
}

/// CPU seconds (user + system) a live process has used so far; 0 once it is gone.
pub fn process_cpu_s(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| cpu_ticks(&stat))
        .map_or(0.0, |ticks| {
            // SAFETY: sysconf has no preconditions.
            let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
            ticks as f64 / hz
        })
}

/// utime + stime from a `/proc/PID/stat` line, in clock ticks.
fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name is in parentheses and may hold spaces: count fields after its end.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiclab_model::record::Transport;

    fn line(conn: u32, t_us: u64, acked: u64, payload: Option<u32>) -> String {
        serde_json::to_string(&TimelineSample {
            transport: Transport::Quic,
            connection: conn,
            t_us,
            cwnd_bytes: None,
            bytes_in_flight: None,
            acked_bytes: Some(acked),
            rtt_us: None,
            rate_bps: None,
            congestion_event: false,
            retransmits: None,
            impossible_rtt_samples: None,
            busy_rtt_samples: None,
            first_loss_offset: None,
            resent_bytes: None,
            udp_payload: payload,
            flow_blocked: None,
        })
        .unwrap()
    }

    #[test]
    fn acknowledged_bytes_are_counted_per_connection_within_the_interval() {
        let t = [
            line(0, 100, 1_000, None),
            line(1, 150, 50, None),
            line(0, 200, 5_000, None),
            line(1, 250, 900, None),
            line(2, 260, 300, None), // starts inside the interval: counts from zero
            line(0, 300, 9_000, None),
            line(0, 400, 20_000, None), // after t1
        ]
        .join("\n");
        // conn 0: 9000 - 5000; conn 1: 900 - 50; conn 2: 300
        let t = samples(&t).unwrap();
        assert_eq!(acked_between(&t, 200, 300), 4_000 + 850 + 300);
        assert_eq!(acked_between(&t, 400, 500), 0);
        assert!(samples("not json").unwrap_err().contains("line 1"));
    }

    #[test]
    fn the_settled_payload_is_the_largest_at_the_end_and_reached_when_first_used() {
        let t = [
            line(0, 1_000, 0, Some(1200)),
            line(0, 3_000, 0, Some(4000)),
            line(0, 6_000, 0, Some(8952)),
            line(1, 2_000, 0, Some(1200)),
            line(1, 5_000, 0, Some(8952)), // 3 ms after its start: the first to reach it
            line(0, 9_000, 0, Some(8952)),
        ]
        .join("\n");
        assert_eq!(udp_payload(&samples(&t).unwrap()), (Some(8952), Some(3.0)));
        let tcp = samples(&line(0, 1_000, 5, None)).unwrap();
        assert_eq!(udp_payload(&tcp), (None, None));
    }

    #[test]
    fn cpu_ticks_are_read_after_a_command_name_with_spaces() {
        let stat = "42 (quiclab (x) y) S 1 42 42 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 1 0";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("42 (short) S 1"), None);
        // this very process's time grows while it spins (a tick is 10 ms at most), and a pid
        // that cannot exist has none
        let before = process_cpu_s(std::process::id());
        let start = std::time::Instant::now();
        while process_cpu_s(std::process::id()) <= before && start.elapsed().as_secs() < 5 {
            std::hint::black_box((0..10_000u64).sum::<u64>());
        }
        assert!(process_cpu_s(std::process::id()) > before);
        assert_eq!(process_cpu_s(u32::MAX), 0.0);
    }

    #[test]
    fn the_warm_up_is_a_fifth_of_the_interval_up_to_a_second() {
        assert_eq!(warmup(Duration::from_secs(3)), Duration::from_millis(600));
        assert_eq!(warmup(Duration::from_secs(10)), Duration::from_secs(1));
    }
}
