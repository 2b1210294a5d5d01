//! Tickets: what a caller holds until its record is durable, and the
//! writer's side of them, resolved strictly in submission order.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::error::WalError;

/// Resolves when the record it was issued for is durable (or written, for
/// ASYNC_WAL), or with the error that stopped the WAL.
#[derive(Debug, Clone)]
pub struct Ticket(Arc<TicketInner>);

#[derive(Debug, Default)]
pub(super) struct TicketInner {
    pub(super) outcome: Mutex<Option<Result<(), String>>>,
    pub(super) cv: Condvar,
}

impl Ticket {
    pub(super) fn new() -> Self {
        Ticket(Arc::new(TicketInner::default()))
    }
    /// A ticket that is already resolved (nothing to wait for).
    pub fn done() -> Self {
        let t = Ticket::new();
        t.resolve(Ok(()));
        t
    }
    pub(super) fn resolve(&self, outcome: Result<(), String>) {
        *self.0.outcome.lock() = Some(outcome);
        self.0.cv.notify_all();
    }
    pub fn is_resolved(&self) -> bool {
        self.0.outcome.lock().is_some()
    }
    pub fn wait(&self) -> Result<(), WalError> {
        let mut outcome = self.0.outcome.lock();
        while outcome.is_none() {
            self.0.cv.wait(&mut outcome);
        }
        match outcome.as_ref().expect("loop exits only when resolved") {
            Ok(()) => Ok(()),
            Err(e) => Err(WalError::Failed(e.clone())),
        }
    }
}

/// What runs when a record's outcome is known, on the WAL's thread, before
/// any waiter of its ticket wakes: a region completes the write's MVCC
/// transaction here, so that a flush waiting for it never depends on the
/// writer coming back to wait.
pub type OnResolved = Box<dyn FnOnce(&Result<(), String>) + Send>;

/// The WAL side of a ticket. Dropping it unresolved — a request still
/// queued when the WAL stops — fails the ticket, so no waiter hangs.
pub(super) struct Resolver {
    pub(super) ticket: Ticket,
    pub(super) then: Option<OnResolved>,
}

impl Resolver {
    pub(super) fn new(ticket: Ticket, then: Option<OnResolved>) -> Self {
        Resolver { ticket, then }
    }

    pub(super) fn resolve(mut self, outcome: Result<(), String>) {
        self.finish(outcome);
    }

    pub(super) fn finish(&mut self, outcome: Result<(), String>) {
        if let Some(then) = self.then.take() {
            then(&outcome);
        }
        self.ticket.resolve(outcome);
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Resolver").field(&self.ticket).finish()
    }
}

impl Drop for Resolver {
    fn drop(&mut self) {
        if !self.ticket.is_resolved() {
            self.finish(Err("wal closed before the record was written".into()));
        }
    }
}
