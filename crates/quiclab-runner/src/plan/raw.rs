//! The plan file's tables as TOML gives them, before anything is checked against the registry.

use super::*;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlan {
    pub(super) name: Spanned<String>,
    #[serde(default)]
    pub(super) description: String,
    pub(super) iterations: Value,
    #[serde(default)]
    pub(super) seed: Option<Spanned<i64>>,
    #[serde(default, rename = "trial-timeout")]
    pub(super) trial_timeout: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) interleave: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) cells: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) quick: Option<RawQuick>,
    pub(super) workload: Spanned<Table>,
    #[serde(default)]
    pub(super) network: Table,
    #[serde(default)]
    pub(super) conditions: IndexMap<Spanned<String>, Table>,
    #[serde(default)]
    pub(super) matrix: IndexMap<Spanned<String>, Spanned<Vec<Value>>>,
    pub(super) arms: Spanned<IndexMap<Spanned<String>, Table>>,
    #[serde(default)]
    pub(super) compare: Vec<RawCompare>,
    #[serde(default)]
    pub(super) planted: Vec<RawPlanted>,
}

/// `iterations = N` (1 to 100000), or `iterations = { min = N, max = N, ci = "P%" }`
/// (2 <= min <= max <= 100000, 0.1 % <= P <= 50 %): the iterations to expand (the most) and the
/// adaptive rule.
pub(super) fn parse_iterations(
    ctx: &Ctx,
    v: &Value,
) -> Result<(u32, Option<AdaptiveIterations>), PlanError> {
    const FORM: &str = "allowed: a number of iterations (1 to 100000), or \
        { min = N, max = N, ci = \"2%\" } to stop each condition and size once every compared \
        difference in it is known to within ci (2 <= min <= max <= 100000, ci from 0.1% to \
        50%)";
    let err = |m: String| ctx.err(v.span(), m);
    match v.get_ref() {
        toml::Value::Integer(n @ 1..=100_000) => Ok((*n as u32, None)),
        toml::Value::Integer(n) => Err(err(format!("iterations = {n}: allowed: 1 to 100000"))),
        toml::Value::Table(t) => {
            if let Some(k) = t
                .keys()
                .find(|k| !["min", "max", "ci"].contains(&k.as_str()))
            {
                return Err(err(format!("iterations: unknown key `{k}`: {FORM}")));
            }
            let count = |key: &str| match t.get(key) {
                Some(toml::Value::Integer(n @ 2..=100_000)) => Ok(*n as u32),
                Some(other) => Err(err(format!("iterations: {key} = {other}: {FORM}"))),
                None => Err(err(format!("iterations: {key} is missing: {FORM}"))),
            };
            let (min, max) = (count("min")?, count("max")?);
            if min > max {
                return Err(err(format!(
                    "iterations: min = {min} is above max = {max}: {FORM}"
                )));
            }
            let ci = match t.get("ci") {
                Some(toml::Value::String(p)) => match units::parse_percent(p) {
                    // below 0.1 % no campaign could settle: its trials' own noise is larger
                    Ok(f) if (0.001..=0.5).contains(&f) => f,
                    _ => return Err(err(format!("iterations: ci = {p:?}: {FORM}"))),
                },
                Some(other) => return Err(err(format!("iterations: ci = {other}: {FORM}"))),
                None => return Err(err(format!("iterations: ci is missing: {FORM}"))),
            };
            Ok((max, Some(AdaptiveIterations { min, max, ci })))
        }
        other => Err(err(format!("iterations = {other}: {FORM}"))),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuick {
    #[serde(default)]
    pub(super) iterations: Option<Value>,
    #[serde(default)]
    pub(super) sizes: Option<Spanned<Vec<Value>>>,
    /// `[quick.workload]`: workload keys that replace the plan's
    #[serde(default)]
    pub(super) workload: Option<Table>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCompare {
    pub(super) a: Spanned<String>,
    pub(super) b: Spanned<String>,
}

/// `[[planted]]`: `a` and `b` (a control arm and the arm with the cause, checked in every
/// condition or the one `in` names) or `condition` (with the cause, against its base, for
/// every arm or those `arms` lists), and `cause`: a component's name, a list of them, or
/// "nothing".
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlanted {
    #[serde(default)]
    pub(super) a: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) b: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) condition: Option<Spanned<String>>,
    /// With `a` and `b`: the one condition to check them in (all by default).
    #[serde(default, rename = "in")]
    pub(super) within: Option<Spanned<String>>,
    /// With `condition`: the arms to check it for (every arm by default).
    #[serde(default)]
    pub(super) arms: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) cause: Spanned<toml::Value>,
}
