//! Keeps a session's lease renewed while the session is open, and releases it when the
//! session is dropped: the heartbeat of [`Harness::resume_session_leased`](super::Harness::resume_session_leased).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::ErrorKind;
use crate::lease::Lease;
use crate::store::SessionStore;

/// The shortest pause between two renewals, whatever the time to live.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// A thread renewing one lease every third of its time to live, so two renewals in a row
/// can fail (a slow disk, a busy store) before it runs out. Dropping it stops the thread
/// and releases the lease.
pub(crate) struct LeaseKeeper {
    store: Arc<dyn SessionStore>,
    lease: Lease,
    /// Dropped to stop the thread.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl LeaseKeeper {
    /// Starts renewing `lease` on `store` for `ttl` at a time.
    pub(crate) fn start(store: Arc<dyn SessionStore>, lease: Lease, ttl: Duration) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let period = (ttl / 3).max(MIN_PERIOD);
        let (renewing, held) = (Arc::clone(&store), lease.clone());
        // If no thread can be started the lease still holds until its time runs out, and
        // saves stay fenced: only the heartbeat is missing.
        let thread = std::thread::Builder::new()
            .name(format!("agent-session-lease-{}", lease.session))
            .spawn(move || loop {
                match stopped.recv_timeout(period) {
                    Err(RecvTimeoutError::Timeout) => match renewing.renew_lease(&held, ttl) {
                        // Taken over or released: nothing left to keep.
                        Err(e) if e.kind() == ErrorKind::Leased => return,
                        // Anything else may pass (a busy lock): try again next period.
                        Ok(_) | Err(_) => {}
                    },
                    Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                }
            })
            .ok();
        LeaseKeeper {
            store,
            lease,
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // Best effort: a lease that cannot be released ends with its time to live (and,
        // in the file store, with this process).
        let _ = self.store.release_lease(&self.lease);
    }
}
