//! quiclab's results store: one SQLite database per campaign (`DIR/results.db`, WAL mode).
//!
//! Contract: a trial is written in one transaction with its timeline, so a crash (or SIGKILL)
//! loses at most the trial in progress and never leaves half a trial behind; a trial id is the
//! primary key, so a campaign holds exactly one record per trial, and re-running a trial
//! replaces its record. The campaign's description (arms, conditions, sizes, comparisons,
//! provenance) is kept as JSON beside the trials, so a report can be made from the database
//! alone. Nothing here runs trials or renders anything.

pub mod merge;
pub mod output;
mod tables;

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use quiclab_model::campaign::{BusySpell, Campaign, Metrics, TimelinePoint, Trial};
#[cfg(test)]
use quiclab_model::campaign::{Detail, RequestMetrics};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::{Deserialize, Serialize};

/// The database's file name inside a campaign directory.
pub const DB_FILE: &str = "results.db";
/// The key of a trial's configuration that names, for a run of an interleaved baseline
/// condition, the condition whose run follows it (reported as [`Trial::before`]).
pub const CONFIG_BEFORE: &str = "before";
/// Version of the schema below; a database of another version is refused.
const SCHEMA_VERSION: i64 = 7;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("results database {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "results database {path}: schema version {found}, this quiclab reads version {SCHEMA_VERSION}"
    )]
    Version { path: String, found: i64 },
    #[error("results database {path}: {what}: {source}")]
    Json {
        path: String,
        what: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no campaign has been recorded here")]
    Empty { path: String },
    #[error(
        "{path} holds no campaign, but {dir}/trials holds {folders} trial folders: the database \
         of an earlier run was deleted, emptied or damaged. Starting afresh would orphan those \
         trials: restore the database, or move {dir}/trials away (or choose another --out)"
    )]
    Orphans {
        path: String,
        dir: String,
        folders: usize,
    },
    #[error(
        "results database {path}: its {table:?} table is missing (the database was damaged or \
         edited): quiclab will not start afresh over it, and would not know which trial \
         folders are whose; restore the database, or move the directory away"
    )]
    Damaged { path: String, table: String },
    #[error(
        "{dir} is in use by another quiclab run (pid {holder}): wait for it to finish, stop it, \
         or choose another --out directory"
    )]
    Busy { dir: String, holder: String },
    #[error(transparent)]
    Output(#[from] output::OutputError),
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// One trial as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrialRecord {
    /// Hash of the resolved configuration (the primary key).
    pub id: String,
    /// Position in the campaign's expansion (execution order).
    pub seq: u64,
    pub arm: String,
    pub condition: String,
    pub size: u64,
    pub iteration: u32,
    pub seed: u64,
    /// The fully resolved configuration of the trial (link, arm knobs, workload).
    pub config: serde_json::Value,
    /// When the trial started, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Wall time of the whole trial (topology set-up to teardown), ms.
    pub wall_ms: f64,
    /// The measurements (with the sender's timeline), or why the trial failed.
    pub outcome: std::result::Result<Metrics, String>,
    /// What the emulator did, per direction (counters, lateness), as JSON.
    pub link: serde_json::Value,
    /// The client's request record(s), as written by `quiclab get --json`.
    pub requests: serde_json::Value,
    /// Where the trial's wall time went (topology set-up, server start, client, server stop,
    /// teardown), ms.
    pub phases: serde_json::Value,
    /// Folder of the trial's artifacts, relative to the campaign directory, if kept.
    pub artifacts: Option<String>,
    /// The quiclab build that ran the trial (version and commit); `None` for a trial recorded
    /// before builds were kept.
    pub build: Option<String>,
    /// The machine that ran it (its host name); `None` for a trial recorded before hosts were
    /// kept.
    pub host: Option<String>,
    /// The shard of the campaign it ran in ("K/N", `quiclab run --shard`), if sharded.
    pub shard: Option<String>,
}

/// The meta key under which a shard's run records the trial ids the plan's split gives it (a
/// JSON array), which `merge` holds the shard's trials to.
pub const SHARD_IDS: &str = "shard_trial_ids";
/// The lock file of a campaign directory (see [`Store::lock`]).
pub const LOCK_FILE: &str = ".lock";

/// A campaign directory held by this process until dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: std::fs::File,
}

