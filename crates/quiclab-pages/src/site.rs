//! Pages as real web content: a site a browser loads as the manifest says.
//!
//! Contract:
//! - [`build`] turns a [`Page`] into one file per resource: the document and any other HTML,
//!   stylesheets, scripts, fonts (TrueType), images (JPEG when the resource's name says so, PNG
//!   otherwise) and other data, each a real, decodable file of exactly the manifest's size (when
//!   a file's smallest form is larger, that form: [`Site::shortfall`] names those).
//! - A browser discovers each resource when the manifest says: what the document names is in its
//!   markup (stylesheets and render-blocking scripts in its head, asynchronous scripts, images
//!   and frames in its body, fonts preloaded), a stylesheet's fonts and background images are in
//!   its rules (each used by an element of the document), a script's children are made by the
//!   script when it runs. A resource whose parent cannot name it (an image cannot name
//!   anything) is named by the nearest ancestor that can.
//! - Render-blocking (`critical`) stylesheets and scripts block the first render; the others
//!   do not (an asynchronous script, a print-media stylesheet switched to all on load).
//! - Above the fold: the viewport ([`VIEWPORT`]) is divided into full-width bands, one per
//!   resource with an above-the-fold weight, each band's height in proportion to its weight, and
//!   each resource paints its band in a solid colour of its own when it arrives (an image fills
//!   it, a font's glyphs fill it, a stylesheet or script colours it, a frame's document colours
//!   it). Everything else is placed below the fold. So a screenshot's visual completeness is the
//!   arrived share of the above-the-fold weight, as the built-in loader's model assumes.
//! - Every script counts itself in `window.__qlScripts` as it runs, so a browser's record can
//!   say that all ran.

use std::fmt::Write as _;
use std::path::Path;

use crate::page::{Kind, Page};

/// The browser window the site is laid out for (width, height in CSS pixels).
pub const VIEWPORT: (u32, u32) = (1280, 800);

/// The folder under a server's root that holds the pages' sites: page P is at
/// `/site/SLUG/` ([`slug`]).
pub const SITE_DIR: &str = "site";

/// The page's folder name under [`SITE_DIR`]: its name reduced to letters, digits, `-` and `_`.
pub fn slug(page: &Page) -> String {
    let s: String = page
        .name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() { "page".into() } else { s }
}

/// The URL path of the page's document, from a server root holding [`SITE_DIR`].
pub fn document_path(page: &Page) -> String {
    format!("/{SITE_DIR}/{}/{}", slug(page), file_name(page, 0))
}

/// One file of a site.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteFile {
    /// Its name in the site's folder (also its URL path below the site's base).
    pub name: String,
    pub bytes: Vec<u8>,
}

/// A page as files: `files[i]` is resource `i`, `files[0]` the document.
#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    pub files: Vec<SiteFile>,
    /// Each band above the fold: the resource, its top and height in pixels, its colour.
    pub bands: Vec<Band>,
}

/// A band of the viewport a resource paints.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band {
    pub resource: usize,
    pub top: u32,
    pub height: u32,
    pub rgb: [u8; 3],
}

impl Site {
    /// The document's file name.
    pub fn document(&self) -> &str {
        &self.files[0].name
    }

    /// Resources whose smallest real form is larger than the manifest's size: (index, manifest
    /// bytes, file bytes).
    pub fn shortfall(&self, page: &Page) -> Vec<(usize, u64, u64)> {
        page.resources
            .iter()
            .zip(&self.files)
            .enumerate()
            .filter(|(_, (r, f))| f.bytes.len() as u64 != r.bytes)
            .map(|(i, (r, f))| (i, r.bytes, f.bytes.len() as u64))
            .collect()
    }

    /// Writes every file into `dir` (created if needed).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for f in &self.files {
            std::fs::write(dir.join(&f.name), &f.bytes)?;
        }
        Ok(())
    }
}

/// A name safe in a URL and a file system for resource `i`: its index (which keeps names
/// unique and in manifest order), then the id's last path segment reduced to letters, digits,
/// `-` and `_`, then the extension its content has.
pub fn file_name(page: &Page, i: usize) -> String {
    let r = &page.resources[i];
    let last =
        r.id.split(['?', '#'])
            .next()
            .unwrap_or("")
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("");
    let stem = last.rsplit_once('.').map_or(last, |(s, _)| s);
    let stem: String = stem
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(32)
        .collect();
    let ext = extension(page, i);
    if stem.is_empty() {
        format!("{i:03}.{ext}")
    } else {
        format!("{i:03}-{stem}.{ext}")
    }
}

fn extension(page: &Page, i: usize) -> &'static str {
    let r = &page.resources[i];
    match r.kind {
        Kind::Html => "html",
        Kind::Css => "css",
        Kind::Js => "js",
        Kind::Font => "ttf",
        Kind::Image if is_jpeg(&r.id) => "jpg",
        Kind::Image => "png",
        Kind::Other => "bin",
    }
}

