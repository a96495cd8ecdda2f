//! A video player's view of a sequence of segment downloads: when playback could start and how
//! often, and for how long, it would stall.
//!
//! Contract: [`simulate`] is a pure function in virtual time (milliseconds since the first
//! request), with this model of the player:
//! - a segment of `b` bytes holds `b * 8 / stream_rate` seconds of video and can be played only
//!   once it has arrived completely;
//! - segments are fetched one after another as the trial fetched them (the arrival times are the
//!   measured ones) and the buffer has no upper limit;
//! - playback starts when the arrived segments hold at least `buffer` of video (or, for a video
//!   shorter than that, when the last segment has arrived);
//! - when the next segment has not arrived by the time the previous one has played out, playback
//!   stalls until it arrives and then resumes at once.
//!
//! So `end = startup + video + stall time` exactly, and a download that keeps pace with the
//! stream never stalls once the buffer holds the largest segment.

/// One segment: its size and when its last byte arrived.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    pub bytes: u64,
    /// Milliseconds since the first request started.
    pub done_ms: f64,
}

/// What the player went through.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Playback {
    /// When playback started, ms since the first request (the startup delay).
    pub startup_ms: f64,
    /// Interruptions after playback started.
    pub stalls: u32,
    /// Their total duration, ms.
    pub stall_ms: f64,
    /// Video in the segments, ms.
    pub video_ms: f64,
    /// When the last segment finished playing, ms since the first request.
    pub end_ms: f64,
}

/// Seconds of video per byte at `stream_rate_bps`, in ms.
fn video_ms(bytes: u64, stream_rate_bps: u64) -> f64 {
    bytes as f64 * 8.0 * 1000.0 / stream_rate_bps as f64
}

/// Plays `segments` (in playback order, arrival times not decreasing) of a stream of
/// `stream_rate_bps` with a start-up buffer of `buffer_ms`. `None` without segments or with a
/// zero stream rate.
pub fn simulate(segments: &[Arrival], stream_rate_bps: u64, buffer_ms: f64) -> Option<Playback> {
    if segments.is_empty() || stream_rate_bps == 0 {
        return None;
    }
    let durations: Vec<f64> = segments
        .iter()
        .map(|s| video_ms(s.bytes, stream_rate_bps))
        .collect();
    let mut buffered = 0.0;
    // the last segment if the video is shorter than the buffer
    let mut startup_ms = segments[segments.len() - 1].done_ms;
    for (s, d) in segments.iter().zip(&durations) {
        buffered += d;
        if buffered >= buffer_ms {
            startup_ms = s.done_ms;
            break;
        }
    }
    let (mut clock, mut stalls, mut stall_ms) = (startup_ms, 0, 0.0);
    for (s, d) in segments.iter().zip(&durations) {
        if s.done_ms > clock {
            stalls += 1;
            stall_ms += s.done_ms - clock;
            clock = s.done_ms;
        }
        clock += d;
    }
    Some(Playback {
        startup_ms,
        stalls,
        stall_ms,
        video_ms: durations.iter().sum(),
        end_ms: clock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u64 = 6_000_000;

    /// Segments of `bytes` whose downloads take `download_ms[i]` each, back to back from 0.
    fn back_to_back(bytes: &[u64], download_ms: &[f64]) -> Vec<Arrival> {
        let mut t = 0.0;
        bytes
            .iter()
            .zip(download_ms)
            .map(|(&b, &d)| {
                t += d;
                Arrival {
                    bytes: b,
                    done_ms: t,
                }
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    #[test]
    fn a_download_at_the_stream_rate_never_stalls_once_the_largest_segment_is_buffered() {
        // 3.6-5.0 MB segments: 4.8-6.67 s of video each at 6 Mbit/s
        let bytes = [
            3_600_000, 5_000_000, 4_100_000, 3_700_000, 4_900_000, 4_400_000,
        ];
        let real_time: Vec<f64> = bytes.iter().map(|&b| video_ms(b, RATE)).collect();
        let largest = real_time.iter().cloned().fold(0.0, f64::max);
        let arrivals = back_to_back(&bytes, &real_time);
        let p = simulate(&arrivals, RATE, largest).unwrap();
        assert_eq!(p.stalls, 0, "{p:?}");
        assert_eq!(p.stall_ms, 0.0);
        // the buffer first holds 6.67 s of video after the second segment (4.8 + 6.67 s)
        assert!(close(p.startup_ms, real_time[0] + real_time[1]), "{p:?}");
        assert!(close(p.end_ms, p.startup_ms + p.video_ms));
        // without a buffer, a larger segment after a smaller one is late by the difference
        let p = simulate(&arrivals, RATE, 0.0).unwrap();
        assert!(close(p.startup_ms, real_time[0]));
        assert_eq!(
            p.stalls, 1,
            "only the 5.0 MB segment after the 3.6 MB one: {p:?}"
        );
        assert!(close(p.stall_ms, real_time[1] - real_time[0]), "{p:?}");
    }

    #[test]
    fn a_download_slower_than_real_time_stalls_by_its_deficit() {
        // 3 MB = 4 s of video, each taking 6 s to fetch: 2 s short per segment after the first
        let n = 8;
        let arrivals = back_to_back(&[3_000_000; 8], &[6000.0; 8]);
        let p = simulate(&arrivals, RATE, 4000.0).unwrap();
        assert!(close(p.startup_ms, 6000.0), "{p:?}");
        assert_eq!(p.stalls, n - 1);
        assert!(close(p.stall_ms, f64::from(n - 1) * 2000.0), "{p:?}");
        assert!(close(p.video_ms, f64::from(n) * 4000.0));
        // playback ends one segment's worth of video after the last arrival
        assert!(close(p.end_ms, 8.0 * 6000.0 + 4000.0), "{p:?}");
        assert!(close(p.end_ms, p.startup_ms + p.video_ms + p.stall_ms));
        // a buffer of 18 s fills with the fifth segment (20 s of video, at 30 s); the last
        // three then arrive by 48 s, before the first five have played out at 50 s
        let p = simulate(&arrivals, RATE, 18_000.0).unwrap();
        assert_eq!(p.stalls, 0, "{p:?}");
        assert!(close(p.startup_ms, 5.0 * 6000.0), "{p:?}");
    }

    #[test]
    fn a_fast_download_starts_when_the_buffer_is_full_and_never_stalls() {
        let arrivals = back_to_back(&[3_000_000; 5], &[1000.0; 5]);
        let p = simulate(&arrivals, RATE, 10_000.0).unwrap();
        // 4 s per segment: 12 s >= 10 s after the third, at 3 s
        assert!(close(p.startup_ms, 3000.0), "{p:?}");
        assert_eq!((p.stalls, p.stall_ms), (0, 0.0));
        // a buffer longer than the video: playback starts with the last segment
        let p = simulate(&arrivals, RATE, 60_000.0).unwrap();
        assert!(close(p.startup_ms, 5000.0), "{p:?}");
        assert_eq!(p.stalls, 0);
        assert_eq!(simulate(&[], RATE, 0.0), None);
        assert_eq!(simulate(&arrivals, 0, 0.0), None);
    }
}