/// A campaign's database.
pub struct Store {
    conn: Connection,
    path: String,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS trials (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    arm TEXT NOT NULL,
    condition TEXT NOT NULL,
    size INTEGER NOT NULL,
    iteration INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    config TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error TEXT,
    started_unix_ms INTEGER NOT NULL,
    wall_ms REAL NOT NULL,
    ttlb_ms REAL,
    ttfb_ms REAL,
    handshake_ms REAL,
    handshake_rtts REAL,
    hello_retry INTEGER,
    packets_lost INTEGER,
    first_retransmit_offset INTEGER,
    impossible_rtt_samples INTEGER,
    link_drops INTEGER,
    link TEXT NOT NULL,
    requests TEXT NOT NULL,
    phases TEXT NOT NULL,
    artifacts TEXT,
    detail TEXT,
    build TEXT,
    host TEXT,
    shard TEXT,
    bytes_resent INTEGER
);
CREATE TABLE IF NOT EXISTS timeline (
    trial_id TEXT NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    t_ms REAL NOT NULL,
    acked_bytes INTEGER NOT NULL,
    cwnd_bytes INTEGER,
    rtt_ms REAL,
    congestion_event INTEGER NOT NULL,
    bytes_in_flight INTEGER
);
CREATE INDEX IF NOT EXISTS timeline_trial ON timeline(trial_id);
";

impl Store {
    /// Opens (creating if needed) the database of the campaign in `dir`.
    pub fn open(dir: &Path) -> Result<Store> {
        // the campaign's own directory is written in place: not through a link
        output::refuse_link(dir)?;
        output::check_dir(dir)?;
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.display().to_string(),
            source,
        })?;
        let path = dir.join(DB_FILE);
        // SQLite opens its files in place: none of them may be a link
        for f in [DB_FILE, "results.db-wal", "results.db-shm"] {
            output::refuse_link(&dir.join(f))?;
        }
        // the trials' folders are counted and deleted in place: not through a link
        output::refuse_link(&dir.join("trials"))?;
        let p = path.display().to_string();
        let sql = |source| StoreError::Sqlite {
            path: p.clone(),
            source,
        };
        let orphans = || -> Result<()> {
            // a new database: refuse it where an earlier campaign's trials lie, whose database
            // was deleted, emptied or damaged (starting afresh would silently orphan them)
            let folders = std::fs::read_dir(dir.join("trials"))
                .map(|d| d.filter_map(|e| e.ok()).count())
                .unwrap_or(0);
            if folders > 0 {
                return Err(StoreError::Orphans {
                    path: p.clone(),
                    dir: dir.display().to_string(),
                    folders,
                });
            }
            Ok(())
        };
        // before a new database is made: a refusal leaves nothing behind
        if !path.exists() {
            orphans()?;
        }
        let conn = Connection::open(&path).map_err(sql)?;
        // WAL: readers (a report) do not block the runner, and a crash keeps every committed
        // trial. NORMAL sync is durable across a process crash, which is what a SIGKILL is.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(sql)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql)?;
        let found: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql)?;
        if !(0..=SCHEMA_VERSION).contains(&found) {
            return Err(StoreError::Version { path: p, found });
        }
        if found == 0 {
            orphans()?;
        }
        if found > 0 {
            // a database with a schema has all its tables: one gone is damage, not a fresh start
            for table in ["meta", "trials", "timeline"] {
                let there: bool = conn
                    .query_row(
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                        [table],
                        |r| r.get::<_, i64>(0),
                    )
                    .map_err(sql)?
                    > 0;
                if !there {
                    return Err(StoreError::Damaged {
                        path: p,
                        table: table.into(),
                    });
                }
            }
        }
        conn.execute_batch(SCHEMA).map_err(sql)?;
        if found == 1 {
            // version 1 had no workload detail: its trials were single objects, which have none
            conn.execute_batch("ALTER TABLE trials ADD COLUMN detail TEXT")
                .map_err(sql)?;
        }
        if (1..=2).contains(&found) {
            // versions 1 and 2 kept no build: their trials' builds are unknown
            conn.execute_batch("ALTER TABLE trials ADD COLUMN build TEXT")
                .map_err(sql)?;
        }
        if (1..=3).contains(&found) {
            // versions 1 to 3 kept no host and had no shards
            conn.execute_batch(
                "ALTER TABLE trials ADD COLUMN host TEXT; ALTER TABLE trials ADD COLUMN shard TEXT",
            )
            .map_err(sql)?;
        }
        if (1..=4).contains(&found) {
            // Versions 1 to 4 kept one count of mixed units ("retransmissions": TCP segments
            // retransmitted, QUIC packets declared lost) and no bytes re-sent. The count keeps
            // its meaning as packets declared lost; quiche's was a 0 its log never gave (its
            // qlog declares no loss), so it becomes unknown.
            conn.execute_batch(
                "ALTER TABLE trials RENAME COLUMN retransmissions TO packets_lost;
                 ALTER TABLE trials ADD COLUMN bytes_resent INTEGER;
                 UPDATE trials SET packets_lost = NULL
                   WHERE json_extract(config, '$.arm.\"server-stack\"') LIKE 'quiche %';",
            )
            .map_err(sql)?;
        }
        if (1..=5).contains(&found) {
            // Versions 1 to 5 did not say which arms' client is a real browser: Chromium
            // ("chrome") was the one browser client then.
            let described: Option<String> = conn
                .query_row("SELECT value FROM meta WHERE key = 'campaign'", [], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(sql)?;
            if let Some(mut c) =
                described.and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            {
                for arm in c["arms"].as_array_mut().into_iter().flatten() {
                    if arm["client_stack"] == "chrome" {
                        arm["client_browser"] = true.into();
                    }
                }
                conn.execute(
                    "UPDATE meta SET value = ?1 WHERE key = 'campaign'",
                    [c.to_string()],
                )
                .map_err(sql)?;
            }
        }
        let in_flight: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('timeline') WHERE name = 'bytes_in_flight'",
                [],
                |r| r.get(0),
            )
            .map_err(sql)?;
        if (1..=6).contains(&found) && in_flight == 0 {
            // versions 1 to 6 kept no bytes in flight: unknown for their trials
            conn.execute_batch("ALTER TABLE timeline ADD COLUMN bytes_in_flight INTEGER")
                .map_err(sql)?;
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(sql)?;
        Ok(Store { conn, path: p })
    }

    /// Opens an existing campaign's database to read it (a report, an export): read-only, so
    /// reading needs no space and cannot change a campaign another process is writing.
    pub fn open_existing(dir: &Path) -> Result<Store> {
        let path = dir.join(DB_FILE);
        output::refuse_link(&path)?;
        if !path.is_file() {
            return Err(StoreError::Empty {
                path: dir.display().to_string(),
            });
        }
        let p = path.display().to_string();
        let sql = |source| StoreError::Sqlite {
            path: p.clone(),
            source,
        };
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql)?;
        let found: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql)?;
        if found == 0 {
            // no schema: an empty or foreign file
            return Err(StoreError::Empty { path: p });
        }
        if found != SCHEMA_VERSION {
            // an older schema is upgraded in place (which needs to write); a newer is refused
            drop(conn);
            return Self::open(dir);
        }
        Ok(Store { conn, path: p })
    }

    /// Takes the campaign directory for this process: a second `quiclab run` into the same
    /// directory would delete the first one's in-flight artifacts. The lock is the kernel's
    /// (released however the process ends); the file names the holder's pid.
    pub fn lock(dir: &Path) -> Result<DirLock> {
        output::check_dir(dir)?;
        let io = |source| StoreError::Io {
            path: dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let path = dir.join(LOCK_FILE);
        let mut file = output::open_rw(&path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = std::io::Read::read_to_string(&mut file, &mut holder);
                return Err(StoreError::Busy {
                    dir: dir.display().to_string(),
                    holder: holder.trim().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let pid = std::process::id();
        file.set_len(0)
            .and_then(|()| writeln!(file, "{pid}"))
            .map_err(io)?;
        Ok(DirLock { _file: file })
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        |source| StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn json(&self, what: impl Into<String>) -> impl Fn(serde_json::Error) -> StoreError + '_ {
        let what = what.into();
        move |source| StoreError::Json {
            path: self.path.clone(),
            what: what.clone(),
            source,
        }
    }

    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                params![key, value],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    pub fn delete_meta(&self, key: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM meta WHERE key = ?1", [key])
            .map_err(self.sql())?;
        Ok(())
    }

    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(self.sql())
    }

    /// Records the campaign's description (its `trials` are ignored: they live in their table).
    pub fn set_campaign(&self, c: &Campaign) -> Result<()> {
        let described = Campaign {
            trials: Vec::new(),
            ..c.clone()
        };
        let text = serde_json::to_string(&described).map_err(self.json("campaign"))?;
        self.set_meta("campaign", &text)
    }

    /// Ids of the trials that finished successfully (a resumed campaign skips them; failed
    /// trials are tried again).
    pub fn finished(&self) -> Result<HashSet<String>> {
        let mut st = self
            .conn
            .prepare("SELECT id FROM trials WHERE status = 'ok'")
            .map_err(self.sql())?;
        let ids = st
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(self.sql())?
            .collect::<std::result::Result<HashSet<_>, _>>()
            .map_err(self.sql())?;
        Ok(ids)
    }

    /// Writes one trial and its timeline in one transaction, replacing an earlier record of
    /// the same trial.
    pub fn record(&mut self, t: &TrialRecord) -> Result<()> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        let json = |what: &str, source| StoreError::Json {
            path: path.clone(),
            what: what.to_string(),
            source,
        };
        let config = serde_json::to_string(&t.config).map_err(|e| json("config", e))?;
        let link = serde_json::to_string(&t.link).map_err(|e| json("link", e))?;
        let requests = serde_json::to_string(&t.requests).map_err(|e| json("requests", e))?;
        let phases = serde_json::to_string(&t.phases).map_err(|e| json("phases", e))?;
        let detail = match t.outcome.as_ref() {
            Ok(m) if !m.detail.is_empty() => {
                Some(serde_json::to_string(&m.detail).map_err(|e| json("detail", e))?)
            }
            _ => None,
        };
        let tx = self.conn.transaction().map_err(sql)?;
        // the timeline goes with its trial (ON DELETE CASCADE)
        tx.execute("DELETE FROM trials WHERE id = ?1", [&t.id])
            .map_err(sql)?;
        let m = t.outcome.as_ref().ok();
        tx.execute(
            "INSERT INTO trials (id, seq, arm, condition, size, iteration, seed, config, status,
                error, started_unix_ms, wall_ms, ttlb_ms, ttfb_ms, handshake_ms, handshake_rtts,
                hello_retry, packets_lost, first_retransmit_offset, impossible_rtt_samples,
                link_drops, link, requests, phases, artifacts, detail, build, host, shard,
                bytes_resent)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30)",
            params![
                t.id,
                t.seq as i64,
                t.arm,
                t.condition,
                t.size as i64,
                t.iteration,
                // SQLite integers are signed 64-bit: store the seed's bits
                t.seed as i64,
                config,
                if m.is_some() { "ok" } else { "failed" },
                t.outcome.as_ref().err(),
                t.started_unix_ms as i64,
                t.wall_ms,
                m.map(|m| m.ttlb_ms),
                m.map(|m| m.ttfb_ms),
                m.and_then(|m| m.handshake_ms),
                m.and_then(|m| m.handshake_rtts),
                m.map(|m| m.hello_retry),
                m.and_then(|m| m.packets_lost).map(|v| v as i64),
                m.and_then(|m| m.first_retransmit_offset).map(|v| v as i64),
                m.and_then(|m| m.impossible_rtt_samples).map(|v| v as i64),
                m.map(|m| m.link_drops as i64),
                link,
                requests,
                phases,
                t.artifacts,
                detail,
                t.build,
                t.host,
                t.shard,
                m.and_then(|m| m.bytes_resent).map(|v| v as i64),
            ],
        )
        .map_err(sql)?;
        if let Some(m) = m {
            let mut st = tx
                .prepare(
                    "INSERT INTO timeline (trial_id, t_ms, acked_bytes, cwnd_bytes, rtt_ms,
                        congestion_event, bytes_in_flight) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(sql)?;
            for p in &m.timeline {
                st.execute(params![
                    t.id,
                    p.t_ms,
                    p.acked_bytes as i64,
                    p.cwnd_bytes.map(|v| v as i64),
                    p.rtt_ms,
                    p.congestion_event,
                    p.bytes_in_flight.map(|v| v as i64)
                ])
                .map_err(sql)?;
            }
        }
        tx.commit().map_err(sql)?;
        Ok(())
    }

    /// Forgets the artifacts folder of a trial (after it was pruned).
    pub fn clear_artifacts(&self, id: &str) -> Result<()> {
        self.conn
            .execute("UPDATE trials SET artifacts = NULL WHERE id = ?1", [id])
            .map_err(self.sql())?;
        Ok(())
    }

    /// The quiclab builds that ran the directory's trials (those known), each once, sorted.
    pub fn builds(&self) -> Result<Vec<String>> {
        let mut st = self
            .conn
            .prepare("SELECT DISTINCT build FROM trials WHERE build IS NOT NULL ORDER BY build")
            .map_err(self.sql())?;
        st.query_map([], |r| r.get(0))
            .map_err(self.sql())?
            .collect::<std::result::Result<Vec<String>, _>>()
            .map_err(self.sql())
    }

    /// Every trial, in execution order, with its timeline.
    pub fn trials(&self) -> Result<Vec<TrialRecord>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, seq, arm, condition, size, iteration, seed, config, status, error,
                    started_unix_ms, wall_ms, ttlb_ms, ttfb_ms, handshake_ms, handshake_rtts,
                    hello_retry, packets_lost, first_retransmit_offset,
                    impossible_rtt_samples, link_drops, link, requests, phases, artifacts, detail,
                    build, host, shard, bytes_resent
                 FROM trials ORDER BY seq",
            )
            .map_err(self.sql())?;
        let raw = st
            .query_map([], |r| {
                let ok = r.get::<_, String>(8)? == "ok";
                let metrics = Metrics {
                    ttlb_ms: r.get::<_, Option<f64>>(12)?.unwrap_or(f64::NAN),
                    ttfb_ms: r.get::<_, Option<f64>>(13)?.unwrap_or(f64::NAN),
                    handshake_ms: r.get(14)?,
                    handshake_rtts: r.get(15)?,
                    hello_retry: r.get::<_, Option<bool>>(16)?.unwrap_or(false),
                    packets_lost: r.get::<_, Option<i64>>(17)?.map(|v| v as u64),
                    bytes_resent: r.get::<_, Option<i64>>(29)?.map(|v| v as u64),
                    first_retransmit_offset: r.get::<_, Option<i64>>(18)?.map(|v| v as u64),
                    impossible_rtt_samples: r.get::<_, Option<i64>>(19)?.map(|v| v as u64),
                    link_drops: r.get::<_, Option<i64>>(20)?.unwrap_or(0) as u64,
                    timeline: Vec::new(),
                    detail: Default::default(),
                };
                Ok((
                    TrialRecord {
                        id: r.get(0)?,
                        seq: r.get::<_, i64>(1)? as u64,
                        arm: r.get(2)?,
                        condition: r.get(3)?,
                        size: r.get::<_, i64>(4)? as u64,
                        iteration: r.get(5)?,
                        seed: r.get::<_, i64>(6)? as u64,
                        config: serde_json::Value::Null,
                        started_unix_ms: r.get::<_, i64>(10)? as u64,
                        wall_ms: r.get(11)?,
                        outcome: if ok {
                            Ok(metrics)
                        } else {
                            Err(r.get::<_, Option<String>>(9)?.unwrap_or_default())
                        },
                        link: serde_json::Value::Null,
                        requests: serde_json::Value::Null,
                        phases: serde_json::Value::Null,
                        artifacts: r.get(24)?,
                        build: r.get(26)?,
                        host: r.get(27)?,
                        shard: r.get(28)?,
                    },
                    [r.get::<_, String>(7)?, r.get(21)?, r.get(22)?, r.get(23)?],
                    r.get::<_, Option<String>>(25)?,
                ))
            })
            .map_err(self.sql())?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(self.sql())?;
        let mut trials = Vec::with_capacity(raw.len());
        for (mut t, [config, link, requests, phases], detail) in raw {
            // a damaged cell names its trial and column
            let id = t.id.clone();
            let cell = |column: &str| self.json(format!("trial {id}, column {column}"));
            t.config = serde_json::from_str(&config).map_err(cell("config"))?;
            if let (Ok(m), Some(d)) = (t.outcome.as_mut(), detail) {
                m.detail = serde_json::from_str(&d).map_err(cell("detail"))?;
            }
            t.link = serde_json::from_str(&link).map_err(cell("link"))?;
            t.requests = serde_json::from_str(&requests).map_err(cell("requests"))?;
            t.phases = serde_json::from_str(&phases).map_err(cell("phases"))?;
            trials.push(t);
        }
        let mut by_id: std::collections::HashMap<String, Vec<TimelinePoint>> =
            std::collections::HashMap::new();
        let mut st = self
            .conn
            .prepare(
                "SELECT trial_id, t_ms, acked_bytes, cwnd_bytes, rtt_ms, congestion_event,
                   bytes_in_flight
                 FROM timeline ORDER BY trial_id, rowid",
            )
            .map_err(self.sql())?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    TimelinePoint {
                        t_ms: r.get(1)?,
                        acked_bytes: r.get::<_, i64>(2)? as u64,
                        cwnd_bytes: r.get::<_, Option<i64>>(3)?.map(|v| v as u64),
                        rtt_ms: r.get(4)?,
                        congestion_event: r.get(5)?,
                        bytes_in_flight: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                    },
                ))
            })
            .map_err(self.sql())?;
        for row in rows {
            let (id, p) = row.map_err(self.sql())?;
            by_id.entry(id).or_default().push(p);
        }
        for t in &mut trials {
            if let (Ok(m), Some(tl)) = (&mut t.outcome, by_id.remove(&t.id)) {
                m.timeline = tl;
            }
        }
        Ok(trials)
    }

    /// When the hosts' CPUs were nearly saturated during the campaign's runs.
    pub fn busy(&self) -> Result<Vec<BusySpell>> {
        match self.meta("busy")? {
            Some(t) => serde_json::from_str(&t).map_err(self.json("busy")),
            None => Ok(Vec::new()),
        }
    }

    /// Adds `spells` to those of earlier runs.
    pub fn add_busy(&self, spells: &[BusySpell]) -> Result<()> {
        if spells.is_empty() {
            return Ok(());
        }
        let mut all = self.busy()?;
        all.extend_from_slice(spells);
        self.set_meta(
            "busy",
            &serde_json::to_string(&all).map_err(self.json("busy"))?,
        )
    }

    /// The campaign's description (arms, conditions, workload, provenance), without its trials.
    pub fn description(&self) -> Result<Campaign> {
        let text = self.meta("campaign")?.ok_or_else(|| StoreError::Empty {
            path: self.path.clone(),
        })?;
        serde_json::from_str(&text).map_err(self.json("campaign"))
    }

    /// The campaign as a report needs it: its description and every trial.
    pub fn campaign(&self) -> Result<Campaign> {
        let mut c = self.description()?;
        // the plan's current trials only: a trial of an earlier version of the plan (another
        // knob, another condition) stays in the database but is not part of this campaign
        let current = self.current_ids()?;
        c.trials = self
            .trials()?
            .into_iter()
            .filter(|t| current.as_ref().is_none_or(|ids| ids.contains(&t.id)))
            .map(|t| Trial {
                id: t.id,
                arm: t.arm,
                condition: t.condition,
                size: t.size,
                iteration: t.iteration,
                seed: t.seed,
                before: t
                    .config
                    .get(CONFIG_BEFORE)
                    .and_then(|v| v.as_str())
                    .map(str::to_string),
                outcome: t.outcome,
                artifacts: t.artifacts,
                host: t.host,
                started_unix_ms: t.started_unix_ms,
                wall_ms: t.wall_ms,
            })
            .collect();
        c.busy_seconds = self.meta("busy_seconds")?.and_then(|s| s.parse().ok());
        c.busy = self.busy()?;
        Ok(c)
    }

    /// Writes `trials.csv` (one row per trial) and `timeline.csv` (one row per timeline
    /// sample) into `out`, for pandas, R or a spreadsheet, and when there are any,
    /// `requests.csv` (one row per request of a multi-request trial) and `units.csv` (one row
    /// per telemetry unit: when it was generated, its latency, empty if it never arrived, and
    /// the model's). Only the plan's current trials are written (as in the report); each file
    /// is written whole or not at all (a full disk leaves the previous export).
    pub fn export_csv(&self, out: &Path) -> Result<Export> {
        output::check_dir(out)?;
        std::fs::create_dir_all(out).map_err(|source| StoreError::Io {
            path: out.display().to_string(),
            source,
        })?;
        let all = self.trials()?;
        let current = self.current_ids()?;
        let total = all.len();
        let trials: Vec<TrialRecord> = all
            .into_iter()
            .filter(|t| current.as_ref().is_none_or(|ids| ids.contains(&t.id)))
            .collect();
        let stale = total - trials.len();
        // a campaign's arms and conditions name stacks, rates and round trips (none in a
        // database written before they were kept)
        let campaign = self.description().unwrap_or_default();
        let num = tables::num;
        let int = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        let tpath = out.join("trials.csv");
        tables::write_csv(
            &tpath,
            "id,seq,arm,condition,size_bytes,iteration,seed,status,error,started_unix_ms,wall_ms,\
             ttlb_ms,ttfb_ms,handshake_ms,handshake_rtts,hello_retry,transport,\
             packets_lost,bytes_resent,\
             first_retransmit_offset,impossible_rtt_samples,link_drops,server_stack,\
             client_stack,arm_knobs,condition_keys,rtt_ms,rate_bps,build,host,shard,\
             artifacts",
            trials.iter().map(|t| {
                let m = t.outcome.as_ref().ok();
                let arm = campaign.arms.iter().find(|a| a.name == t.arm);
                // as the arm's stacks said; a campaign recorded before arms said it is read
                // from the trial's configuration
                let transport = match arm.and_then(|a| a.transport) {
                    Some(t) => t.name(),
                    None => legacy_transport_of(&t.config),
                };
                let cond = campaign.conditions.iter().find(|c| c.name == t.condition);
                vec![
                    t.id.clone(),
                    t.seq.to_string(),
                    t.arm.clone(),
                    t.condition.clone(),
                    t.size.to_string(),
                    t.iteration.to_string(),
                    t.seed.to_string(),
                    if m.is_some() { "ok" } else { "failed" }.to_string(),
                    t.outcome.as_ref().err().cloned().unwrap_or_default(),
                    t.started_unix_ms.to_string(),
                    t.wall_ms.to_string(),
                    num(m.map(|m| m.ttlb_ms)),
                    num(m.map(|m| m.ttfb_ms)),
                    num(m.and_then(|m| m.handshake_ms)),
                    num(m.and_then(|m| m.handshake_rtts)),
                    // 0 or 1, as the database stores it
                    m.map(|m| u8::from(m.hello_retry).to_string())
                        .unwrap_or_default(),
                    transport.to_string(),
                    int(m.and_then(|m| m.packets_lost)),
                    int(m.and_then(|m| m.bytes_resent)),
                    int(m.and_then(|m| m.first_retransmit_offset)),
                    int(m.and_then(|m| m.impossible_rtt_samples)),
                    int(m.map(|m| m.link_drops)),
                    arm.map_or("", |a| a.server_stack.as_str()).to_string(),
                    arm.map_or("", |a| a.client_stack.as_str()).to_string(),
                    pairs(&t.config["arm"]["knobs"]),
                    pairs(&t.config["condition"]["keys"]),
                    num(cond.map(|c| c.rtt_ms)),
                    int(cond.and_then(|c| c.rate_bps)),
                    t.build.clone().unwrap_or_default(),
                    t.host.clone().unwrap_or_default(),
                    t.shard.clone().unwrap_or_default(),
                    t.artifacts.clone().unwrap_or_default(),
                ]
            }),
        )?;
        let lpath = out.join("timeline.csv");
        tables::write_csv(
            &lpath,
            "trial_id,arm,condition,size_bytes,iteration,t_ms,acked_bytes,cwnd_bytes,rtt_ms,congestion_event,bytes_in_flight",
            trials.iter().flat_map(|t| {
                let points = t.outcome.as_ref().map_or(&[][..], |m| &m.timeline[..]);
                points.iter().map(move |p| {
                    let mut row = tables::who(t);
                    row.extend([
                        p.t_ms.to_string(),
                        p.acked_bytes.to_string(),
                        int(p.cwnd_bytes),
                        num(p.rtt_ms),
                        p.congestion_event.to_string(),
                        int(p.bytes_in_flight),
                    ]);
                    row
                })
            }),
        )?;
        let mut files = vec![tpath, lpath];
        if trials.iter().any(|t| {
            t.outcome
                .as_ref()
                .is_ok_and(|m| !m.detail.requests.is_empty())
        }) {
            let rpath = out.join("requests.csv");
            tables::write_csv(
                &rpath,
                "trial_id,arm,condition,size_bytes,iteration,request,bytes,start_ms,ttfb_ms,\
                 ttlb_ms,new_connection,handshake_ms,resumed,zero_rtt_attempted,zero_rtt_accepted",
                trials.iter().flat_map(|t| {
                    let requests = t
                        .outcome
                        .as_ref()
                        .map_or(&[][..], |m| &m.detail.requests[..]);
                    requests.iter().enumerate().map(move |(i, r)| {
                        let mut row = tables::who(t);
                        row.extend([
                            i.to_string(),
                            r.bytes.to_string(),
                            r.start_ms.to_string(),
                            r.ttfb_ms.to_string(),
                            r.ttlb_ms.to_string(),
                            r.new_connection.to_string(),
                            num(r.handshake_ms),
                            r.resumed.to_string(),
                            r.zero_rtt_attempted.to_string(),
                            r.zero_rtt_accepted.to_string(),
                        ]);
                        row
                    })
                }),
            )?;
            files.push(rpath);
        }
        if trials.iter().any(|t| {
            t.outcome
                .as_ref()
                .is_ok_and(|m| m.detail.telemetry.is_some())
        }) {
            let upath = out.join("units.csv");
            tables::write_csv(
                &upath,
                "trial_id,arm,condition,iteration,mode,unit,generated_ms,latency_ms,model_ms",
                trials.iter().flat_map(|t| {
                    let d = t
                        .outcome
                        .as_ref()
                        .ok()
                        .and_then(|m| m.detail.telemetry.as_ref());
                    d.into_iter().flat_map(move |d| {
                        d.latency_us.iter().enumerate().map(move |(i, l)| {
                            vec![
                                t.id.clone(),
                                t.arm.clone(),
                                t.condition.clone(),
                                t.iteration.to_string(),
                                d.mode.clone(),
                                i.to_string(),
                                (i as f64 * 1000.0 / f64::from(d.units_per_second.max(1)))
                                    .to_string(),
                                num(l.map(|l| f64::from(l) / 1000.0)),
                                d.model_ms(i).to_string(),
                            ]
                        })
                    })
                }),
            )?;
            files.push(upath);
        }
        if trials
            .iter()
            .any(|t| t.outcome.as_ref().is_ok_and(|m| m.detail.budget.is_some()))
        {
            let bpath = out.join("budget.csv");
            tables::write_csv(
                &bpath,
                "trial_id,arm,condition,size_bytes,iteration,part,ms,bytes",
                trials.iter().flat_map(|t| {
                    let b = t
                        .outcome
                        .as_ref()
                        .ok()
                        .and_then(|m| m.detail.budget.as_ref());
                    b.into_iter().flat_map(move |b| {
                        budget_rows(b).into_iter().map(move |(part, ms, bytes)| {
                            let mut row = tables::who(t);
                            row.extend([part.to_string(), ms.to_string(), int(bytes)]);
                            row
                        })
                    })
                }),
            )?;
            files.push(bpath);
        }
        files.extend(tables::write(out, &campaign, &trials)?);
        Ok(Export {
            files,
            trials: trials.len(),
            stale,
        })
    }

    /// The ids of the plan's current trials (None for a campaign recorded before they were
    /// kept: every trial is current).
    fn current_ids(&self) -> Result<Option<HashSet<String>>> {
        match self.meta("trial_ids")? {
            Some(t) => Ok(Some(
                serde_json::from_str(&t).map_err(self.json("trial_ids"))?,
            )),
            None => Ok(None),
        }
    }
}

