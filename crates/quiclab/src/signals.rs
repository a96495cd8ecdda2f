//! Termination requests: SIGINT (Ctrl-C), SIGTERM, SIGHUP and SIGQUIT set flags instead of killing
//! quiclab, so that every namespace and process it created is removed before it exits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone)]
pub struct Signals {
    interrupt: Arc<AtomicBool>,
    terminate: Arc<AtomicBool>,
}

impl Signals {
    pub fn install() -> anyhow::Result<Self> {
        let s = Signals {
            interrupt: Arc::new(AtomicBool::new(false)),
            terminate: Arc::new(AtomicBool::new(false)),
        };
        signal_hook::flag::register(signal_hook::consts::SIGINT, s.interrupt.clone())?;
        signal_hook::flag::register(signal_hook::consts::SIGTERM, s.terminate.clone())?;
        signal_hook::flag::register(signal_hook::consts::SIGHUP, s.terminate.clone())?;
        // Ctrl-\ too: its default (a core dump) would leave every namespace behind
        signal_hook::flag::register(signal_hook::consts::SIGQUIT, s.terminate.clone())?;
        Ok(s)
    }

    /// Ctrl-C was pressed.
    pub fn interrupted(&self) -> bool {
        self.interrupt.load(Ordering::Relaxed)
    }

    /// SIGTERM, SIGHUP or SIGQUIT arrived.
    pub fn terminated(&self) -> bool {
        self.terminate.load(Ordering::Relaxed)
    }

    pub fn any(&self) -> bool {
        self.interrupted() || self.terminated()
    }
}