fn is_jpeg(id: &str) -> bool {
    let path = id
        .split(['?', '#'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    path.ends_with(".jpg") || path.ends_with(".jpeg")
}

/// Whether a resource of kind `host` can name one of kind `child`.
fn can_name(host: Kind, child: Kind) -> bool {
    match host {
        Kind::Html | Kind::Js => true,
        Kind::Css => matches!(child, Kind::Css | Kind::Font | Kind::Image),
        Kind::Font | Kind::Image | Kind::Other => false,
    }
}

/// The resource that names resource `i`: its parent, or the nearest ancestor that can.
pub fn host(page: &Page, i: usize) -> usize {
    let kind = page.resources[i].kind;
    let mut at = page.resources[i].parent.unwrap_or(0);
    while !can_name(page.resources[at].kind, kind) {
        match page.resources[at].parent {
            Some(p) => at = p,
            None => break,
        }
    }
    at
}

/// The colour of band `k`: distinct from its neighbours and from the white background, each
/// channel within 40..=215 so that every band changes all three colour channels of the pixels
/// it covers (a histogram-based visual progress then counts area fairly).
pub fn band_colour(k: usize) -> [u8; 3] {
    let c = |mul: usize, add: usize| (40 + (k * mul + add) % 176) as u8;
    [c(67, 0), c(113, 60), c(151, 120)]
}

/// A neutral colour for what is painted below the fold.
const BELOW: [u8; 3] = [128, 128, 128];

fn css_colour(rgb: [u8; 3]) -> String {
    format!("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2])
}

/// The page as real files (see the module's contract).
pub fn build(page: &Page) -> Site {
    let n = page.resources.len();
    let names: Vec<String> = (0..n).map(|i| file_name(page, i)).collect();
    let bands = layout(page);
    let band_of = |i: usize| bands.iter().find(|b| b.resource == i);
    let hosts: Vec<usize> = (0..n)
        .map(|i| if i == 0 { 0 } else { host(page, i) })
        .collect();
    let hosts = &hosts;
    let children = |h: usize| (1..n).filter(move |&i| hosts[i] == h);

    let cx = Ctx {
        page,
        names: &names,
        bands: &bands,
    };
    let mut files = Vec::with_capacity(n);
    for (i, r) in page.resources.iter().enumerate() {
        let target = r.bytes;
        let own_band = band_of(i).copied();
        let kids = || children(i).collect();
        let bytes = match r.kind {
            Kind::Html => html(&cx, i, kids(), own_band, target),
            Kind::Css => css(&cx, kids(), own_band, target),
            Kind::Js => js(&cx, kids(), own_band, target),
            Kind::Font => font(target),
            Kind::Image => {
                let rgb = own_band.map_or(BELOW, |b| b.rgb);
                if is_jpeg(&r.id) {
                    jpeg(rgb, target)
                } else {
                    png(rgb, target)
                }
            }
            Kind::Other => other(target),
        };
        files.push(SiteFile {
            name: names[i].clone(),
            bytes,
        });
    }
    Site { files, bands }
}

/// What the makers of HTML, stylesheets and scripts need besides their own resource: the page,
/// every resource's file name, the bands above the fold.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    page: &'a Page,
    names: &'a [String],
    bands: &'a [Band],
}

/// The bands above the fold: one per resource with weight, heights in proportion.
fn layout(page: &Page) -> Vec<Band> {
    let visible: Vec<usize> = (0..page.resources.len())
        .filter(|&i| page.resources[i].above_fold > 0.0)
        .collect();
    let total: f64 = visible.iter().map(|&i| page.resources[i].above_fold).sum();
    let height = VIEWPORT.1 as f64;
    let mut bands = Vec::new();
    let mut sum = 0.0;
    for (k, &i) in visible.iter().enumerate() {
        let top = (height * sum / total).round() as u32;
        sum += page.resources[i].above_fold;
        let bottom = (height * sum / total).round() as u32;
        bands.push(Band {
            resource: i,
            top,
            height: bottom - top,
            rgb: band_colour(k),
        });
    }
    bands
}

fn band_id(i: usize) -> String {
    format!("b{i}")
}

/// The element a resource's content goes into: its band, or the area below the fold.
fn place(bands: &[Band], i: usize) -> String {
    if bands.iter().any(|b| b.resource == i) {
        band_id(i)
    } else {
        "below".to_string()
    }
}

/// A font resource's family name.
fn family(i: usize) -> String {
    format!("qlf{i}")
}

/// Markup for text in font `i` filling its band (or a line of it below the fold): the font's
/// one glyph, `A`, is a full em square.
fn font_text(bands: &[Band], i: usize) -> String {
    match bands.iter().find(|b| b.resource == i) {
        Some(b) => {
            let h = b.height.max(1);
            let count = VIEWPORT.0.div_ceil(h) + 1;
            format!(
                "<div style=\"font:{h}px/{h}px {f};color:{c};white-space:nowrap;overflow:hidden;height:{h}px\">{a}</div>",
                f = family(i),
                c = css_colour(b.rgb),
                a = "A".repeat(count as usize)
            )
        }
        None => format!("<div style=\"font:16px/16px {}\">AAAA</div>", family(i)),
    }
}

/// The document (or a frame's document) `i`: names its children; the document holds the bands.
fn html(cx: &Ctx, i: usize, kids: Vec<usize>, own: Option<Band>, target: u64) -> Vec<u8> {
    let Ctx { page, names, bands } = *cx;
    let top = i == 0;
    let mut head = String::new();
    let mut tail = String::new();
    // what goes into each band (by resource), and what goes below the fold (or into a frame's
    // body)
    let mut inner: Vec<(usize, String)> =
        bands.iter().map(|b| (b.resource, String::new())).collect();
    let mut below = String::new();
    let mut put = |k: usize, markup: &str| match inner.iter_mut().find(|(r, _)| top && *r == k) {
        Some((_, s)) => s.push_str(markup),
        None => below.push_str(markup),
    };
    if top {
        // the elements the stylesheets' background images and fonts show in
        for (k, r) in page.resources.iter().enumerate().skip(1) {
            if page.resources[host(page, k)].kind != Kind::Css {
                continue;
            }
            match r.kind {
                Kind::Image => put(k, &format!("<div class=\"bg i{k}\"></div>")),
                Kind::Font => put(k, &font_text(bands, k)),
                _ => {}
            }
        }
    }
    for k in kids {
        let f = &names[k];
        let r = &page.resources[k];
        match r.kind {
            Kind::Css if r.critical => {
                let _ = write!(head, "<link rel=\"stylesheet\" href=\"{f}\">");
            }
            Kind::Css => {
                let _ = write!(
                    head,
                    "<link rel=\"stylesheet\" href=\"{f}\" media=\"print\" onload=\"this.media='all'\">"
                );
            }
            Kind::Js if r.critical => {
                let _ = write!(head, "<script src=\"{f}\"></script>");
            }
            Kind::Js => {
                let _ = write!(head, "<script async src=\"{f}\"></script>");
            }
            Kind::Font => {
                let _ = write!(
                    head,
                    "<link rel=\"preload\" as=\"font\" crossorigin href=\"{f}\">\
                     <style>@font-face{{font-family:{};src:url({f});font-display:block}}</style>",
                    family(k)
                );
                put(k, &font_text(bands, k));
            }
            Kind::Image => put(
                k,
                &format!(
                    "<img src=\"{f}\" alt=\"\" style=\"width:100%;height:100%;display:block\">"
                ),
            ),
            Kind::Html => put(
                k,
                &format!(
                    "<iframe src=\"{f}\" style=\"width:100%;height:100%;border:0;display:block\"></iframe>"
                ),
            ),
            Kind::Other => {
                let _ = write!(
                    tail,
                    "<script>fetch('{f}').then(function(r){{return r.arrayBuffer()}}){}</script>",
                    paint_then(bands, k)
                );
            }
        }
    }
    let mut body = String::new();
    if top {
        let (w, h) = VIEWPORT;
        let _ = write!(
            head,
            "<style>html,body{{margin:0;background:#fff}}#fold{{position:relative;width:{w}px;height:{h}px;overflow:hidden}}\
             #fold>div{{position:absolute;left:0;width:{w}px;overflow:hidden}}\
             #below img,#below iframe,#below>div.bg{{display:block;width:8px;height:8px;border:0}}</style>"
        );
        body.push_str("<div id=\"fold\">");
        for (b, (_, content)) in bands.iter().zip(&inner) {
            let paint = if b.resource == 0 {
                format!(";background:{}", css_colour(b.rgb))
            } else {
                String::new()
            };
            let _ = write!(
                body,
                "<div id=\"{}\" style=\"top:{}px;height:{}px{paint}\">{content}</div>",
                band_id(b.resource),
                b.top,
                b.height
            );
        }
        let _ = write!(body, "</div><div id=\"below\">{below}</div>");
    } else {
        if let Some(b) = own {
            let _ = write!(
                head,
                "<style>html,body{{margin:0;background:{}}}</style>",
                css_colour(b.rgb)
            );
        }
        body.push_str(&below);
    }
    let open = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><link rel=\"icon\" href=\"data:,\"><title>{}</title>",
        escape(&page.name)
    );
    let close = "</body></html>\n";
    let core = format!("{open}{head}</head><body>{body}{tail}");
    let pad_room = target.saturating_sub((core.len() + close.len()) as u64);
    let mut out = core.into_bytes();
    out.extend(comment(pad_room as usize, "<!--", "-->"));
    out.extend(close.as_bytes());
    out
}

/// Script text run once resource `k` (fetched as data) has arrived: it colours `k`'s band.
fn paint_then(bands: &[Band], k: usize) -> String {
    match bands.iter().find(|b| b.resource == k) {
        Some(b) => format!(
            ".then(function(){{document.getElementById('{}').style.background='{}'}})",
            band_id(k),
            css_colour(b.rgb)
        ),
        None => String::new(),
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A stylesheet: imports its stylesheets, declares its fonts, sets its background images (on
/// the elements the document made for them), colours its band.
fn css(cx: &Ctx, kids: Vec<usize>, own: Option<Band>, target: u64) -> Vec<u8> {
    let Ctx { page, names, bands } = *cx;
    let mut s = String::new();
    for &k in &kids {
        if page.resources[k].kind == Kind::Css {
            let _ = write!(s, "@import url({});", names[k]);
        }
    }
    for &k in &kids {
        let f = &names[k];
        match page.resources[k].kind {
            Kind::Font => {
                let _ = write!(
                    s,
                    "@font-face{{font-family:{};src:url({f});font-display:block}}",
                    family(k)
                );
            }
            Kind::Image => {
                let size = if bands.iter().any(|b| b.resource == k) {
                    "width:100%;height:100%;"
                } else {
                    ""
                };
                let _ = write!(
                    s,
                    ".i{k}{{{size}background:url({f}) 0 0/100% 100% no-repeat}}"
                );
            }
            _ => {}
        }
    }
    if let Some(b) = own {
        let _ = write!(
            s,
            "#{}{{background:{}}}",
            band_id(b.resource),
            css_colour(b.rgb)
        );
    }
    s.push('\n');
    let room = target.saturating_sub(s.len() as u64);
    let mut out = s.into_bytes();
    out.extend(comment(room as usize, "/*", "*/"));
    out
}

/// A script: counts itself, makes its children, colours its band.
fn js(cx: &Ctx, kids: Vec<usize>, own: Option<Band>, target: u64) -> Vec<u8> {
    let Ctx { page, names, bands } = *cx;
    // `put` appends an element to its place once the document has it
    let mut s = String::from(
        "(function(){window.__qlScripts=(window.__qlScripts||0)+1;\
         function put(id,e){function go(){document.getElementById(id).appendChild(e)}\
         if(document.getElementById(id))go();else document.addEventListener('DOMContentLoaded',go)}\
         function el(t,a){var e=document.createElement(t);for(var k in a)e.setAttribute(k,a[k]);return e}",
    );
    for k in kids {
        let f = &names[k];
        let at = place(bands, k);
        let full = "width:100%;height:100%;display:block;border:0";
        match page.resources[k].kind {
            Kind::Js => {
                let _ = write!(
                    s,
                    "var s=el('script',{{src:'{f}'}});s.async=true;document.head.appendChild(s);"
                );
            }
            Kind::Css => {
                let _ = write!(
                    s,
                    "document.head.appendChild(el('link',{{rel:'stylesheet',href:'{f}'}}));"
                );
            }
            Kind::Image => {
                let _ = write!(
                    s,
                    "put('{at}',el('img',{{src:'{f}',alt:'',style:'{full}'}}));"
                );
            }
            Kind::Html => {
                let _ = write!(s, "put('{at}',el('iframe',{{src:'{f}',style:'{full}'}}));");
            }
            Kind::Font => {
                let text = font_text(bands, k).replace('\'', "\\'");
                let _ = write!(
                    s,
                    "new FontFace('{fam}','url({f})',{{display:'block'}}).load().then(function(x){{document.fonts.add(x)}});\
                     var d=document.createElement('div');d.innerHTML='{text}';put('{at}',d.firstChild);",
                    fam = family(k)
                );
            }
            Kind::Other => {
                let _ = write!(
                    s,
                    "fetch('{f}').then(function(r){{return r.arrayBuffer()}}){};",
                    paint_then(bands, k)
                );
            }
        }
    }
    if let Some(b) = own {
        let _ = write!(
            s,
            "var c=function(){{document.getElementById('{}').style.background='{}'}};\
             if(document.getElementById('{}'))c();else document.addEventListener('DOMContentLoaded',c);",
            band_id(b.resource),
            css_colour(b.rgb),
            band_id(b.resource)
        );
    }
    s.push_str("})();\n");
    let room = target.saturating_sub(s.len() as u64);
    let mut out = s.into_bytes();
    out.extend(comment(room as usize, "/*", "*/"));
    out
}

/// `room` bytes of comment between `open` and `close` (nothing when they do not fit: the file
/// is then as long as its content).
fn comment(room: usize, open: &str, close: &str) -> Vec<u8> {
    if room < open.len() + close.len() {
        return Vec::new();
    }
    let fill = room - open.len() - close.len();
    let mut out = Vec::with_capacity(room);
    out.extend(open.as_bytes());
    out.extend(filler(fill));
    out.extend(close.as_bytes());
    out
}

/// Printable text that is neither a comment's end nor markup: words in lines of 80.
fn filler(n: usize) -> impl Iterator<Item = u8> {
    const WORDS: &[u8] = b"quiclab pads this file to the size the page manifest gives it ";
    (0..n).map(|k| {
        if k % 81 == 80 {
            b'\n'
        } else {
            WORDS[k % WORDS.len()]
        }
    })
}

/// Bytes that are not an image, a font or text (what `other` stands for), `n` of them.
fn other(n: u64) -> Vec<u8> {
    (0..n)
        .map(|k| (k.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// The pixel size of the images (browsers scale them to their element).
const IMAGE_SIDE: u32 = 16;

/// A baseline JPEG of one colour, padded with comment segments to `target` bytes (decoders
/// skip comments; placed before the image data, they make the image appear when its last
/// bytes arrive). A remainder too small for a segment (1 to 3 bytes) follows the end marker.
fn jpeg(rgb: [u8; 3], target: u64) -> Vec<u8> {
    let side = IMAGE_SIDE as usize;
    let pixels: Vec<u8> = (0..side * side).flat_map(|_| rgb).collect();
    let mut base = Vec::new();
    let enc = jpeg_encoder::Encoder::new(&mut base, 95);
    enc.encode(
        &pixels,
        IMAGE_SIDE as u16,
        IMAGE_SIDE as u16,
        jpeg_encoder::ColorType::Rgb,
    )
    .expect("encoding a small image in memory cannot fail");
    let mut room = target.saturating_sub(base.len() as u64) as usize;
    let mut out = Vec::with_capacity(target.max(base.len() as u64) as usize);
    out.extend(&base[..2]); // SOI
    const MAX_SEGMENT: usize = 2 + 65_535;
    while room >= 4 {
        // a segment is the marker (2 bytes) and its length field (2) and payload; never leave
        // a remainder of 1 to 3 bytes that a segment cannot hold when another one follows
        let mut seg = room.min(MAX_SEGMENT);
        let rest = room - seg;
        if rest > 0 && rest < 4 {
            seg -= 4 - rest;
        }
        out.extend([0xFF, 0xFE]);
        out.extend(((seg - 2) as u16).to_be_bytes());
        out.extend(filler(seg - 4));
        room -= seg;
    }
    out.extend(&base[2..]);
    out.extend(std::iter::repeat_n(0u8, room));
    out
}

/// A PNG of one colour, padded to `target` bytes with a private ancillary chunk before the
/// image data (decoders skip it; the image appears when its last bytes arrive). A remainder
/// too small for a chunk (1 to 11 bytes) follows the end chunk.
fn png(rgb: [u8; 3], target: u64) -> Vec<u8> {
    let encode = |pad: Option<usize>| {
        let mut out = Vec::new();
        let mut enc = png::Encoder::new(&mut out, IMAGE_SIDE, IMAGE_SIDE);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc.write_header().expect("a PNG header in memory");
        if let Some(n) = pad {
            w.write_chunk(
                png::chunk::ChunkType(*b"qlPd"),
                &filler(n).collect::<Vec<_>>(),
            )
            .expect("a PNG chunk in memory");
        }
        let pixels: Vec<u8> = (0..IMAGE_SIDE * IMAGE_SIDE).flat_map(|_| rgb).collect();
        w.write_image_data(&pixels).expect("PNG data in memory");
        w.finish().expect("a PNG in memory");
        out
    };
    let base = encode(None);
    let room = target.saturating_sub(base.len() as u64) as usize;
    if room >= 12 {
        encode(Some(room - 12))
    } else {
        let mut out = base;
        out.extend(std::iter::repeat_n(0u8, room));
        out
    }
}

/// A TrueType font with one glyph, `A`, a full em square (so text in it paints solid blocks),
/// padded to `target` bytes with a table of its own that font loaders skip.
pub fn font(target: u64) -> Vec<u8> {
    let base = ttf(0);
    // the padding table adds a directory entry (16 bytes) and its data
    let extra = target.saturating_sub(base.len() as u64 + 16);
    if target > base.len() as u64 + 16 {
        ttf(extra as usize)
    } else {
        base
    }
}

/// The font's tables, then a `zpad` table of `pad` bytes when `pad` > 0.
fn ttf(pad: usize) -> Vec<u8> {
    let be16 = |v: &mut Vec<u8>, x: u16| v.extend(x.to_be_bytes());
    let be32 = |v: &mut Vec<u8>, x: u32| v.extend(x.to_be_bytes());
    const EM: u16 = 1000;
    const GLYPHS: u16 = 2; // .notdef (empty) and the square

    // glyph 1: one contour, four on-curve points with 16-bit deltas
    let mut glyf = Vec::new();
    for x in [1i16, 0, 0, EM as i16, EM as i16] {
        // numberOfContours, xMin, yMin, xMax, yMax
        glyf.extend(x.to_be_bytes());
    }
    be16(&mut glyf, 3); // endPtsOfContours
    be16(&mut glyf, 0); // instructionLength
    glyf.extend([0x01; 4]); // flags: on curve
    for dx in [0i16, EM as i16, 0, -(EM as i16)] {
        glyf.extend(dx.to_be_bytes());
    }
    for dy in [0i16, 0, EM as i16, 0] {
        glyf.extend(dy.to_be_bytes());
    }
    while !glyf.len().is_multiple_of(4) {
        glyf.push(0);
    }
    let mut loca = Vec::new();
    for off in [0u16, 0, (glyf.len() / 2) as u16] {
        be16(&mut loca, off);
    }

    let mut head = Vec::new();
    be32(&mut head, 0x0001_0000); // version
    be32(&mut head, 0x0001_0000); // fontRevision
    be32(&mut head, 0); // checkSumAdjustment, set below
    be32(&mut head, 0x5F0F_3CF5); // magicNumber
    be16(&mut head, 0x000B); // flags
    be16(&mut head, EM); // unitsPerEm
    head.extend([0u8; 16]); // created, modified
    for v in [0i16, 0, EM as i16, EM as i16] {
        head.extend(v.to_be_bytes()); // xMin yMin xMax yMax
    }
    be16(&mut head, 0); // macStyle
    be16(&mut head, 8); // lowestRecPPEM
    be16(&mut head, 2); // fontDirectionHint
    be16(&mut head, 0); // indexToLocFormat: short
    be16(&mut head, 0); // glyphDataFormat

    let mut hhea = Vec::new();
    be32(&mut hhea, 0x0001_0000);
    be16(&mut hhea, EM); // ascender
    be16(&mut hhea, 0); // descender
    be16(&mut hhea, 0); // lineGap
    be16(&mut hhea, EM); // advanceWidthMax
    be16(&mut hhea, 0); // minLeftSideBearing
    be16(&mut hhea, 0); // minRightSideBearing
    be16(&mut hhea, EM); // xMaxExtent
    be16(&mut hhea, 1); // caretSlopeRise
    be16(&mut hhea, 0); // caretSlopeRun
    hhea.extend([0u8; 10]); // caretOffset, 4 reserved
    be16(&mut hhea, 0); // metricDataFormat
    be16(&mut hhea, GLYPHS); // numberOfHMetrics

    let mut hmtx = Vec::new();
    for _ in 0..GLYPHS {
        be16(&mut hmtx, EM);
        be16(&mut hmtx, 0);
    }

    let mut maxp = Vec::new();
    be32(&mut maxp, 0x0001_0000);
    be16(&mut maxp, GLYPHS);
    be16(&mut maxp, 4); // maxPoints
    be16(&mut maxp, 1); // maxContours
    be16(&mut maxp, 0); // maxCompositePoints
    be16(&mut maxp, 0); // maxCompositeContours
    be16(&mut maxp, 2); // maxZones
    maxp.extend([0u8; 18]); // twilight points .. component depth

    // cmap: one format 4 subtable (Windows, Unicode BMP) mapping 'A' to glyph 1
    let mut sub = Vec::new();
    let segs: [(u16, u16, u16); 2] = [(0x41, 0x41, 1u16.wrapping_sub(0x41)), (0xFFFF, 0xFFFF, 1)];
    be16(&mut sub, 4);
    be16(&mut sub, (16 + segs.len() * 8) as u16); // length
    be16(&mut sub, 0); // language
    be16(&mut sub, (segs.len() * 2) as u16); // segCountX2
    be16(&mut sub, 4); // searchRange
    be16(&mut sub, 1); // entrySelector
    be16(&mut sub, 0); // rangeShift
    for s in segs {
        be16(&mut sub, s.1); // endCode
    }
    be16(&mut sub, 0); // reservedPad
    for s in segs {
        be16(&mut sub, s.0); // startCode
    }
    for s in segs {
        be16(&mut sub, s.2); // idDelta
    }
    for _ in segs {
        be16(&mut sub, 0); // idRangeOffset
    }
    let mut cmap = Vec::new();
    be16(&mut cmap, 0);
    be16(&mut cmap, 1);
    be16(&mut cmap, 3);
    be16(&mut cmap, 1);
    be32(&mut cmap, 12);
    cmap.extend(sub);

    let strings: [(u16, &str); 6] = [
        (1, "quiclab"),
        (2, "Regular"),
        (3, "quiclab page font"),
        (4, "quiclab"),
        (5, "Version 1.0"),
        (6, "quiclab"),
    ];
    let mut name = Vec::new();
    let mut data = Vec::new();
    be16(&mut name, 0);
    be16(&mut name, strings.len() as u16);
    be16(&mut name, (6 + 12 * strings.len()) as u16);
    for (id, text) in strings {
        let utf16: Vec<u8> = text.encode_utf16().flat_map(|u| u.to_be_bytes()).collect();
        for v in [3u16, 1, 0x409, id, utf16.len() as u16, data.len() as u16] {
            be16(&mut name, v);
        }
        data.extend(utf16);
    }
    name.extend(data);

    let mut os2 = Vec::new();
    be16(&mut os2, 4); // version
    be16(&mut os2, EM); // xAvgCharWidth
    be16(&mut os2, 400); // usWeightClass
    be16(&mut os2, 5); // usWidthClass
    be16(&mut os2, 0); // fsType: installable
    for v in [650u16, 600, 0, 75, 650, 600, 0, 350, 50, 250] {
        be16(&mut os2, v); // sub/superscript sizes and offsets, strikeout size and position
    }
    be16(&mut os2, 0); // sFamilyClass
    os2.extend([0u8; 10]); // panose
    os2.extend([0u8; 16]); // ulUnicodeRange1-4
    os2.extend(*b"QLAB"); // achVendID
    be16(&mut os2, 0x40); // fsSelection: regular
    be16(&mut os2, 0x41); // usFirstCharIndex
    be16(&mut os2, 0x41); // usLastCharIndex
    be16(&mut os2, EM); // sTypoAscender
    be16(&mut os2, 0); // sTypoDescender
    be16(&mut os2, 0); // sTypoLineGap
    be16(&mut os2, EM); // usWinAscent
    be16(&mut os2, 0); // usWinDescent
    os2.extend([0u8; 8]); // ulCodePageRange1-2
    be16(&mut os2, 500); // sxHeight
    be16(&mut os2, EM); // sCapHeight
    be16(&mut os2, 0); // usDefaultChar
    be16(&mut os2, 0x41); // usBreakChar
    be16(&mut os2, 1); // usMaxContext

    let mut post = Vec::new();
    be32(&mut post, 0x0003_0000);
    be32(&mut post, 0); // italicAngle
    be16(&mut post, (-100i16) as u16); // underlinePosition
    be16(&mut post, 50); // underlineThickness
    post.extend([0u8; 20]); // isFixedPitch, memory fields

    let mut tables: Vec<([u8; 4], Vec<u8>)> = vec![
        (*b"OS/2", os2),
        (*b"cmap", cmap),
        (*b"glyf", glyf),
        (*b"head", head),
        (*b"hhea", hhea),
        (*b"hmtx", hmtx),
        (*b"loca", loca),
        (*b"maxp", maxp),
        (*b"name", name),
        (*b"post", post),
    ];
    if pad > 0 {
        tables.push((*b"zpad", filler(pad).collect()));
    }
    let count = tables.len() as u16;
    let pow = 1u16 << (15 - count.leading_zeros() as u16);
    let mut out = Vec::new();
    be32(&mut out, 0x0001_0000);
    be16(&mut out, count);
    be16(&mut out, pow * 16); // searchRange
    be16(&mut out, pow.trailing_zeros() as u16); // entrySelector
    be16(&mut out, count * 16 - pow * 16); // rangeShift
    let mut offset = 12 + 16 * tables.len();
    let mut body = Vec::new();
    let mut head_at = 0;
    for (tag, data) in &tables {
        out.extend(tag);
        be32(&mut out, checksum(data));
        be32(&mut out, offset as u32);
        be32(&mut out, data.len() as u32);
        if tag == b"head" {
            head_at = offset;
        }
        body.extend(data);
        // every table starts on a 4-byte boundary (all but the padding are whole words long)
        let aligned = data.len().next_multiple_of(4);
        body.extend(std::iter::repeat_n(0u8, aligned - data.len()));
        offset += aligned;
    }
    // the padding table is last and needs no alignment after it
    let trailing = tables
        .last()
        .map_or(0, |(_, d)| d.len().next_multiple_of(4) - d.len());
    body.truncate(body.len() - trailing);
    out.extend(body);
    let adjust = 0xB1B0_AFBAu32.wrapping_sub(checksum(&out));
    out[head_at + 8..head_at + 12].copy_from_slice(&adjust.to_be_bytes());
    out
}

/// The OpenType table checksum: the sum of big-endian 32-bit words, the tail zero-padded.
fn checksum(data: &[u8]) -> u32 {
    data.chunks(4).fold(0u32, |sum, c| {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        sum.wrapping_add(u32::from_be_bytes(w))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::builtin;

    fn contains(hay: &[u8], needle: &str) -> bool {
        hay.windows(needle.len()).any(|w| w == needle.as_bytes())
    }

    #[test]
    fn every_file_has_its_manifests_size_and_is_named_by_its_host() {
        for name in crate::page::BUILTIN {
            let page = builtin(name).unwrap();
            let site = build(&page);
            assert_eq!(site.files.len(), page.resources.len());
            assert_eq!(site.shortfall(&page), vec![], "{name}");
            for i in 1..page.resources.len() {
                let h = host(&page, i);
                assert!(
                    contains(&site.files[h].bytes, &site.files[i].name),
                    "{name}: {} does not name {}",
                    site.files[h].name,
                    site.files[i].name
                );
            }
            // the built-in pages' parents can all name their children
            for (i, r) in page.resources.iter().enumerate().skip(1) {
                assert_eq!(Some(host(&page, i)), r.parent, "{name} {}", r.id);
            }
        }
    }

    #[test]
    fn the_bands_divide_the_viewport_by_weight() {
        let page = builtin("medium").unwrap();
        let site = build(&page);
        let total: f64 = page.resources.iter().map(|r| r.above_fold).sum();
        assert_eq!(
            site.bands.len(),
            page.resources.iter().filter(|r| r.above_fold > 0.0).count()
        );
        let mut top = 0;
        for b in &site.bands {
            assert_eq!(b.top, top, "bands follow each other");
            top += b.height;
            let share = page.resources[b.resource].above_fold / total;
            // rounding both ends of a band moves its height by at most one pixel
            assert!((b.height as f64 - share * VIEWPORT.1 as f64).abs() <= 1.0);
            assert!(b.rgb.iter().all(|&c| (40..=215).contains(&c)));
        }
        assert_eq!(top, VIEWPORT.1);
        let colours: std::collections::HashSet<_> = site.bands.iter().map(|b| b.rgb).collect();
        assert_eq!(colours.len(), site.bands.len(), "each band its own colour");
    }

    #[test]
    fn images_decode_to_their_bands_colour_and_fonts_are_well_formed() {
        let page = builtin("medium").unwrap();
        let site = build(&page);
        let mut pngs = 0;
        for (i, r) in page.resources.iter().enumerate() {
            let bytes = &site.files[i].bytes;
            let colour = site
                .bands
                .iter()
                .find(|b| b.resource == i)
                .map_or(BELOW, |b| b.rgb);
            match (r.kind, extension(&page, i)) {
                (Kind::Image, "jpg") => {
                    assert_eq!(&bytes[..2], &[0xFF, 0xD8], "{}: SOI", r.id);
                    // the end-of-image marker is within the last 3 bytes + 2
                    let eoi = bytes.windows(2).rposition(|w| w == [0xFF, 0xD9]).unwrap();
                    assert!(bytes.len() - eoi <= 5, "{}: EOI at the end", r.id);
                }
                (Kind::Image, "png") => {
                    pngs += 1;
                    let dec = png::Decoder::new(std::io::Cursor::new(bytes.as_slice()));
                    let mut reader = dec.read_info().unwrap();
                    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
                    let info = reader.next_frame(&mut buf).unwrap();
                    assert_eq!((info.width, info.height), (IMAGE_SIDE, IMAGE_SIDE));
                    assert_eq!(&buf[..3], &colour, "{}", r.id);
                }
                (Kind::Font, _) => {
                    assert_eq!(&bytes[..4], &[0, 1, 0, 0], "TrueType");
                    // the whole font sums to the magic constant once head's adjustment is in
                    assert_eq!(checksum(bytes), 0xB1B0_AFBA);
                    let tables = u16::from_be_bytes([bytes[4], bytes[5]]) as usize;
                    let mut tags = Vec::new();
                    for t in 0..tables {
                        let e = &bytes[12 + 16 * t..28 + 16 * t];
                        let off = u32::from_be_bytes(e[8..12].try_into().unwrap()) as usize;
                        let len = u32::from_be_bytes(e[12..16].try_into().unwrap()) as usize;
                        assert!(off.is_multiple_of(4) && off + len <= bytes.len());
                        if &e[..4] != b"head" {
                            assert_eq!(
                                u32::from_be_bytes(e[4..8].try_into().unwrap()),
                                checksum(&bytes[off..off + len])
                            );
                        }
                        tags.push(e[..4].to_vec());
                    }
                    let mut sorted = tags.clone();
                    sorted.sort();
                    assert_eq!(tags, sorted, "tables in tag order");
                }
                _ => {}
            }
        }
        assert!(pngs > 0, "the medium page has PNG images");
    }

    #[test]
    fn a_file_too_small_for_its_content_keeps_its_content_and_says_so() {
        let mut page = builtin("small").unwrap();
        page.resources[0].bytes = 10;
        let fonts: Vec<usize> = (0..page.resources.len())
            .filter(|&i| page.resources[i].kind == Kind::Font)
            .collect();
        page.resources[fonts[0]].bytes = 3;
        let site = build(&page);
        let short = site.shortfall(&page);
        assert_eq!(short.len(), 2, "{short:?}");
        assert!(short.iter().all(|&(_, want, got)| got > want));
        // and any size a segment or chunk cannot hold exactly still comes out exact
        for n in [700u64, 701, 702, 703, 704, 65_540, 65_541, 200_003] {
            assert_eq!(jpeg([1, 2, 3], n).len() as u64, n, "jpeg {n}");
            assert_eq!(png([1, 2, 3], n).len() as u64, n, "png {n}");
            assert_eq!(font(n + 1000).len() as u64, n + 1000, "font {n}");
        }
    }

    /// Writes the built-in pages' sites where `QUICLAB_SITE_DIR` says (to look at one in a
    /// browser); checks that writing names every file.
    #[test]
    fn sites_write_every_file() {
        let dir = std::env::var_os("QUICLAB_SITE_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::env::temp_dir().join(format!("quiclab-site-{}", std::process::id()))
            });
        for name in crate::page::BUILTIN {
            let page = builtin(name).unwrap();
            let site = build(&page);
            site.write(&dir.join(name)).unwrap();
            for f in &site.files {
                assert_eq!(
                    std::fs::read(dir.join(name).join(&f.name)).unwrap(),
                    f.bytes
                );
            }
        }
        if std::env::var_os("QUICLAB_SITE_DIR").is_none() {
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn names_are_safe_and_unique() {
        let page = Page::from_toml(
            r#"
name = "x"
[[resource]]
id = "https://example.com/a/b/"
type = "html"
bytes = 1000
[[resource]]
id = "https://example.com/s/../x y?v=1.css"
type = "css"
bytes = 100
parent = "https://example.com/a/b/"
[[resource]]
id = "https://example.com/p.JPEG#f"
type = "image"
bytes = 900
parent = "https://example.com/s/../x y?v=1.css"
"#,
            "t",
        )
        .unwrap();
        let names: Vec<String> = (0..3).map(|i| file_name(&page, i)).collect();
        assert_eq!(names, ["000-b.html", "001-xy.css", "002-p.jpg"]);
    }
}