/// A budget's rows of `budget.csv`: the floor's three parts, each component that took time, and
/// the residual, each with its milliseconds and, where it has them, its bytes.
fn budget_rows(b: &quiclab_model::budget::Budget) -> Vec<(&'static str, f64, Option<u64>)> {
    let mut rows = vec![
        ("floor-handshake", b.floor.handshake_ms, None),
        ("floor-request", b.floor.request_ms, None),
        ("floor-serialisation", b.floor.serialisation_ms, None),
    ];
    for c in &b.charges {
        let bytes =
            (c.component == quiclab_model::budget::Component::Overhead).then_some(b.overhead_bytes);
        rows.push((c.component.name(), c.ms, bytes));
    }
    rows.push(("residual", b.residual_ms, None));
    rows
}

/// What [`Store::export_csv`] wrote.
#[derive(Debug)]
pub struct Export {
    pub files: Vec<PathBuf>,
    /// Trials written (the plan's current ones).
    pub trials: usize,
    /// Trials of earlier versions of the plan, kept in the database but not written.
    pub stale: usize,
}

/// The transport a trial's arm ran over in a campaign recorded before arms said it, from the
/// trial's configuration: `tcp`, `quic` or `coded` (empty when the configuration names none).
fn legacy_transport_of(config: &serde_json::Value) -> &'static str {
    let arm = &config["arm"];
    match (arm["http"].as_str(), arm["telemetry"].as_str()) {
        (Some("1.1" | "2"), _) | (_, Some("tcp")) => "tcp",
        (Some("3"), _) | (_, Some(_)) => "quic",
        (Some("coded"), _) => "coded",
        _ => "",
    }
}

