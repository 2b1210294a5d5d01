//! A record of every change made to a data directory, for the power-cut
//! tests. A power cut loses what the page cache held: writes not yet
//! covered by an `fsync`/`fdatasync` of their file, and directory entries
//! (creations, renames, links, deletions) not yet covered by an `fsync` of
//! their directory. A process kill loses neither, so the crash tests cannot
//! see what a power cut would. This layer writes down, in order, each
//! change halite makes under one directory and each sync, so that
//! [`replay`] can rebuild what the disk could hold after a cut at any point
//! of the run (the approach of ALICE; LazyFS does the same below a FUSE
//! mount).
//!
//! Each site that changes the data directory reports the change after it
//! happened and a sync both before it starts and after it returns
//! ([`sync_begin`], [`sync_end`]): a sync then covers exactly the changes
//! recorded before its start, and a change racing with a sync counts as
//! not covered, which is the weaker guarantee and the right one to test.
//!
//! The trace is a file of records (see [`Record`]); a server records when
//! `HALITE_POWER_TRACE` names one (see [`arm_from_env`]). When nothing is
//! recorded, a site costs one relaxed atomic load.

pub mod replay;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// The first bytes of a trace file.
pub const TRACE_MAGIC: &[u8; 8] = b"HLPWRTR1";

/// One change or sync, as a trace holds it. Paths are relative to the
/// recorded directory (`""` is the directory itself), with `/` between
/// components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A file that existed when recording started, with its bytes: durable.
    InitialFile { path: String, data: Vec<u8> },
    /// A directory that existed when recording started.
    InitialDir { path: String },
    /// A file created, or an existing one truncated to nothing.
    Create { path: String },
    /// Bytes written at an offset.
    Write {
        path: String,
        offset: u64,
        data: Vec<u8>,
    },
    /// Zeros written at an offset (WAL preallocation), kept short.
    Zeros { path: String, offset: u64, len: u64 },
    /// A sync of a file (its data) or a directory (its entries) started.
    SyncBegin { path: String, ticket: u64 },
    /// The sync of that ticket returned successfully.
    SyncEnd { ticket: u64 },
    /// A file renamed, replacing whatever `to` named.
    Rename { from: String, to: String },
    /// A file's name removed.
    Remove { path: String },
    /// A directory and everything below it removed.
    RemoveTree { path: String },
    /// A directory and any missing parents created.
    MakeDirs { path: String },
    /// A second name for an existing file (a hard link).
    Link { from: String, to: String },
}

impl Record {
    fn kind(&self) -> u8 {
        match self {
            Record::InitialFile { .. } => 1,
            Record::InitialDir { .. } => 2,
            Record::Create { .. } => 3,
            Record::Write { .. } => 4,
            Record::Zeros { .. } => 5,
            Record::SyncBegin { .. } => 6,
            Record::SyncEnd { .. } => 7,
            Record::Rename { .. } => 8,
            Record::Remove { .. } => 9,
            Record::RemoveTree { .. } => 10,
            Record::MakeDirs { .. } => 11,
            Record::Link { .. } => 12,
        }
    }

