//! How WAL bytes reach the disk: io_uring where the kernel allows it, plain
//! `pwrite` + `fdatasync` otherwise. The WAL thread drives either through
//! [`WalIo`]; only io_uring keeps several batches in flight.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::fault::{self, Fault, Site, power};

/// Which backend is in use; reported in logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoBackendKind {
    IoUring,
    Sync,
}

impl IoBackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IoBackendKind::IoUring => "io_uring",
            IoBackendKind::Sync => "sync",
        }
    }
}

/// Which backend the WAL should try.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoBackendChoice {
    /// io_uring, falling back to sync I/O if it cannot be set up.
    #[default]
    Auto,
    /// Plain write + fdatasync.
    Sync,
}

/// One finished batch.
#[derive(Debug)]
pub struct Completion {
    pub id: u64,
    pub result: io::Result<()>,
}

/// Observed data syncs: counted, not trusted (HBase once shipped an FSYNC
/// mode that never synced).
#[derive(Debug, Default)]
pub struct SyncCounter(std::sync::atomic::AtomicU64);

impl SyncCounter {
    pub fn add(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

pub trait WalIo: Send {
    fn kind(&self) -> IoBackendKind;
    /// Queues a write of `buf` at `offset` (possibly empty), followed by a
    /// data sync of the file when `sync`. `path` names the file (for
    /// injected faults and errors).
    fn submit(
        &mut self,
        id: u64,
        file: &Arc<File>,
        path: &Arc<Path>,
        offset: u64,
        buf: Vec<u8>,
        sync: bool,
    ) -> io::Result<()>;
    /// Collects finished batches; with `wait`, blocks up to that long for at
    /// least one when any is in flight.
    fn reap(&mut self, wait: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()>;
    fn in_flight(&self) -> usize;
    /// How many batches may be in flight at once.
    fn depth(&self) -> usize;
}

pub fn open_backend(
    choice: IoBackendChoice,
    depth: usize,
    syncs: Arc<SyncCounter>,
) -> Box<dyn WalIo> {
    #[cfg(target_os = "linux")]
    if choice == IoBackendChoice::Auto {
        match uring::UringIo::new(depth, syncs.clone()) {
            Ok(io) => return Box::new(io),
            Err(unavailable) => tracing::warn!(
                error = %unavailable,
                "io_uring is unavailable here (an old kernel, or a seccomp filter): \
                 the WAL writes with write + fdatasync instead"
            ),
        }
    }
    let _ = (choice, depth);
    Box::new(SyncIo {
        done: Vec::new(),
        syncs,
    })
}

/// Writes and syncs inline; every batch is complete when `submit` returns.
pub struct SyncIo {
    done: Vec<Completion>,
    syncs: Arc<SyncCounter>,
}

impl WalIo for SyncIo {
    fn kind(&self) -> IoBackendKind {
        IoBackendKind::Sync
    }
    fn submit(
        &mut self,
        id: u64,
        file: &Arc<File>,
        path: &Arc<Path>,
        offset: u64,
        buf: Vec<u8>,
        sync: bool,
    ) -> io::Result<()> {
        let mut result = match fault::check(Site::WalWrite, path) {
            // A short write is not an error: the rest is written after it.
            Some(Fault::Short) => {
                let half = buf.len() / 2;
                file.write_all_at(&buf[..half], offset)
                    .and_then(|_| file.write_all_at(&buf[half..], offset + half as u64))
            }
            Some(f) => Err(f.error()),
            None => file.write_all_at(&buf, offset),
        };
        if result.is_ok() {
            power::wrote(path, offset, &buf);
        }
        if result.is_ok() && sync {
            result = fault::fail_if_armed(Site::WalSync, path).and_then(|_| {
                self.syncs.add();
                crate::fsutil::sync_file_data(file, path)
            });
        }
        self.done.push(Completion { id, result });
        Ok(())
    }
    fn reap(&mut self, _wait: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()> {
        out.append(&mut self.done);
        Ok(())
    }
    fn in_flight(&self) -> usize {
        self.done.len()
    }
    fn depth(&self) -> usize {
        1
    }
}

#[cfg(target_os = "linux")]
mod uring {
    use super::*;
    use io_uring::{IoUring, opcode, squeue, types};
    use std::os::fd::AsRawFd;

    struct Pending {
        file: Arc<File>,
        path: Arc<Path>,
        buf: Vec<u8>,
        offset: u64,
        sync: bool,
        write_done: bool,
        sync_done: bool,
        error: Option<io::Error>,
        /// The power-cut trace's ticket for the linked sync.
        sync_ticket: u64,
    }

    /// Each batch is a write linked to an fdatasync, so the sync starts only
    /// after its write finished; several batches may be in flight.
    pub struct UringIo {
        ring: IoUring,
        pending: HashMap<u64, Pending>,
        depth: usize,
        syncs: Arc<SyncCounter>,
    }

    const WRITE_TAG: u64 = 0;
    const SYNC_TAG: u64 = 1;

    impl UringIo {
        pub fn new(depth: usize, syncs: Arc<SyncCounter>) -> io::Result<Self> {
            let depth = depth.max(1);
            let ring = IoUring::new((depth * 2).next_power_of_two() as u32)?;
            // A ring can be created yet refuse work under some seccomp
            // policies: prove it with a no-op before relying on it.
            let mut probe = UringIo {
                ring,
                pending: HashMap::new(),
                depth,
                syncs,
            };
            let nop = opcode::Nop::new().build().user_data(u64::MAX);
            // SAFETY: a Nop references no memory.
            unsafe { probe.ring.submission().push(&nop) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            probe.ring.submit_and_wait(1)?;
            let cqe = probe
                .ring
                .completion()
                .next()
                .ok_or_else(|| io::Error::other("io_uring gave no completion for a no-op"))?;
            if cqe.result() < 0 {
                return Err(io::Error::from_raw_os_error(-cqe.result()));
            }
            Ok(probe)
        }

        fn push_write(&mut self, id: u64) -> io::Result<()> {
            let p = &self.pending[&id];
            let written = 0usize;
            let ptr = p.buf[written..].as_ptr();
            let len = (p.buf.len() - written) as u32;
            let mut write = opcode::Write::new(types::Fd(p.file.as_raw_fd()), ptr, len)
                .offset(p.offset)
                .build()
                .user_data(id << 1 | WRITE_TAG);
            if p.sync {
                write = write.flags(squeue::Flags::IO_LINK);
            }
            let mut entries = vec![write];
            if p.sync {
                entries.push(
                    opcode::Fsync::new(types::Fd(p.file.as_raw_fd()))
                        .flags(types::FsyncFlags::DATASYNC)
                        .build()
                        .user_data(id << 1 | SYNC_TAG),
                );
            }
            // SAFETY: the buffer and the file stay alive in `self.pending`
            // until both completions for this id have been reaped.
            unsafe { self.ring.submission().push_multiple(&entries) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
            self.ring.submit()?;
            Ok(())
        }

        /// A short write breaks the link; finish the batch the slow way.
        fn finish_inline(p: &mut Pending, written: usize, syncs: &SyncCounter) {
            let mut r = p
                .file
                .write_all_at(&p.buf[written..], p.offset + written as u64);
            if r.is_ok() {
                power::wrote(&p.path, p.offset, &p.buf);
            }
            if r.is_ok() && p.sync {
                r = crate::fsutil::sync_file_data(&p.file, &p.path);
                syncs.add();
            }
            if let Err(e) = r {
                p.error.get_or_insert(e);
            }
            p.write_done = true;
            p.sync_done = true;
        }
    }

    impl WalIo for UringIo {
        fn kind(&self) -> IoBackendKind {
            IoBackendKind::IoUring
        }

        fn submit(
            &mut self,
            id: u64,
            file: &Arc<File>,
            path: &Arc<Path>,
            offset: u64,
            buf: Vec<u8>,
            sync: bool,
        ) -> io::Result<()> {
            let empty = buf.is_empty();
            self.pending.insert(
                id,
                Pending {
                    file: file.clone(),
                    path: path.clone(),
                    buf,
                    offset,
                    sync,
                    write_done: empty,
                    sync_done: !sync,
                    error: None,
                    sync_ticket: 0,
                },
            );
            if empty {
                if sync {
                    if let Some(p) = self.pending.get_mut(&id) {
                        p.sync_ticket = power::sync_begin(path);
                    }
                    let entry = opcode::Fsync::new(types::Fd(file.as_raw_fd()))
                        .flags(types::FsyncFlags::DATASYNC)
                        .build()
                        .user_data(id << 1 | SYNC_TAG);
                    // SAFETY: the file is kept alive in `self.pending`.
                    unsafe { self.ring.submission().push(&entry) }
                        .map_err(|_| io::Error::other("io_uring submission queue full"))?;
                    self.ring.submit()?;
                }
                return Ok(());
            }
            self.push_write(id)
        }

        fn reap(&mut self, wait: Option<Duration>, out: &mut Vec<Completion>) -> io::Result<()> {
            if let Some(wait) = wait
                && !self.pending.is_empty()
                && self.ring.completion().is_empty()
            {
                let ts = types::Timespec::from(wait);
                let args = types::SubmitArgs::new().timespec(&ts);
                match self.ring.submitter().submit_with_args(1, &args) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) => return Err(e),
                }
            }
            let cqes: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (data, res) in cqes {
                let id = data >> 1;
                let Some(p) = self.pending.get_mut(&id) else {
                    continue;
                };
                // Injected faults change what the kernel answered (a short
                // write reports half; the rest is written again inline).
                let site = if data & 1 == WRITE_TAG {
                    Site::WalWrite
                } else {
                    Site::WalSync
                };
                let res = match fault::check(site, &p.path) {
                    Some(Fault::Short) if res > 1 => res / 2,
                    Some(Fault::NoSpace) if res >= 0 => -libc::ENOSPC,
                    Some(Fault::Io) if res >= 0 => -libc::EIO,
                    _ => res,
                };
                if data & 1 == WRITE_TAG {
                    if res < 0 {
                        p.error.get_or_insert(io::Error::from_raw_os_error(-res));
                        p.write_done = true;
                        // The linked sync is cancelled by the kernel.
                        p.sync_done = true;
                    } else if (res as usize) < p.buf.len() {
                        UringIo::finish_inline(p, res as usize, &self.syncs);
                    } else {
                        p.write_done = true;
                        // The linked sync starts only now, after the write.
                        // Recorded as the completion is reaped: completions
                        // come in the order they happened, so a write
                        // recorded before this sync's start finished before
                        // the kernel started the sync, and one that finished
                        // after comes later in the queue and is recorded
                        // after it, as not covered.
                        power::wrote(&p.path, p.offset, &p.buf);
                        if p.sync {
                            p.sync_ticket = power::sync_begin(&p.path);
                        }
                    }
                } else {
                    if res == -libc::ECANCELED && p.write_done {
                        // Cancelled because the write failed or was short and
                        // finished inline; that path recorded the outcome.
                    } else if res < 0 {
                        p.error.get_or_insert(io::Error::from_raw_os_error(-res));
                    } else {
                        self.syncs.add();
                        power::sync_end(p.sync_ticket);
                    }
                    p.sync_done = true;
                }
                if p.write_done && p.sync_done {
                    let p = self.pending.remove(&id).expect("present: looked up above");
                    out.push(Completion {
                        id,
                        result: p.error.map_or(Ok(()), Err),
                    });
                }
            }
            Ok(())
        }

        fn in_flight(&self) -> usize {
            self.pending.len()
        }
        fn depth(&self) -> usize {
            self.depth
        }
    }
}
