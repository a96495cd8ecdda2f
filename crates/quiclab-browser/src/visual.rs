//! Visual progress from a filmstrip: Speed Index as WebPageTest and Lighthouse define it.
//!
//! Contract (pure arithmetic, no clock):
//! - A frame is reduced to a colour [`Histogram`] (256 buckets per channel, red, green, blue).
//! - A frame's visual completeness is WebPageTest's histogram progress: for each channel and
//!   bucket, how far the frame has moved from the first frame's count towards the last frame's,
//!   matching pixels within [`SLOP`] buckets, summed over all buckets and channels and divided
//!   by the whole distance from first to last frame (1 when the two are equal).
//! - [`speed_index`] integrates `1 - completeness` over time from the start of the load to the
//!   last frame: completeness holds from one frame to the next. Visually complete is the time
//!   of the first frame from which completeness stays at 1.

use serde::{Deserialize, Serialize};

/// Buckets either side within which a pixel counts as matching (slight colour differences).
pub const SLOP: usize = 5;

/// A frame's colour histogram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    pub channels: [[u32; 256]; 3],
}

impl Histogram {
    /// From pixels of `stride` bytes each whose first three are red, green and blue (RGB: 3,
    /// RGBA: 4).
    pub fn from_pixels(pixels: &[u8], stride: usize) -> Histogram {
        let mut channels = [[0u32; 256]; 3];
        for px in pixels.chunks_exact(stride) {
            for c in 0..3 {
                channels[c][px[c] as usize] += 1;
            }
        }
        Histogram { channels }
    }
}

/// How far `frame` has come from `start` towards `end`, 0 to 1.
pub fn progress(frame: &Histogram, start: &Histogram, end: &Histogram) -> f64 {
    let mut total = 0u64;
    let mut matched = 0u64;
    for c in 0..3 {
        let mut available: Vec<u64> = (0..256)
            .map(|i| frame.channels[c][i].abs_diff(start.channels[c][i]) as u64)
            .collect();
        for i in 0..256 {
            let mut target = end.channels[c][i].abs_diff(start.channels[c][i]) as u64;
            if target == 0 {
                continue;
            }
            total += target;
            for slot in available
                .iter_mut()
                .take((i + SLOP + 1).min(256))
                .skip(i.saturating_sub(SLOP))
            {
                let take = target.min(*slot);
                *slot -= take;
                matched += take;
                target -= take;
                if target == 0 {
                    break;
                }
            }
        }
    }
    if total == 0 {
        1.0
    } else {
        matched as f64 / total as f64
    }
}

/// A load's visual metrics, milliseconds from its start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Visual {
    pub speed_index_ms: f64,
    /// The first frame from which the page looks as it finally does.
    pub visually_complete_ms: f64,
    /// The first frame that differs from the first one.
    pub first_visual_change_ms: f64,
    /// (time, completeness 0-1) of every frame.
    pub progress: Vec<(f64, f64)>,
}

/// Speed Index of frames `(ms from the start, histogram)` in time order, the first taken at or
/// before the start (what the page showed before anything arrived). `None` without frames.
pub fn speed_index(frames: &[(f64, Histogram)]) -> Option<Visual> {
    let (first, last) = (&frames.first()?.1, &frames.last()?.1);
    let progress: Vec<(f64, f64)> = frames
        .iter()
        .map(|(t, h)| (t.max(0.0), progress(h, first, last)))
        .collect();
    let mut si = 0.0;
    for w in progress.windows(2) {
        let ((t0, p0), (t1, _)) = (w[0], w[1]);
        si += (1.0 - p0) * (t1 - t0);
    }
    // the first frame from which completeness stays at 1
    let complete_from = progress
        .iter()
        .rposition(|&(_, p)| p < 1.0)
        .map_or(0, |i| i + 1)
        .min(progress.len() - 1);
    let first_change = progress
        .iter()
        .find(|&&(_, p)| p > 0.0)
        .map_or(progress[complete_from].0, |&(t, _)| t);
    Some(Visual {
        speed_index_ms: si,
        visually_complete_ms: progress[complete_from].0,
        first_visual_change_ms: first_change,
        progress,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 100 x 100 white frame with the first `filled` rows of band colours (`rows` rows per
    /// band, band k's colour from `colours[k]`).
    fn frame(bands: &[(usize, [u8; 3])]) -> Histogram {
        let mut px = vec![255u8; 100 * 100 * 3];
        let mut row = 0;
        for &(rows, rgb) in bands {
            for r in row..row + rows {
                for x in 0..100 {
                    px[(r * 100 + x) * 3..(r * 100 + x) * 3 + 3].copy_from_slice(&rgb);
                }
            }
            row += rows;
        }
        Histogram::from_pixels(&px, 3)
    }

    const A: [u8; 3] = [200, 40, 90];
    const B: [u8; 3] = [60, 150, 210];

    #[test]
    fn completeness_is_the_share_of_the_final_picture_painted() {
        let start = frame(&[]);
        let end = frame(&[(30, A), (70, B)]);
        assert_eq!(progress(&start, &start, &end), 0.0);
        assert_eq!(progress(&end, &start, &end), 1.0);
        let a_only = frame(&[(30, A)]);
        assert!((progress(&a_only, &start, &end) - 0.3).abs() < 1e-9);
        // a colour a few buckets off still matches (slop), one far off does not
        let near = frame(&[(30, [203, 42, 88]), (70, B)]);
        assert_eq!(progress(&near, &start, &end), 1.0);
        // one far off: the white it covered counts (half of each pixel's distance: it left the
        // background), its colour does not: (10000 + 7000) / 20000 per channel
        let far = frame(&[(30, [120, 120, 120]), (70, B)]);
        assert!((progress(&far, &start, &end) - 0.85).abs() < 1e-9);
        // nothing to paint: complete
        assert_eq!(progress(&start, &start, &start), 1.0);
    }

    #[test]
    fn speed_index_integrates_what_is_not_yet_painted() {
        let white = frame(&[]);
        let a = frame(&[(30, A)]);
        let full = frame(&[(30, A), (70, B)]);
        // blank until 100 ms, 30 % until 400 ms, complete after: 100 + 0.7 * 300 = 310 ms
        let v = speed_index(&[
            (0.0, white.clone()),
            (100.0, a.clone()),
            (400.0, full.clone()),
            (900.0, full.clone()),
        ])
        .unwrap();
        assert!((v.speed_index_ms - 310.0).abs() < 1e-9, "{v:?}");
        assert_eq!(v.visually_complete_ms, 400.0);
        assert_eq!(v.first_visual_change_ms, 100.0);
        // a frame taken before the start counts from the start
        let early = speed_index(&[(-5.0, white), (100.0, a), (400.0, full)]).unwrap();
        assert!((early.speed_index_ms - 310.0).abs() < 1e-9);
        assert!(speed_index(&[]).is_none());
    }

    #[test]
    fn a_page_that_paints_and_repaints_is_complete_only_when_it_settles() {
        let white = frame(&[]);
        let full = frame(&[(30, A), (70, B)]);
        let other = frame(&[(100, A)]);
        let v = speed_index(&[
            (0.0, white),
            (50.0, full.clone()),
            (80.0, other),
            (120.0, full),
        ])
        .unwrap();
        assert_eq!(v.visually_complete_ms, 120.0);
        assert!(v.speed_index_ms > 50.0);
    }
}