/// A configuration's `[[key, value], ...]` list as `key=value;key=value`.
fn pairs(list: &serde_json::Value) -> String {
    list.as_array()
        .map(|kv| {
            kv.iter()
                .filter_map(|p| Some(format!("{}={}", p[0].as_str()?, p[1].as_str()?)))
                .collect::<Vec<_>>()
                .join(";")
        })
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("quiclab-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    pub(crate) fn trial(
        id: &str,
        seq: u64,
        outcome: std::result::Result<Metrics, String>,
    ) -> TrialRecord {
        TrialRecord {
            id: id.into(),
            seq,
            arm: "h3-cubic".into(),
            condition: "loss 1%".into(),
            size: 100_000,
            iteration: 3,
            seed: u64::MAX - 5,
            config: serde_json::json!({
                "arm": {"name": "h3-cubic", "http": "3", "knobs": [["quic-cc", "cubic"]]},
                "condition": {"name": "loss 1%", "keys": [["rate", "10mbit"], ["loss", "1%"]]},
            }),
            started_unix_ms: 1_700_000_000_000,
            wall_ms: 812.5,
            outcome,
            link: serde_json::json!([{"dir": "up"}]),
            requests: serde_json::json!([]),
            phases: serde_json::json!({"setup_ms": 20.5}),
            artifacts: Some("trials/x".into()),
            build: Some("0.1.0 (commit abc)".into()),
            host: Some("lab-1".into()),
            shard: None,
        }
    }

    pub(crate) fn metrics(ttlb: f64, points: usize) -> Metrics {
        Metrics {
            ttlb_ms: ttlb,
            ttfb_ms: 40.0,
            handshake_ms: Some(21.0),
            handshake_rtts: Some(1.05),
            hello_retry: true,
            packets_lost: Some(2),
            bytes_resent: Some(2_900),
            first_retransmit_offset: Some(14_600),
            impossible_rtt_samples: None,
            link_drops: 3,
            timeline: (0..points)
                .map(|i| TimelinePoint {
                    t_ms: i as f64 * 5.0,
                    acked_bytes: i as u64 * 1000,
                    cwnd_bytes: Some(14_600),
                    bytes_in_flight: if i % 3 == 0 {
                        None
                    } else {
                        Some(i as u64 * 700)
                    },
                    rtt_ms: if i % 2 == 0 { Some(20.5) } else { None },
                    congestion_event: i == 3,
                })
                .collect(),
            detail: Detail {
                requests: (0..2)
                    .map(|i| RequestMetrics {
                        bytes: 250_000,
                        start_ms: f64::from(i) * 60.0,
                        ttfb_ms: 40.0 - f64::from(i) * 20.0,
                        ttlb_ms: 55.5,
                        new_connection: true,
                        handshake_ms: Some(20.0),
                        resumed: i > 0,
                        zero_rtt_attempted: i > 0,
                        zero_rtt_accepted: i > 0,
                    })
                    .collect(),
                ..Detail::default()
            },
        }
    }

    #[test]
    fn a_trial_round_trips_with_its_timeline_and_replaces_its_earlier_record() {
        let d = dir("roundtrip");
        let mut s = Store::open(&d).unwrap();
        s.record(&trial("a", 0, Err("client timed out".into())))
            .unwrap();
        s.record(&trial("b", 1, Ok(metrics(150.0, 4)))).unwrap();
        assert_eq!(s.finished().unwrap(), HashSet::from(["b".to_string()]));
        // the failed trial is run again and now succeeds: still one record, and the timeline
        // of the replaced record does not linger
        s.record(&trial("a", 0, Ok(metrics(120.0, 7)))).unwrap();
        s.record(&trial("a", 0, Ok(metrics(125.0, 5)))).unwrap();
        let all = s.trials().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].id, "a");
        let m = all[0].outcome.as_ref().unwrap();
        assert_eq!(m.ttlb_ms, 125.0);
        assert_eq!(m.timeline, metrics(125.0, 5).timeline);
        assert_eq!(m.detail, metrics(125.0, 5).detail);
        assert_eq!(all[1].seed, u64::MAX - 5);
        assert_eq!(all[1].config["condition"]["keys"][1][1], "1%");
        assert_eq!(all[1].phases["setup_ms"], 20.5);
        let n: i64 = s
            .conn
            .query_row("SELECT count(*) FROM timeline", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 9);
        drop(s);
        // a second handle sees the same (committed) data
        let s = Store::open_existing(&d).unwrap();
        assert_eq!(s.trials().unwrap().len(), 2);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_campaign_description_comes_back_with_its_trials() {
        let d = dir("campaign");
        let mut s = Store::open(&d).unwrap();
        assert!(matches!(s.campaign(), Err(StoreError::Empty { .. })));
        let c = Campaign {
            name: "www21".into(),
            sizes: vec![100_000, 1_000_000],
            ..Default::default()
        };
        s.set_campaign(&c).unwrap();
        s.record(&trial("x", 0, Err("boom".into()))).unwrap();
        // a run of an interleaved baseline names the condition it preceded
        let mut paired = trial("y", 1, Err("late".into()));
        paired.config = serde_json::json!({CONFIG_BEFORE: "loss 1%"});
        s.record(&paired).unwrap();
        let back = s.campaign().unwrap();
        assert_eq!(back.name, "www21");
        assert_eq!(back.sizes, vec![100_000, 1_000_000]);
        assert_eq!(back.trials.len(), 2);
        assert_eq!(back.trials[0].outcome.as_ref().unwrap_err(), "boom");
        assert_eq!(back.trials[0].before, None);
        assert_eq!(back.trials[0].host.as_deref(), Some("lab-1"));
        assert_eq!(
            (back.trials[0].started_unix_ms, back.trials[0].wall_ms),
            (1_700_000_000_000, 812.5)
        );
        // busy spells add up over runs; busy seconds are the runner's count
        assert!(back.busy.is_empty() && back.busy_seconds.is_none());
        let spell = |from| BusySpell {
            host: Some("lab-1".into()),
            from_unix_ms: from,
            to_unix_ms: from + 2000,
        };
        s.add_busy(&[spell(1000)]).unwrap();
        s.add_busy(&[spell(9000)]).unwrap();
        s.set_meta("busy_seconds", "4").unwrap();
        let back = s.campaign().unwrap();
        assert_eq!(back.busy, [spell(1000), spell(9000)]);
        assert_eq!(back.busy_seconds, Some(4));
        assert_eq!(back.trials[1].before.as_deref(), Some("loss 1%"));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_version_1_database_gains_the_detail_build_host_and_shard_columns_and_keeps_its_trials() {
        let d = dir("v1");
        std::fs::create_dir_all(&d).unwrap();
        {
            // the version 1 schema: the current one without the detail, build, host, shard
            // and bytes_resent columns, and with its count of retransmissions
            let schema = SCHEMA
                .replace(
                    ",\n    detail TEXT,\n    build TEXT,\n    host TEXT,\n    shard TEXT,\n    \
                     bytes_resent INTEGER",
                    "",
                )
                .replace("packets_lost", "retransmissions")
                .replace(",\n    bytes_in_flight INTEGER", "");
            assert_ne!(schema, SCHEMA);
            assert!(!schema.contains("bytes_in_flight"));
            let conn = Connection::open(d.join(DB_FILE)).unwrap();
            conn.execute_batch(&schema).unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute(
                "INSERT INTO trials (id, seq, arm, condition, size, iteration, seed, config,
                    status, started_unix_ms, wall_ms, ttlb_ms, link, requests, phases)
                 VALUES ('old', 0, 'a', 'c', 1000, 0, 1, '{}', 'ok', 0, 1.0, 42.0, '[]', '[]',
                    'null')",
                [],
            )
            .unwrap();
        }
        let mut s = Store::open(&d).unwrap();
        let old = s.trials().unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(old[0].outcome.as_ref().unwrap().ttlb_ms, 42.0);

        assert!(old[0].outcome.as_ref().unwrap().detail.is_empty());
        // its build and host are unknown, and no build is named for it
        assert_eq!(
            (&old[0].build, &old[0].host, &old[0].shard),
            (&None, &None, &None)
        );
        assert!(s.builds().unwrap().is_empty());
        let mut new = trial("new", 1, Ok(metrics(10.0, 5)));
        new.shard = Some("2/4".into());
        s.record(&new).unwrap();
        assert_eq!(s.builds().unwrap(), ["0.1.0 (commit abc)"]);
        let all = s.trials().unwrap();
        assert_eq!(all[1].host.as_deref(), Some("lab-1"));
        assert_eq!(all[1].shard.as_deref(), Some("2/4"));
        assert_eq!(all[1].outcome.as_ref().unwrap().detail.requests.len(), 2);
        // the timeline gained its bytes in flight, and keeps them
        assert_eq!(
            all[1].outcome.as_ref().unwrap().timeline,
            metrics(10.0, 5).timeline
        );
        assert!(
            all[1].outcome.as_ref().unwrap().timeline[1]
                .bytes_in_flight
                .is_some()
        );
        let v: i64 = s
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_version_4_count_of_retransmissions_becomes_packets_lost_and_quiche_s_zero_unknown() {
        let d = dir("v4");
        std::fs::create_dir_all(&d).unwrap();
        {
            let schema = SCHEMA
                .replace(",\n    bytes_resent INTEGER", "")
                .replace("packets_lost", "retransmissions");
            assert!(!schema.contains("bytes_resent"));
            let conn = Connection::open(d.join(DB_FILE)).unwrap();
            conn.execute_batch(&schema).unwrap();
            conn.pragma_update(None, "user_version", 4).unwrap();
            for (id, seq, stack, count) in [("q", 0, "quinn", 5), ("c", 1, "quiche 0123abcd", 0)] {
                let config = serde_json::json!({"arm": {"server-stack": stack}}).to_string();
                conn.execute(
                    "INSERT INTO trials (id, seq, arm, condition, size, iteration, seed, config,
                        status, started_unix_ms, wall_ms, ttlb_ms, retransmissions, link,
                        requests, phases)
                     VALUES (?1, ?2, 'a', 'c', 1000, 0, 1, ?3, 'ok', 0, 1.0, 42.0, ?4, '[]',
                        '[]', 'null')",
                    params![id, seq, config, count],
                )
                .unwrap();
            }
        }
        let s = Store::open(&d).unwrap();
        let counts: Vec<_> = s
            .trials()
            .unwrap()
            .iter()
            .map(|t| {
                let m = t.outcome.as_ref().unwrap();
                (m.packets_lost, m.bytes_resent)
            })
            .collect();
        assert_eq!(counts, [(Some(5), None), (None, None)]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_version_5_campaign_learns_which_arms_client_is_a_browser() {
        let d = dir("v5");
        {
            let s = Store::open(&d).unwrap();
            let arm = |name: &str, client: &str| quiclab_model::campaign::Arm {
                name: name.into(),
                client_stack: client.into(),
                ..Default::default()
            };
            s.set_campaign(&Campaign {
                name: "p".into(),
                arms: vec![arm("h3", "quinn"), arm("browser", "chrome")],
                ..Default::default()
            })
            .unwrap();
            // as version 5 wrote it: no client_browser in the arms
            let text = s
                .meta("campaign")
                .unwrap()
                .unwrap()
                .replace(",\"client_browser\":false", "");
            assert!(!text.contains("client_browser"), "{text}");
            s.set_meta("campaign", &text).unwrap();
            s.conn.pragma_update(None, "user_version", 5).unwrap();
        }
        let arms = Store::open(&d).unwrap().description().unwrap().arms;
        let browsers: Vec<bool> = arms.iter().map(|a| a.client_browser).collect();
        assert_eq!(browsers, [false, true]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_database_whose_trials_table_was_dropped_is_refused_and_its_folders_kept() {
        let d = dir("dropped");
        {
            let mut s = Store::open(&d).unwrap();
            s.record(&trial("a", 0, Ok(metrics(10.0, 1)))).unwrap();
            s.conn
                .execute_batch("DROP TABLE timeline; DROP TABLE trials")
                .unwrap();
        }
        std::fs::create_dir_all(d.join("trials").join("a")).unwrap();
        let e = Store::open(&d).err().expect("refused");
        assert!(matches!(e, StoreError::Damaged { .. }), "{e}");
        assert!(e.to_string().contains("table is missing"), "{e}");
        assert!(d.join("trials").join("a").is_dir());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn reading_a_campaign_never_writes_it() {
        let d = dir("readonly");
        let mut s = Store::open(&d).unwrap();
        s.set_campaign(&Campaign::default()).unwrap();
        s.record(&trial("a", 0, Ok(metrics(10.0, 1)))).unwrap();
        drop(s);
        let r = Store::open_existing(&d).unwrap();
        assert_eq!(r.campaign().unwrap().trials.len(), 1);
        let e = r.set_meta("x", "y").unwrap_err().to_string();
        assert!(e.contains("readonly"), "{e}");
        // a file that is no campaign is named as such, not opened as a new one
        let other = dir("readonly-empty");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join(DB_FILE), b"").unwrap();
        assert!(matches!(
            Store::open_existing(&other),
            Err(StoreError::Empty { .. })
        ));
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&other);
    }

    #[test]
    fn a_lost_database_beside_trial_folders_is_refused_not_replaced() {
        let d = dir("orphans");
        std::fs::create_dir_all(d.join("trials/0123abcd")).unwrap();
        // missing, emptied (0 bytes) and table-less databases alike
        for damage in ["missing", "empty", "no tables"] {
            let db = d.join(DB_FILE);
            let _ = std::fs::remove_file(&db);
            match damage {
                "empty" => std::fs::write(&db, b"").unwrap(),
                "no tables" => drop(Connection::open(&db).unwrap()),
                _ => {}
            }
            let e = Store::open(&d).err().expect(damage);
            assert!(
                matches!(e, StoreError::Orphans { folders: 1, .. }),
                "{damage}: {e}"
            );
            assert!(e.to_string().contains("move"), "{e}");
        }
        // a missing database's refusal makes none
        let _ = std::fs::remove_file(d.join(DB_FILE));
        assert!(Store::open(&d).is_err());
        assert!(!d.join(DB_FILE).exists());
        // trials/ as a link elsewhere: refused, neither counted through nor written through
        let elsewhere = dir("orphans-elsewhere");
        std::fs::create_dir_all(elsewhere.join("kept")).unwrap();
        std::fs::remove_dir_all(d.join("trials")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, d.join("trials")).unwrap();
        let e = Store::open(&d).err().expect("a link");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(!d.join(DB_FILE).exists() && elsewhere.join("kept").is_dir());
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&elsewhere);
    }

    #[test]
    fn a_second_run_into_a_held_directory_is_told_who_holds_it() {
        let d = dir("lock");
        let held = Store::lock(&d).unwrap();
        let e = Store::lock(&d).unwrap_err();
        assert!(
            matches!(&e, StoreError::Busy { holder, .. } if *holder == std::process::id().to_string()),
            "{e}"
        );
        drop(held);
        let again = Store::lock(&d).unwrap();
        drop(again);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_damaged_cell_names_its_trial_and_column() {
        let d = dir("damaged");
        let mut s = Store::open(&d).unwrap();
        s.record(&trial("t0", 0, Ok(metrics(10.0, 1)))).unwrap();
        s.conn
            .execute("UPDATE trials SET phases = '{not json' WHERE id = 't0'", [])
            .unwrap();
        let e = s.trials().unwrap_err().to_string();
        assert!(e.contains("trial t0, column phases"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn export_writes_the_plans_current_trials_only() {
        let d = dir("stale");
        let mut s = Store::open(&d).unwrap();
        for (i, id) in ["old", "kept", "new"].iter().enumerate() {
            s.record(&trial(id, i as u64, Ok(metrics(10.0, 1))))
                .unwrap();
        }
        // the plan was edited: "old" is no longer one of its trials
        s.set_meta("trial_ids", r#"["kept","new"]"#).unwrap();
        let e = s.export_csv(&d.join("csv")).unwrap();
        assert_eq!((e.trials, e.stale), (2, 1));
        let rows = std::fs::read_to_string(&e.files[0]).unwrap();
        let ids: Vec<_> = rows
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap())
            .collect();
        assert_eq!(ids, ["kept", "new"]);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_budget_is_exported_one_row_per_part_and_the_rows_add_up_to_the_ttlb() {
        use quiclab_model::budget::{Budget, Charge, Component, Floor};
        let d = dir("budget");
        let mut s = Store::open(&d).unwrap();
        let mut m = metrics(150.0, 0);
        m.detail.budget = Some(Budget {
            ttlb_ms: 150.0,
            floor: Floor {
                handshake_ms: 20.0,
                request_ms: 20.0,
                serialisation_ms: 80.0,
            },
            charges: vec![
                Charge {
                    component: Component::RampUp,
                    ms: 17.5,
                    spans: vec![[41.0, 58.5]],
                },
                Charge {
                    component: Component::Overhead,
                    ms: 7.0,
                    spans: Vec::new(),
                },
            ],
            residual_ms: 5.5,
            overhead_bytes: 4_726,
            drops_to_client: 0,
            congestion_events: Some(0),
            unread: Vec::new(),
            reads: vec!["cwnd".into()],
        });
        s.record(&trial("a", 0, Ok(m))).unwrap();
        s.record(&trial("b", 1, Ok(metrics(99.5, 3)))).unwrap();
        let files = s.export_csv(&d.join("csv")).unwrap().files;
        let path = files.iter().find(|f| f.ends_with("budget.csv")).unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect())
            .collect();
        assert_eq!(rows.len(), 6, "{text}");
        assert!(rows.iter().all(|r| r[0] == "a"), "{text}");
        let parts: Vec<&str> = rows.iter().map(|r| r[5]).collect();
        assert_eq!(
            parts,
            [
                "floor-handshake",
                "floor-request",
                "floor-serialisation",
                "ramp-up",
                "overhead",
                "residual"
            ]
        );
        let sum: f64 = rows.iter().map(|r| r[6].parse::<f64>().unwrap()).sum();
        assert!((sum - 150.0).abs() < 1e-9, "{sum}");
        assert_eq!(rows[4][7], "4726");
        assert_eq!(rows[3][7], "");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn csv_export_quotes_what_needs_quoting() {
        let d = dir("csv");
        let mut s = Store::open(&d).unwrap();
        s.record(&trial("a", 0, Err("bad, \"very\" bad".into())))
            .unwrap();
        s.record(&trial("b", 1, Ok(metrics(99.5, 3)))).unwrap();
        let files = s.export_csv(&d.join("csv")).unwrap().files;
        let trials = std::fs::read_to_string(&files[0]).unwrap();
        let lines: Vec<_> = trials.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[1].contains("\"bad, \"\"very\"\" bad\""),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].contains(",ok,,") && lines[2].contains(",99.5,"),
            "{}",
            lines[2]
        );
        let header_cols = lines[0].split(',').count();
        assert_eq!(lines[2].split(',').count(), header_cols);
        let tl = std::fs::read_to_string(&files[1]).unwrap();
        assert_eq!(tl.lines().count(), 4);
        // the successful trial's two requests, with as many fields as the header names
        let rq = std::fs::read_to_string(&files[2]).unwrap();
        let rl: Vec<_> = rq.lines().collect();
        assert_eq!(rl.len(), 3, "{rq}");
        assert_eq!(rl[2].split(',').count(), rl[0].split(',').count());
        assert!(rl[2].starts_with("b,h3-cubic,") && rl[2].ends_with(",true,true,true"));
        // trials, timeline, requests, arms, conditions: no telemetry, page or bulk tables
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "trials.csv",
                "timeline.csv",
                "requests.csv",
                "arms.csv",
                "conditions.csv"
            ]
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The transport column says what the arm's stacks said, not what its HTTP version
    /// suggests.
    #[test]
    fn the_transport_of_a_trial_is_its_arms() {
        let d = dir("transport");
        let mut s = Store::open(&d).unwrap();
        let mut c = Campaign {
            arms: vec![quiclab_model::campaign::Arm {
                name: "h3-cubic".into(),
                transport: Some(quiclab_model::record::Transport::Coded),
                ..Default::default()
            }],
            ..Default::default()
        };
        s.set_campaign(&c).unwrap();
        // the trial's configuration says HTTP/3; the arm says the coded transport
        s.record(&trial("b", 1, Ok(metrics(99.5, 0)))).unwrap();
        let column = |s: &Store| {
            let files = s.export_csv(&d.join("csv")).unwrap().files;
            let f = files.iter().find(|f| f.ends_with("trials.csv")).unwrap();
            let text = std::fs::read_to_string(f).unwrap();
            let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
            let row: Vec<String> = text
                .lines()
                .nth(1)
                .unwrap()
                .split(',')
                .map(String::from)
                .collect();
            row[header.iter().position(|h| *h == "transport").unwrap()].clone()
        };
        assert_eq!(column(&s), "coded");
        c.arms[0].transport = None;
        s.set_campaign(&c).unwrap();
        assert_eq!(column(&s), "quic");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A column means one thing for every stack: an HTTP/3 trial's lost packets go to
    /// `quic_lost_packets`, never to TCP's retransmitted segments; the arm's knobs, the
    /// condition's keys, its round trip and rate come along, and the arms and conditions tables
    /// say the same.
    #[test]
    fn csv_export_gives_packets_lost_and_bytes_resent_and_carries_the_parameters() {
        let d = dir("params");
        let mut s = Store::open(&d).unwrap();
        let c = Campaign {
            arms: vec![quiclab_model::campaign::Arm {
                name: "h3-cubic".into(),
                label: "HTTP/3 cubic".into(),
                server_stack: "quinn".into(),
                client_stack: "quinn".into(),
                ..Default::default()
            }],
            conditions: vec![quiclab_model::campaign::Condition {
                name: "loss 1%".into(),
                label: "10 Mbit/s and 1 % loss".into(),
                rtt_ms: 20.0,
                rate_bps: Some(10_000_000),
                base: None,
            }],
            ..Default::default()
        };
        s.set_campaign(&c).unwrap();
        s.record(&trial("b", 1, Ok(metrics(99.5, 0)))).unwrap();
        let files = s.export_csv(&d.join("csv")).unwrap().files;
        let table = |name: &str| -> Vec<std::collections::HashMap<String, String>> {
            let f = files.iter().find(|f| f.ends_with(name)).unwrap();
            let text = std::fs::read_to_string(f).unwrap();
            let mut lines = text.lines();
            let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
            lines
                .map(|l| {
                    header
                        .iter()
                        .cloned()
                        .zip(l.split(',').map(String::from))
                        .collect()
                })
                .collect()
        };
        let t = &table("trials.csv")[0];
        // an arm recorded without its transport: read from the trial's configuration
        assert_eq!(t["transport"], "quic");
        // a flag as the database has it (docs/data.md): 0 or 1
        assert!(["0", "1"].contains(&t["hello_retry"].as_str()), "{t:?}");
        assert_eq!(t["packets_lost"], "2");
        assert_eq!(t["bytes_resent"], "2900");
        // an unknown count is empty, not 0
        let mut unknown = metrics(99.5, 0);
        (unknown.packets_lost, unknown.bytes_resent) = (None, None);
        s.record(&trial("u", 2, Ok(unknown))).unwrap();
        let files = s.export_csv(&d.join("csv")).unwrap().files;
        let f = files.iter().find(|f| f.ends_with("trials.csv")).unwrap();
        let text = std::fs::read_to_string(f).unwrap();
        let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
        let row: Vec<&str> = text.lines().nth(2).unwrap().split(',').collect();
        let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(
            (col("id"), col("packets_lost"), col("bytes_resent")),
            ("u", "", "")
        );
        assert_eq!(t["arm_knobs"], "quic-cc=cubic");
        assert_eq!(t["condition_keys"], "rate=10mbit;loss=1%");
        assert_eq!(
            (t["rtt_ms"].as_str(), t["rate_bps"].as_str()),
            ("20", "10000000")
        );
        assert_eq!(t["server_stack"], "quinn");
        assert_eq!(t["seed"], (u64::MAX - 5).to_string());
        let a = &table("arms.csv")[0];
        assert_eq!((a["arm"].as_str(), a["http"].as_str()), ("h3-cubic", "3"));
        assert_eq!(a["knobs"], "quic-cc=cubic");
        let cond = &table("conditions.csv")[0];
        assert_eq!(cond["link_keys"], "rate=10mbit;loss=1%");
        assert_eq!(cond["rate_bps"], "10000000");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn telemetry_units_round_trip_and_export_with_their_model() {
        let d = dir("units");
        let mut s = Store::open(&d).unwrap();
        let mut m = metrics(5000.0, 0);
        m.detail = Detail {
            telemetry: Some(quiclab_model::campaign::TelemetryDetail {
                mode: "quic-streams".into(),
                units_per_second: 1000,
                flush_units: 10,
                one_way_ms: 25.0,
                latency_us: vec![Some(34_300), None, Some(32_250)],
                ..Default::default()
            }),
            ..Detail::default()
        };
        s.record(&trial("t", 0, Ok(m.clone()))).unwrap();
        assert_eq!(
            s.trials().unwrap()[0].outcome.as_ref().unwrap().detail,
            m.detail
        );
        let files = s.export_csv(&d.join("csv")).unwrap().files;
        let file = |name: &str| {
            std::fs::read_to_string(files.iter().find(|f| f.ends_with(name)).unwrap()).unwrap()
        };
        // the trial's summary: 3 units sent, 2 arrived, the slower at 34.3 ms
        let summary = file("telemetry.csv");
        let row: Vec<_> = summary.lines().nth(1).unwrap().split(',').collect();
        assert_eq!(
            &row[5..10],
            ["quic-streams", "1000", "10", "3", "2"],
            "{summary}"
        );
        assert_eq!(row[12], "34.3", "{summary}");
        assert_eq!(row[14], "0", "no stall: {summary}");
        let units = file("units.csv");
        let lines: Vec<_> = units.lines().collect();
        assert_eq!(lines.len(), 4, "{units}");
        // three units in one (short) flush: they wait 2, 1 and 0 ms for it
        assert!(
            lines[1].ends_with(",quic-streams,0,0,34.3,27"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].ends_with(",1,1,,26"),
            "a lost unit has no latency: {}",
            lines[2]
        );
        assert!(lines[3].ends_with(",2,2,32.25,25"), "{}", lines[3]);
        let _ = std::fs::remove_dir_all(&d);
    }
}
