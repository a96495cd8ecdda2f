//! What a page-load trial stores (the `pages` workload): the page it loaded and every resource's
//! times, with the summary metrics. Filled by the runner from `quiclab page`'s record.

use serde::{Deserialize, Serialize};

/// A page a campaign loads: its name, resource count and bytes (its bytes are the trial's size,
/// so each page of a campaign has a distinct total).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PageInfo {
    pub name: String,
    /// What the client is told to load: a built-in page's name or a manifest file's path.
    #[serde(default)]
    pub source: String,
    pub resources: u32,
    pub bytes: u64,
}

/// One resource of a loaded page, times in ms from the start of the load (the first
/// connection attempt).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceTimes {
    pub id: String,
    /// html, css, js, font, image or other.
    pub kind: String,
    pub bytes: u64,
    pub urgency: u8,
    pub incremental: bool,
    pub critical: bool,
    pub main_image: bool,
    pub connection: u32,
    pub start_ms: f64,
    pub first_byte_ms: f64,
    pub last_byte_ms: f64,
}

/// A page-load trial's measurements.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PageDetail {
    pub page: String,
    /// Page load time: the last byte of the last resource, ms.
    pub plt_ms: f64,
    /// Every render-blocking resource has arrived, ms.
    pub render_ms: f64,
    /// Visual-progress index: the above-the-fold-weighted mean time at which resources became
    /// visible (`Σ w_i max(last_byte_i, render) / Σ w_i`), ms.
    pub speed_index_ms: f64,
    pub main_image_ms: Option<f64>,
    pub connections: u32,
    pub resources: Vec<ResourceTimes>,
    /// A real browser's own measurements (a browser client's trials only). The fields above
    /// are then the browser's: the page load time is its load event, the first render its
    /// first contentful paint, the visual-progress index the Speed Index of its filmstrip.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<BrowserDetail>,
}

/// What a real browser measured of a page load, ms from the navigation's start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrowserDetail {
    /// The browser and its version.
    pub browser: String,
    pub load_event_ms: Option<f64>,
    pub first_contentful_paint_ms: Option<f64>,
    pub largest_contentful_paint_ms: Option<f64>,
    /// Speed Index from the filmstrip (WebPageTest's histogram progress).
    pub speed_index_ms: Option<f64>,
    pub visually_complete_ms: Option<f64>,
    /// quiclab's page model on the browser's own arrival times: its page load time (last
    /// byte) and visual-progress index, to set against the browser's.
    pub model_plt_ms: Option<f64>,
    pub model_speed_index_ms: Option<f64>,
    /// The protocols the resources came over.
    pub protocols: Vec<String>,
}
