//! The locks of the runtime's process-wide caches.

use std::sync::Mutex;

use linattn_core::AttnError;

/// Locks `mutex`; a lock poisoned by a panicking thread is an `AttnError::State`, not a
/// second panic.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>, AttnError> {
    mutex
        .lock()
        .map_err(|_| AttnError::State("a thread panicked while holding a runtime lock".into()))
}
