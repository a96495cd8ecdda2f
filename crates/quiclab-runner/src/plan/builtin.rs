//! The plans built into quiclab, runnable by name.

/// Plans built into quiclab, runnable by name.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("www21", include_str!("../../../../plans/www21.toml")),
    ("clients", include_str!("../../../../plans/clients.toml")),
    ("repeat", include_str!("../../../../plans/repeat.toml")),
    ("hls", include_str!("../../../../plans/hls.toml")),
    (
        "telemetry",
        include_str!("../../../../plans/telemetry.toml"),
    ),
    (
        "coded-loss",
        include_str!("../../../../plans/coded-loss.toml"),
    ),
    ("bulk-mtu", include_str!("../../../../plans/bulk-mtu.toml")),
    ("pages", include_str!("../../../../plans/pages.toml")),
    (
        "implementations",
        include_str!("../../../../plans/implementations.toml"),
    ),
    (
        "explain-check",
        include_str!("../../../../plans/explain-check.toml"),
    ),
];
