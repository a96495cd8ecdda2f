//! An arm's keys: which stack serves and which fetches, its knobs checked against each stack's
//! own, and its label.

use super::*;

/// Every key an arm accepts, with its help (for errors and `--help`).
pub fn arm_keys_help() -> String {
    let mut s = format!(
        "  http  HTTP version: 1.1, 2 (over TCP and TLS 1.3), 3 (over QUIC), or coded (the network-coded transport)\n  stack  the stack that serves and fetches (default: the first that speaks the HTTP version): {}\n  server-stack, client-stack  two stacks paired, one serving, one fetching\n  telemetry  in telemetry plans instead of http, how flushes travel: {}\n  label  a description for the report\n",
        stacks::names(),
        Mode::allowed()
    );
    for k in stacks::all_knobs() {
        let takers: Vec<_> = stacks::all()
            .iter()
            .filter(|st| st.knobs().iter().any(|o| o.key == k.key))
            .map(|st| st.name())
            .collect();
        s.push_str(&format!(
            "  {}  {} (stacks: {})\n",
            k.key,
            k.help,
            takers.join(", ")
        ));
    }
    s
}

/// Keys of an arm that are not knobs.
pub(super) const ARM_KEYS: [&str; 6] = [
    "http",
    "telemetry",
    "stack",
    "server-stack",
    "client-stack",
    "label",
];

/// "a", "a and b", "a, b and c".
pub(super) fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// What a stack speaks, for messages: "HTTP/1.1 and HTTP/2 over TCP (stack \"tcp\")".
pub(super) fn speaks(s: &dyn Stack) -> String {
    let versions: Vec<String> = s.http().iter().map(|h| h.title().to_string()).collect();
    format!(
        "{} over {} (stack {:?})",
        and_list(&versions),
        s.transport().title(),
        s.name()
    )
}