    /// Appends the record: `kind (u8) · body length (u32 LE) · body`, where
    /// paths are `u16 LE length · UTF-8`, numbers `u64 LE`, data `u32 LE
    /// length · bytes`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.push(self.kind());
        out.extend_from_slice(&[0; 4]);
        let path = |out: &mut Vec<u8>, p: &str| {
            out.extend_from_slice(&(p.len() as u16).to_le_bytes());
            out.extend_from_slice(p.as_bytes());
        };
        let num = |out: &mut Vec<u8>, n: u64| out.extend_from_slice(&n.to_le_bytes());
        let data = |out: &mut Vec<u8>, d: &[u8]| {
            out.extend_from_slice(&(d.len() as u32).to_le_bytes());
            out.extend_from_slice(d);
        };
        match self {
            Record::InitialFile { path: p, data: d } => {
                path(out, p);
                data(out, d);
            }
            Record::InitialDir { path: p }
            | Record::Create { path: p }
            | Record::Remove { path: p }
            | Record::RemoveTree { path: p }
            | Record::MakeDirs { path: p } => path(out, p),
            Record::Write {
                path: p,
                offset,
                data: d,
            } => {
                path(out, p);
                num(out, *offset);
                data(out, d);
            }
            Record::Zeros {
                path: p,
                offset,
                len,
            } => {
                path(out, p);
                num(out, *offset);
                num(out, *len);
            }
            Record::SyncBegin { path: p, ticket } => {
                path(out, p);
                num(out, *ticket);
            }
            Record::SyncEnd { ticket } => num(out, *ticket),
            Record::Rename { from, to } | Record::Link { from, to } => {
                path(out, from);
                path(out, to);
            }
        }
        let body = (out.len() - start - 5) as u32;
        out[start + 1..start + 5].copy_from_slice(&body.to_le_bytes());
    }

    /// Reads the record at the start of `buf`: the record and its length,
    /// `None` when `buf` ends inside it (a trace still being written), an
    /// error when it cannot be a record.
    pub fn decode(buf: &[u8]) -> Result<Option<(Record, usize)>, String> {
        if buf.len() < 5 {
            return Ok(None);
        }
        let kind = buf[0];
        let len = u32::from_le_bytes(buf[1..5].try_into().expect("4 bytes")) as usize;
        let Some(body) = buf.get(5..5 + len) else {
            return Ok(None);
        };
        let mut r = Reader { buf: body, at: 0 };
        let record = match kind {
            1 => Record::InitialFile {
                path: r.path()?,
                data: r.data()?,
            },
            2 => Record::InitialDir { path: r.path()? },
            3 => Record::Create { path: r.path()? },
            4 => Record::Write {
                path: r.path()?,
                offset: r.num()?,
                data: r.data()?,
            },
            5 => Record::Zeros {
                path: r.path()?,
                offset: r.num()?,
                len: r.num()?,
            },
            6 => Record::SyncBegin {
                path: r.path()?,
                ticket: r.num()?,
            },
            7 => Record::SyncEnd { ticket: r.num()? },
            8 => Record::Rename {
                from: r.path()?,
                to: r.path()?,
            },
            9 => Record::Remove { path: r.path()? },
            10 => Record::RemoveTree { path: r.path()? },
            11 => Record::MakeDirs { path: r.path()? },
            12 => Record::Link {
                from: r.path()?,
                to: r.path()?,
            },
            other => return Err(format!("unknown record kind {other}")),
        };
        if r.at != body.len() {
            return Err(format!(
                "record kind {kind} has {} bytes left over",
                body.len() - r.at
            ));
        }
        Ok(Some((record, 5 + len)))
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let b = self
            .buf
            .get(self.at..self.at + n)
            .ok_or("record body ends early")?;
        self.at += n;
        Ok(b)
    }
    fn num(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn path(&mut self) -> Result<String, String> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")) as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a path is not UTF-8".to_string())
    }
    fn data(&mut self) -> Result<Vec<u8>, String> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        Ok(self.take(n)?.to_vec())
    }
}

struct Recorder {
    root: PathBuf,
    out: File,
    scratch: Vec<u8>,
}

static ON: AtomicBool = AtomicBool::new(false);
static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);
static TICKETS: AtomicU64 = AtomicU64::new(1);

/// Starts recording changes under `root` into a new trace at `trace`
/// (which must lie outside `root`); what `root` holds already is written
/// first, as durable.
pub fn record_to(root: &Path, trace: &Path) -> std::io::Result<()> {
    let mut out = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(trace)?;
    let mut head = TRACE_MAGIC.to_vec();
    if root.exists() {
        snapshot(root, root, &mut head)?;
    }
    out.write_all(&head)?;
    *RECORDER.lock() = Some(Recorder {
        root: root.to_path_buf(),
        out,
        scratch: Vec::new(),
    });
    ON.store(true, Ordering::Release);
    Ok(())
}

fn snapshot(root: &Path, dir: &Path, out: &mut Vec<u8>) -> std::io::Result<()> {
    let rel = relative(root, dir).unwrap_or_default();
    Record::InitialDir { path: rel }.encode(out);
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        if e.file_type()?.is_dir() {
            snapshot(root, &path, out)?;
        } else if let Some(rel) = relative(root, &path) {
            Record::InitialFile {
                path: rel,
                data: std::fs::read(&path)?,
            }
            .encode(out);
        }
    }
    Ok(())
}

/// Stops recording (the trace file is closed).
pub fn stop() {
    ON.store(false, Ordering::Release);
    *RECORDER.lock() = None;
}

/// Records into the file `HALITE_POWER_TRACE` names, for a server under
/// test, changes under `root` (its data directory).
pub fn arm_from_env(root: &Path) -> Result<(), String> {
    let Some(trace) = std::env::var_os("HALITE_POWER_TRACE") else {
        return Ok(());
    };
    record_to(root, Path::new(&trace))
        .map_err(|e| format!("HALITE_POWER_TRACE: cannot record into {trace:?}: {e}"))
}

fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Vec<_> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    Some(parts.join("/"))
}

