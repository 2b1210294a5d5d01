//! The bounded pool of threads that run bucket scans for every query.

use std::thread::JoinHandle;

use crossbeam_channel::{Sender, bounded};

use crate::error::{Error, Result};

pub(super) type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads that run bucket scans (a batch at a time).
pub struct QueryPool {
    pub(super) tx: Option<Sender<Job>>,
    pub(super) threads: Vec<JoinHandle<()>>,
}

impl QueryPool {
    pub fn new(threads: usize) -> Self {
        let (tx, rx) = bounded::<Job>(1024);
        let threads = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("halite-query-{i}"))
                    .spawn(move || {
                        for job in rx {
                            // A job that panics is a bug answered as a
                            // failed query (its reply channel closes);
                            // the thread stays for every later query.
                            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err()
                            {
                                tracing::error!("a query's scan panicked; its query failed");
                            }
                        }
                    })
                    .expect("spawn query thread")
            })
            .collect();
        QueryPool {
            tx: Some(tx),
            threads,
        }
    }

    pub(super) fn run(&self, job: Job) -> Result<()> {
        self.tx
            .as_ref()
            .ok_or(Error::Closed)?
            .send(job)
            .map_err(|_| Error::Closed)
    }
}

impl Drop for QueryPool {
    fn drop(&mut self) {
        self.tx.take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