/// A stack an arm names, and where.
pub(super) type Placed = (&'static dyn Stack, Range<usize>);

pub(super) fn parse_arm(
    ctx: &Ctx,
    name: &Spanned<String>,
    t: &Table,
    workload: &dyn WorkloadKind,
) -> Result<Arm, PlanError> {
    let telemetry_plan = workload.needs() == Capability::Telemetry;
    let arm = name.get_ref();
    let get = |key: &str| t.iter().find(|(k, _)| k.get_ref() == key);
    let modes = || Mode::ALL.map(|m| format!("{:?}", m.name())).join(", ");
    // stacks the arm names, with the place of the name
    let named = |key: &str| -> Result<Option<Placed>, PlanError> {
        let Some((_, v)) = get(key) else {
            return Ok(None);
        };
        let raw = scalar(ctx, v)?;
        match stacks::find(&raw) {
            Some(s) => Ok(Some((s, v.span()))),
            None => Err(ctx.err(
                v.span(),
                format!(
                    "arm {arm:?}: {key} = {raw:?}: no such stack; allowed: {}",
                    stacks::names()
                ),
            )),
        }
    };
    let stack = named("stack")?;
    let (server_named, client_named) = (named("server-stack")?, named("client-stack")?);
    if let (Some((_, at)), true) = (&stack, server_named.is_some() || client_named.is_some()) {
        return Err(ctx.err(
            at.clone(),
            format!(
                "arm {arm:?}: stack names the stack of both ends; to pair two, give \
                 server-stack and client-stack instead"
            ),
        ));
    }
    let (http, mode, http_at) = if telemetry_plan {
        if let Some((k, _)) = get("http") {
            return Err(ctx.err(
                k.span(),
                format!(
                    "arm {arm:?}: http does not apply to a telemetry plan (no HTTP is spoken); \
                     say how flushes travel instead: telemetry = {}",
                    modes()
                ),
            ));
        }
        let (_, v) = get("telemetry").ok_or_else(|| {
            ctx.err(
                name.span(),
                format!("arm {arm:?} needs telemetry = {}", modes()),
            )
        })?;
        let raw = scalar(ctx, v)?;
        let mode: Mode = raw.parse().map_err(|_| {
            ctx.err(
                v.span(),
                format!("arm {arm:?}: telemetry = {raw:?}; allowed: {}", modes()),
            )
        })?;
        let carrier = stack
            .as_ref()
            .or(server_named.as_ref())
            .map(|(s, _)| *s)
            .or_else(|| stacks::for_mode(mode))
            .ok_or_else(|| {
                ctx.err(
                    v.span(),
                    format!("arm {arm:?}: no stack carries telemetry = {raw:?}"),
                )
            })?;
        let http = *carrier.http().last().unwrap_or(&HttpVersion::Http2);
        (http, Some(mode), v.span())
    } else {
        if let Some((k, _)) = get("telemetry") {
            return Err(ctx.err(
                k.span(),
                format!(
                    "arm {arm:?}: telemetry applies to plans whose [workload] kind is \"telemetry\""
                ),
            ));
        }
        let allowed = HttpVersion::ALL
            .map(|h| format!("{:?}", h.name()))
            .join(", ");
        match get("http") {
            Some((_, http_v)) => {
                let raw = scalar(ctx, http_v)?;
                let http = HttpVersion::from_name(&raw).ok_or_else(|| {
                    ctx.err(
                        http_v.span(),
                        format!("arm {arm:?}: http = {raw:?}; allowed: {allowed}"),
                    )
                })?;
                (http, None, http_v.span())
            }
            None => {
                // a named stack that speaks one version needs no http
                let (s, at) = stack
                    .as_ref()
                    .or(server_named.as_ref())
                    .cloned()
                    .ok_or_else(|| {
                        ctx.err(
                            name.span(),
                            format!("arm {arm:?} needs http = {allowed} (or stack = NAME)"),
                        )
                    })?;
                match s.http() {
                    [one] => (*one, None, at),
                    several => {
                        let v: Vec<String> =
                            several.iter().map(|h| format!("{:?}", h.name())).collect();
                        return Err(ctx.err(
                            at,
                            format!(
                                "arm {arm:?}: stack {:?} speaks several HTTP versions; say which \
                                 with http = {}",
                                s.name(),
                                v.join(" or ")
                            ),
                        ));
                    }
                }
            }
        }
    };
    let default = match mode {
        Some(m) => stacks::for_mode(m),
        None => stacks::for_http(http),
    };
    let pick = |own: &Option<Placed>| {
        own.clone()
            .or_else(|| stack.clone())
            .or_else(|| default.map(|s| (s, http_at.clone())))
    };
    let (Some(server), Some(client)) = (pick(&server_named), pick(&client_named)) else {
        return Err(ctx.err(
            http_at,
            format!("arm {arm:?}: no stack speaks {}", http.title()),
        ));
    };
    for (side, (s, at)) in [("server", &server), ("client", &client)] {
        let fits = match mode {
            Some(m) => s.telemetry_modes().contains(&m),
            None => s.http().contains(&http),
        };
        if !fits {
            let what = match mode {
                Some(m) => format!("telemetry = {:?}", m.name()),
                None => http.title().to_string(),
            };
            return Err(ctx.err(
                at.clone(),
                format!(
                    "arm {arm:?}: stack {:?} does not carry {what}; it speaks {}",
                    s.name(),
                    speaks(*s)
                ),
            ));
        }
        // a client must do what the workload needs; a server must serve it
        let can = |c: Capability| {
            if side == "client" {
                Capability::any_covers(s.capabilities(), c)
            } else {
                s.serves(c)
            }
        };
        if !can(workload.needs()) {
            let runs: Vec<&str> = workloads::WORKLOADS
                .iter()
                .filter(|w| can(w.needs()))
                .map(|w| w.kind())
                .collect();
            return Err(ctx.err(
                at.clone(),
                format!(
                    "arm {arm:?}: stack {:?} does not run the {} workload{}; its workloads: {}",
                    s.name(),
                    workload.kind(),
                    if side == "server" { " as a server" } else { "" },
                    runs.join(", ")
                ),
            ));
        }
    }
    let (server, client) = (server.0, client.0);
    // the knobs the arm's stacks take, server's first
    let mut taken: Vec<&'static Knob> = server.knobs().to_vec();
    for k in client.knobs() {
        if !taken.iter().any(|o| o.key == k.key) {
            taken.push(k);
        }
    }
    let takes = |k: &Knob| k.telemetry || !telemetry_plan;
    let mut label = None;
    let mut given = Vec::new();
    for (k, v) in t {
        let key = k.get_ref().as_str();
        if key == "label" {
            label = Some(scalar(ctx, v)?);
            continue;
        }
        if ARM_KEYS.contains(&key) {
            continue;
        }
        let Some(knob) = taken.iter().copied().find(|kn| kn.key == key && takes(kn)) else {
            let everywhere = stacks::all_knobs();
            let problem = match everywhere.iter().find(|kn| kn.key == key) {
                Some(kn) if !takes(kn) => format!("{key} does not apply to telemetry arms"),
                Some(_) => {
                    let takers = stacks::all()
                        .into_iter()
                        .filter(|s| s.knobs().iter().any(|kn| kn.key == key));
                    let only: Vec<String> = if telemetry_plan {
                        takers
                            .flat_map(|s| s.telemetry_modes())
                            .map(|m| m.name().to_string())
                            .collect()
                    } else {
                        takers.map(speaks).collect()
                    };
                    let stacks = if server.name() == client.name() {
                        format!("stack {:?} takes", server.name())
                    } else {
                        format!("stacks {:?} and {:?} take", server.name(), client.name())
                    };
                    let own: Vec<&str> = taken.iter().filter(|k| takes(k)).map(|k| k.key).collect();
                    return Err(ctx.err(
                        k.span(),
                        format!(
                            "arm {arm:?}: {key} applies to {} arms only; the arm's {stacks} \
                             {}",
                            and_list(&only),
                            if own.is_empty() {
                                "no knob".to_string()
                            } else {
                                own.join(", ")
                            }
                        ),
                    ));
                }
                None => format!("unknown key {key:?}"),
            };
            let names: Vec<&str> = ARM_KEYS
                .into_iter()
                .filter(|k| *k != if telemetry_plan { "http" } else { "telemetry" })
                .chain(taken.iter().filter(|k| takes(k)).map(|k| k.key))
                .collect();
            return Err(ctx.err(
                k.span(),
                format!("arm {arm:?}: {problem}; allowed: {}", names.join(", ")),
            ));
        };
        let raw = scalar(ctx, v)?;
        let value = knob
            .check(&raw)
            .map_err(|why| ctx.err(v.span(), format!("{key} = {raw:?}: {why}")))?;
        // a pair of stacks that both take the key must both accept the value
        for (side, s) in [("server", server), ("client", client)] {
            if let Some(own) = s.knobs().iter().find(|o| o.key == key)
                && !std::ptr::eq(*own, knob)
            {
                own.check(&raw).map_err(|why| {
                    ctx.err(
                        v.span(),
                        format!("{key} = {raw:?}: the {side}'s stack {:?}: {why}", s.name()),
                    )
                })?;
            }
        }
        given.push((knob, value));
    }
    // a planted response delay: asked by the client with the request, honoured by the server
    if let Some((k, _)) = t.iter().find(|(k, _)| k.get_ref() == "response-delay") {
        if workload.kind() != "single-object" {
            return Err(ctx.err(
                k.span(),
                format!(
                    "arm {arm:?}: response-delay holds the one response of a single-object \
                     trial; the {} workload has its own timing (allowed with kind = \
                     \"single-object\")",
                    workload.kind()
                ),
            ));
        }
        for (s, as_server) in [(client, false), (server, true)] {
            stacks::offers(s, Capability::ResponseDelay, as_server)
                .map_err(|e| ctx.err(k.span(), format!("arm {arm:?}: {e}")))?;
        }
    }
    // the stacks' order, so that equal arms resolve (and hash) equally however they are written
    given.sort_by_key(|(knob, _)| taken.iter().position(|k| k.key == knob.key));
    let knobs: Vec<(String, String)> = given
        .iter()
        .map(|(k, v)| (k.key.to_string(), v.clone()))
        .collect();
    let mut caveats = server
        .check(&knobs)
        .map_err(|e| ctx.err(name.span(), format!("arm {arm:?}: {e}")))?;
    if client.name() != server.name() {
        for c in client
            .check(&knobs)
            .map_err(|e| ctx.err(name.span(), format!("arm {arm:?}: {e}")))?
        {
            if !caveats.contains(&c) {
                caveats.push(c);
            }
        }
    }
    // what reaches each endpoint parses into its stack's typed settings, as its trials' tasks
    // will carry them
    for (s, side) in [
        (server, stacks::server_knobs(server, &knobs)),
        (client, stacks::client_knobs(client, &knobs)),
    ] {
        s.settings(&side)
            .map_err(|e| ctx.err(name.span(), format!("arm {arm:?}: {e:#}")))?;
    }
    let label = label.unwrap_or_else(|| {
        let own = server.label(http, mode, &knobs);
        if client.name() == server.name() {
            own
        } else {
            format!("{own}; fetched by {}", client.label(http, mode, &knobs))
        }
    });
    Ok(Arm {
        name: arm.clone(),
        label,
        http,
        telemetry: mode,
        server_stack: server,
        client_stack: client,
        knobs,
        caveats,
    })
}