/// Writes the record `make` builds for `paths`, when recording and every
/// path lies under the recorded directory; whether it did.
fn record<const N: usize>(paths: [&Path; N], make: impl FnOnce([String; N]) -> Record) -> bool {
    if !ON.load(Ordering::Relaxed) {
        return false;
    }
    let mut guard = RECORDER.lock();
    let Some(r) = guard.as_mut() else {
        return false;
    };
    let mut rel = Vec::with_capacity(N);
    for p in paths {
        match relative(&r.root, p) {
            Some(s) => rel.push(s),
            None => return false,
        }
    }
    let rel: [String; N] = rel.try_into().expect("one per path");
    r.scratch.clear();
    make(rel).encode(&mut r.scratch);
    // A trace that cannot be written makes the whole test meaningless:
    // stop recording and say so rather than go on with holes.
    if let Err(e) = r.out.write_all(&r.scratch) {
        tracing::error!(error = %e, "power-cut trace: cannot write; recording stops");
        ON.store(false, Ordering::Release);
        *guard = None;
        return false;
    }
    true
}

/// A file was created (or truncated to nothing) at `path`.
pub fn created(path: &Path) {
    record([path], |[path]| Record::Create { path });
}

/// `data` was written at `offset` of the file at `path`.
pub fn wrote(path: &Path, offset: u64, data: &[u8]) {
    record([path], |[path]| Record::Write {
        path,
        offset,
        data: data.to_vec(),
    });
}

/// `len` zeros were written at `offset` of the file at `path`.
pub fn zeroed(path: &Path, offset: u64, len: u64) {
    record([path], |[path]| Record::Zeros { path, offset, len });
}

/// A sync of the file or directory at `path` is about to start; give the
/// ticket to [`sync_end`] once it succeeded.
#[must_use]
pub fn sync_begin(path: &Path) -> u64 {
    if !ON.load(Ordering::Relaxed) {
        return 0;
    }
    let ticket = TICKETS.fetch_add(1, Ordering::Relaxed);
    // A directory outside the recorded one (the data directory's parent)
    // gets no ticket, so its end is not recorded either.
    if record([path], |[path]| Record::SyncBegin { path, ticket }) {
        ticket
    } else {
        0
    }
}

/// The sync of `ticket` returned successfully.
pub fn sync_end(ticket: u64) {
    if ticket != 0 {
        record([], |[]| Record::SyncEnd { ticket });
    }
}

/// The file `from` was renamed to `to`.
pub fn renamed(from: &Path, to: &Path) {
    record([from, to], |[from, to]| Record::Rename { from, to });
}

/// The file at `path` was removed.
pub fn removed(path: &Path) {
    record([path], |[path]| Record::Remove { path });
}

/// The directory at `path` was removed with everything below it.
pub fn removed_tree(path: &Path) {
    record([path], |[path]| Record::RemoveTree { path });
}

/// The directory at `path` (and any missing parents) was created.
pub fn made_dirs(path: &Path) {
    record([path], |[path]| Record::MakeDirs { path });
}

/// `to` was made a second name (hard link) of the file `from`.
pub fn linked(from: &Path, to: &Path) {
    record([from, to], |[from, to]| Record::Link { from, to });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let records = vec![
            Record::InitialDir {
                path: String::new(),
            },
            Record::InitialFile {
                path: "a".into(),
                data: vec![1, 2, 3],
            },
            Record::Create {
                path: "wal/1.log".into(),
            },
            Record::Write {
                path: "wal/1.log".into(),
                offset: 7,
                data: b"hello".to_vec(),
            },
            Record::Zeros {
                path: "x".into(),
                offset: 1,
                len: 1 << 20,
            },
            Record::SyncBegin {
                path: "x".into(),
                ticket: 9,
            },
            Record::SyncEnd { ticket: 9 },
            Record::Rename {
                from: "a.tmp".into(),
                to: "a".into(),
            },
            Record::Remove { path: "a".into() },
            Record::RemoveTree { path: "r".into() },
            Record::MakeDirs { path: "r/f".into() },
            Record::Link {
                from: "a".into(),
                to: "b/a".into(),
            },
        ];
        let mut buf = Vec::new();
        for r in &records {
            r.encode(&mut buf);
        }
        let mut at = 0;
        let mut back = Vec::new();
        while let Some((r, n)) = Record::decode(&buf[at..]).unwrap() {
            back.push(r);
            at += n;
        }
        assert_eq!(back, records);
        assert_eq!(at, buf.len());
        // A trace cut inside a record reads as "not yet there".
        let last_start = buf.len() - 5 - (2 + 1) - (2 + 3);
        assert_eq!(Record::decode(&buf[last_start..buf.len() - 1]), Ok(None));
    }
}
