//! Plan values with their place in the file: a located error ([`PlanError`]), the TOML scalars
//! every key parser takes, and [`WorkloadKeys`], the `[workload]` table as a workload module
//! reads it.

use std::fmt;
use std::ops::Range;
use std::time::Duration;

use indexmap::IndexMap;
use quiclab_link::units;
use toml::Spanned;

/// A plan problem with its place in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    pub file: String,
    /// 1-based line and column, when the problem has a place.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file, self.line, self.column, self.message
            )
        } else {
            write!(f, "{}: {}", self.file, self.message)
        }
    }
}

impl std::error::Error for PlanError {}

pub(crate) type Value = Spanned<toml::Value>;
pub(crate) type Table = IndexMap<Spanned<String>, Value>;

pub(crate) struct Ctx<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl Ctx<'_> {
    pub fn err(&self, at: std::ops::Range<usize>, message: impl Into<String>) -> PlanError {
        let (line, column) = line_col(self.text, at.start);
        PlanError {
            file: self.file.to_string(),
            line,
            column,
            message: message.into(),
        }
    }
}

pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// A TOML scalar as the string the key parsers take (`1400` and `"1400"` alike).
pub(crate) fn scalar(ctx: &Ctx, v: &Value) -> Result<String, PlanError> {
    match v.get_ref() {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(ctx.err(
            v.span(),
            format!(
                "expected a string, number or boolean, found a {}",
                other.type_str()
            ),
        )),
    }
}

pub(crate) fn parse_size(ctx: &Ctx, v: &Value) -> Result<u64, PlanError> {
    // a bare TOML integer is a number of bytes
    let n = match v.get_ref() {
        toml::Value::Integer(i) => u64::try_from(*i).unwrap_or(0),
        _ => units::parse_bytes(&scalar(ctx, v)?)
            .map_err(|e| ctx.err(v.span(), format!("size: {e}")))?,
    };
    if n == 0 || n > 10_000_000_000 {
        return Err(ctx.err(v.span(), "size: allowed: 1 byte to 10 GB"));
    }
    Ok(n)
}

/// The `[workload]` table (with the profile's overrides applied) as a workload module reads it:
/// each getter checks one key and fails with its place and what is allowed.
pub struct WorkloadKeys<'a> {
    pub(crate) ctx: &'a Ctx<'a>,
    /// The place of `[workload]`, for keys that are missing.
    pub(crate) at: Range<usize>,
    pub(crate) table: &'a Table,
}

impl WorkloadKeys<'_> {
    /// The plan file's name (for messages, and to resolve files named relative to it).
    pub fn file(&self) -> &str {
        self.ctx.file
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.table.get_key_value(key).map(|(_, v)| v)
    }

    /// An error at `span`, or at `[workload]` without one.
    pub fn err(&self, span: Option<Range<usize>>, message: impl Into<String>) -> PlanError {
        self.ctx
            .err(span.unwrap_or_else(|| self.at.clone()), message)
    }

    /// The error for a key that must be given.
    pub fn missing(&self, what: &str) -> PlanError {
        self.err(None, format!("[workload] needs {what}"))
    }

    /// A value as a string (`1400` and `"1400"` alike).
    pub fn scalar(&self, v: &Value) -> Result<String, PlanError> {
        scalar(self.ctx, v)
    }

    /// A size in bytes ("100kb", or a bare number of bytes).
    pub fn size(&self, v: &Value) -> Result<u64, PlanError> {
        parse_size(self.ctx, v)
    }

    /// A whole number in `range`, required.
    pub fn int(&self, key: &str, range: (i64, i64)) -> Result<u32, PlanError> {
        let Some(v) = self.get(key) else {
            return Err(self.missing(key));
        };
        match v.get_ref() {
            toml::Value::Integer(n) if (range.0..=range.1).contains(n) => Ok(*n as u32),
            _ => Err(self.err(
                Some(v.span()),
                format!(
                    "{key}: allowed: a whole number from {} to {}",
                    range.0, range.1
                ),
            )),
        }
    }

    /// `duration`: required, at most an hour; with its place.
    pub fn duration(&self) -> Result<(Duration, Range<usize>), PlanError> {
        let Some(v) = self.get("duration") else {
            return Err(self.missing("duration, e.g. \"10s\""));
        };
        let d = units::parse_duration(&self.scalar(v)?)
            .map_err(|e| self.err(Some(v.span()), format!("duration: {e}")))?;
        if d > Duration::from_secs(3600) {
            return Err(self.err(Some(v.span()), "duration: allowed: at most 1 hour"));
        }
        Ok((d, v.span()))
    }

    /// `sizes`: a list of distinct sizes, required.
    pub fn sizes(&self) -> Result<Vec<u64>, PlanError> {
        let Some(v) = self.get("sizes") else {
            return Err(self.missing("sizes, e.g. [\"100kb\", \"1mb\"]"));
        };
        let toml::Value::Array(items) = v.get_ref() else {
            return Err(self.err(Some(v.span()), "sizes: allowed: a list of sizes"));
        };
        if items.is_empty() {
            return Err(self.err(Some(v.span()), "sizes: give at least one size"));
        }
        let mut out = Vec::new();
        for item in items {
            // the items of a replaced list carry the list's place
            let item = Spanned::new(v.span(), item.clone());
            let n = self.size(&item)?;
            if out.contains(&n) {
                return Err(self.err(Some(v.span()), format!("size {n} bytes is listed twice")));
            }
            out.push(n);
        }
        Ok(out)
    }
}

/// A file a plan names: relative to the plan file's directory (absolute names as given), so a
/// plan runs the same from any working directory.
pub(crate) fn beside_plan(plan_file: &str, name: &str) -> std::path::PathBuf {
    let name = std::path::Path::new(name);
    match std::path::Path::new(plan_file).parent() {
        Some(dir) if name.is_relative() && dir.is_dir() => dir.join(name),
        _ => name.to_path_buf(),
    }
}
