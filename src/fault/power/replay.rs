//! What a disk could hold after a power cut at a point of a recorded run.
//!
//! [`Replay`] reads a trace record by record, keeping two views of the
//! directory: what the running process saw (every change) and what is
//! durable (changes a later sync covered). [`Replay::materialize`] writes
//! one possible disk at the current point into a fresh directory:
//!
//! - each file holds its durable bytes plus a random prefix of its unsynced
//!   writes, the last one kept possibly torn at any byte (a cut can land
//!   inside a write); later writes reaching the disk before earlier ones
//!   of the same file are not modelled;
//! - each unsynced directory change (creation, rename, link, removal) is
//!   kept or lost independently of the others, so unsynced renames may
//!   land in any order (a rename whose source is not there is lost too),
//!   and a file whose name was never made durable is gone, whatever
//!   became of its bytes.
//!
//! A file sync makes durable that file's data only, not its name; a
//! directory sync makes durable the entries changed in that directory. This
//! is POSIX's promise and no more (ext4 often keeps more; code must not
//! count on it).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::{Record, TRACE_MAGIC};

/// Why a trace cannot be replayed or a cut not written.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("not a power-cut trace: it does not start with the trace magic")]
    BadMagic,
    #[error("power-cut trace, record at byte {at}: {what}")]
    Bad { at: usize, what: String },
    #[error("writing the cut's files, {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Dir(u64),
    File(usize),
}

#[derive(Debug)]
enum Change {
    Write { offset: u64, data: Vec<u8> },
    Zeros { offset: u64, len: u64 },
    Truncate,
}

impl Change {
    fn apply(&self, to: &mut Vec<u8>) {
        match self {
            Change::Write { offset, data } => {
                let at = *offset as usize;
                if to.len() < at + data.len() {
                    to.resize(at + data.len(), 0);
                }
                to[at..at + data.len()].copy_from_slice(data);
            }
            Change::Zeros { offset, len } => {
                let (at, end) = (*offset as usize, (*offset + *len) as usize);
                if to.len() < end {
                    to.resize(end, 0);
                }
                to[at..end].fill(0);
            }
            Change::Truncate => to.clear(),
        }
    }

    /// Applies the first `keep` bytes of this change only (a torn write).
    fn apply_part(&self, keep: u64, to: &mut Vec<u8>) {
        match self {
            Change::Write { offset, data } => Change::Write {
                offset: *offset,
                data: data[..keep as usize].to_vec(),
            }
            .apply(to),
            Change::Zeros { offset, .. } => Change::Zeros {
                offset: *offset,
                len: keep,
            }
            .apply(to),
            Change::Truncate => {}
        }
    }

    fn len(&self) -> u64 {
        match self {
            Change::Write { data, .. } => data.len() as u64,
            Change::Zeros { len, .. } => *len,
            Change::Truncate => 0,
        }
    }
}

#[derive(Debug, Default)]
struct Inode {
    durable: Vec<u8>,
    /// Changes not yet covered by a sync, oldest first, with their record
    /// numbers.
    pending: Vec<(u64, Change)>,
}

#[derive(Debug, Clone)]
enum Entry {
    Bind(String, Node),
    Unbind(String, Node),
    /// A rename: it lands only where its source is there (one file never
    /// ends up under two names because an earlier rename was lost).
    Move {
        from: String,
        to: String,
        node: Node,
    },
}

/// A change to directory entries, durable once its directory is synced.
#[derive(Debug)]
struct DirOp {
    seq: u64,
    dir: String,
    entries: Vec<Entry>,
}

fn apply_entries(ns: &mut BTreeMap<String, Node>, entries: &[Entry]) {
    for e in entries {
        match e {
            Entry::Bind(path, node) => {
                ns.insert(path.clone(), *node);
            }
            Entry::Unbind(path, node) => {
                if ns.get(path) == Some(node) {
                    ns.remove(path);
                }
            }
            Entry::Move { from, to, node } => {
                if ns.get(from) == Some(node) {
                    ns.remove(from);
                    ns.insert(to.clone(), *node);
                }
            }
        }
    }
}

fn parent(path: &str) -> String {
    path.rsplit_once('/')
        .map_or(String::new(), |(p, _)| p.to_string())
}

/// What one materialized cut kept and lost.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CutShape {
    /// Files in the cut.
    pub files: usize,
    /// Unsynced file changes that reached the disk, and that did not.
    pub writes_kept: usize,
    pub writes_lost: usize,
    /// Writes cut inside.
    pub torn: usize,
    /// Unsynced directory changes kept, and lost.
    pub dir_changes_kept: usize,
    pub dir_changes_lost: usize,
}

/// A trace being read; see the module's documentation.
pub struct Replay<'a> {
    trace: &'a [u8],
    at: usize,
    seq: u64,
    inodes: Vec<Inode>,
    next_dir: u64,
    current: BTreeMap<String, Node>,
    durable: BTreeMap<String, Node>,
    pending: Vec<DirOp>,
    tickets: HashMap<u64, (Node, String, u64)>,
}

impl<'a> Replay<'a> {
    /// Starts reading `trace` (the whole file as recorded), before its
    /// first record.
    pub fn new(trace: &'a [u8]) -> Result<Replay<'a>, ReplayError> {
        if !trace.starts_with(TRACE_MAGIC) {
            return Err(ReplayError::BadMagic);
        }
        let mut current = BTreeMap::new();
        current.insert(String::new(), Node::Dir(0));
        Ok(Replay {
            trace,
            at: TRACE_MAGIC.len(),
            seq: 0,
            inodes: Vec::new(),
            next_dir: 1,
            durable: current.clone(),
            current,
            pending: Vec::new(),
            tickets: HashMap::new(),
        })
    }

    /// Bytes of the trace read so far: the position of the next record.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Records read so far.
    pub fn records(&self) -> u64 {
        self.seq
    }

    /// Reads and applies the next record; `false` at the end of the trace.
    pub fn step(&mut self) -> Result<bool, ReplayError> {
        let at = self.at;
        let bad = |what: String| ReplayError::Bad { at, what };
        let Some((record, len)) = Record::decode(&self.trace[at..]).map_err(bad)? else {
            return Ok(false);
        };
        self.apply(record).map_err(bad)?;
        self.at += len;
        self.seq += 1;
        Ok(true)
    }

    fn file(&mut self, path: &str) -> Result<&mut Inode, String> {
        match self.current.get(path) {
            Some(Node::File(i)) => Ok(&mut self.inodes[*i]),
            Some(Node::Dir(_)) => Err(format!("`{path}` is a directory, not a file")),
            None => Err(format!("no file `{path}`")),
        }
    }

    fn dir_op(&mut self, dir: String, entries: Vec<Entry>) {
        self.pending.push(DirOp {
            seq: self.seq,
            dir,
            entries,
        });
    }

    fn apply(&mut self, record: Record) -> Result<(), String> {
        let seq = self.seq;
        match record {
            Record::InitialDir { path } => {
                let node = Node::Dir(self.next_dir);
                self.next_dir += 1;
                if !path.is_empty() {
                    self.current.insert(path.clone(), node);
                    self.durable.insert(path, node);
                }
            }
            Record::InitialFile { path, data } => {
                let node = Node::File(self.inodes.len());
                self.inodes.push(Inode {
                    durable: data,
                    pending: Vec::new(),
                });
                self.current.insert(path.clone(), node);
                self.durable.insert(path, node);
            }
            Record::Create { path } => match self.current.get(&path) {
                Some(Node::File(i)) => self.inodes[*i].pending.push((seq, Change::Truncate)),
                Some(Node::Dir(_)) => return Err(format!("create over directory `{path}`")),
                None => {
                    let dir = parent(&path);
                    if !matches!(self.current.get(&dir), Some(Node::Dir(_))) {
                        return Err(format!("`{path}` created in a missing directory"));
                    }
                    let node = Node::File(self.inodes.len());
                    self.inodes.push(Inode::default());
                    self.current.insert(path.clone(), node);
                    self.dir_op(dir, vec![Entry::Bind(path, node)]);
                }
            },
            Record::Write { path, offset, data } => {
                self.file(&path)?
                    .pending
                    .push((seq, Change::Write { offset, data }));
            }
            Record::Zeros { path, offset, len } => {
                self.file(&path)?
                    .pending
                    .push((seq, Change::Zeros { offset, len }));
            }
            Record::SyncBegin { path, ticket } => {
                let node = *self
                    .current
                    .get(&path)
                    .ok_or_else(|| format!("sync of missing `{path}`"))?;
                self.tickets.insert(ticket, (node, path, seq));
            }
            Record::SyncEnd { ticket } => {
                let (node, path, began) = self
                    .tickets
                    .remove(&ticket)
                    .ok_or_else(|| format!("sync end of unknown ticket {ticket}"))?;
                match node {
                    Node::File(i) => {
                        let inode = &mut self.inodes[i];
                        let covered = inode.pending.partition_point(|(s, _)| *s < began);
                        for (_, change) in inode.pending.drain(..covered) {
                            change.apply(&mut inode.durable);
                        }
                    }
                    Node::Dir(_) => {
                        let mut kept = Vec::with_capacity(self.pending.len());
                        for op in self.pending.drain(..) {
                            if op.dir == path && op.seq < began {
                                apply_entries(&mut self.durable, &op.entries);
                            } else {
                                kept.push(op);
                            }
                        }
                        self.pending = kept;
                    }
                }
            }
            Record::Rename { from, to } => {
                let node = self
                    .current
                    .remove(&from)
                    .ok_or_else(|| format!("rename of missing `{from}`"))?;
                if matches!(node, Node::Dir(_)) {
                    return Err(format!("rename of directory `{from}` is not modelled"));
                }
                // Made durable by a sync of the one directory it changes.
                if parent(&from) != parent(&to) {
                    return Err(format!(
                        "rename from `{from}` to another directory is not modelled"
                    ));
                }
                self.current.insert(to.clone(), node);
                self.dir_op(parent(&to), vec![Entry::Move { from, to, node }]);
            }
            Record::Remove { path } => {
                let node = self
                    .current
                    .remove(&path)
                    .ok_or_else(|| format!("removal of missing `{path}`"))?;
                self.dir_op(parent(&path), vec![Entry::Unbind(path, node)]);
            }
            Record::RemoveTree { path } => {
                let below = format!("{path}/");
                let mut gone: Vec<String> = self
                    .current
                    .keys()
                    .filter(|k| **k == path || k.starts_with(&below))
                    .cloned()
                    .collect();
                // Children before their directories, as the removal goes.
                gone.sort_by_key(|k| std::cmp::Reverse(k.matches('/').count()));
                for k in gone {
                    let node = self.current.remove(&k).expect("listed above");
                    self.dir_op(parent(&k), vec![Entry::Unbind(k, node)]);
                }
            }
            Record::MakeDirs { path } if path.is_empty() => {}
            Record::MakeDirs { path } => {
                let mut prefix = String::new();
                for part in path.split('/') {
                    let dir = prefix.clone();
                    if !prefix.is_empty() {
                        prefix.push('/');
                    }
                    prefix.push_str(part);
                    match self.current.get(&prefix) {
                        Some(Node::Dir(_)) => {}
                        Some(Node::File(_)) => {
                            return Err(format!("directory `{prefix}` over a file"));
                        }
                        None => {
                            let node = Node::Dir(self.next_dir);
                            self.next_dir += 1;
                            self.current.insert(prefix.clone(), node);
                            self.dir_op(dir, vec![Entry::Bind(prefix.clone(), node)]);
                        }
                    }
                }
            }
            Record::Link { from, to } => {
                let node = *self
                    .current
                    .get(&from)
                    .ok_or_else(|| format!("link of missing `{from}`"))?;
                self.current.insert(to.clone(), node);
                self.dir_op(parent(&to), vec![Entry::Bind(to, node)]);
            }
        }
        Ok(())
    }

    /// Writes into `out` (created; it must not exist) one disk a power
    /// cut here could leave, chosen by `seed`.
    pub fn materialize(&self, out: &Path, seed: u64) -> Result<CutShape, ReplayError> {
        let mut rng = SplitMix(seed);
        let mut shape = CutShape::default();
        let mut ns = self.durable.clone();
        for op in &self.pending {
            if rng.coin() {
                apply_entries(&mut ns, &op.entries);
                shape.dir_changes_kept += 1;
            } else {
                shape.dir_changes_lost += 1;
            }
        }
        let reachable = |path: &str| {
            let mut p = path;
            while let Some((up, _)) = p.rsplit_once('/') {
                if !matches!(ns.get(up), Some(Node::Dir(_))) {
                    return false;
                }
                p = up;
            }
            true
        };
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ReplayError::Io { path, source }
        };
        std::fs::create_dir(out).map_err(io(out))?;
        let mut contents: HashMap<usize, Vec<u8>> = HashMap::new();
        for (path, node) in &ns {
            if path.is_empty() || !reachable(path) {
                continue;
            }
            let target = out.join(path);
            match node {
                Node::Dir(_) => std::fs::create_dir_all(&target).map_err(io(&target))?,
                Node::File(i) => {
                    let data = contents.entry(*i).or_insert_with(|| {
                        let inode = &self.inodes[*i];
                        let mut data = inode.durable.clone();
                        let n = inode.pending.len();
                        let keep = rng.below(n as u64 + 1) as usize;
                        for (_, change) in &inode.pending[..keep] {
                            change.apply(&mut data);
                        }
                        shape.writes_kept += keep;
                        shape.writes_lost += n - keep;
                        if keep < n && rng.coin() {
                            let change = &inode.pending[keep].1;
                            let len = change.len();
                            if len > 1 {
                                change.apply_part(1 + rng.below(len - 1), &mut data);
                                shape.torn += 1;
                            }
                        }
                        data
                    });
                    if let Some(dir) = target.parent() {
                        std::fs::create_dir_all(dir).map_err(io(dir))?;
                    }
                    std::fs::write(&target, data).map_err(io(&target))?;
                    shape.files += 1;
                }
            }
        }
        Ok(shape)
    }
}

/// SplitMix64: small, seeded, and the same on every machine.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(records: &[Record]) -> Vec<u8> {
        let mut buf = TRACE_MAGIC.to_vec();
        for r in records {
            r.encode(&mut buf);
        }
        buf
    }

    fn p(s: &str) -> String {
        s.to_string()
    }

    /// Every outcome of 200 cuts at the end of `records`: the set of
    /// (file → contents) maps seen.
    fn outcomes(records: &[Record]) -> std::collections::BTreeSet<BTreeMap<String, Vec<u8>>> {
        let t = trace(records);
        let mut r = Replay::new(&t).unwrap();
        while r.step().unwrap() {}
        let dir = tempfile::tempdir().unwrap();
        (0..200)
            .map(|seed| {
                let out = dir.path().join(seed.to_string());
                r.materialize(&out, seed).unwrap();
                let mut files = BTreeMap::new();
                for e in walk(&out) {
                    let rel = e.strip_prefix(&out).unwrap().to_string_lossy().into_owned();
                    files.insert(rel, std::fs::read(&e).unwrap());
                }
                files
            })
            .collect()
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                out.extend(walk(&e.path()));
            } else {
                out.push(e.path());
            }
        }
        out
    }

    fn write(path: &str, offset: u64, data: &[u8]) -> Record {
        Record::Write {
            path: p(path),
            offset,
            data: data.to_vec(),
        }
    }

    fn sync(path: &str, ticket: u64) -> [Record; 2] {
        [
            Record::SyncBegin {
                path: p(path),
                ticket,
            },
            Record::SyncEnd { ticket },
        ]
    }

    #[test]
    fn synced_data_and_entries_survive_every_cut() {
        let mut rs = vec![Record::Create { path: p("a") }, write("a", 0, b"hello")];
        rs.extend(sync("a", 1));
        rs.extend(sync("", 2));
        let seen = outcomes(&rs);
        assert_eq!(seen.len(), 1);
        assert_eq!(seen.first().unwrap()["a"], b"hello");
    }

    #[test]
    fn an_unsynced_name_may_vanish_even_with_its_data_synced() {
        let mut rs = vec![Record::Create { path: p("a") }, write("a", 0, b"hello")];
        rs.extend(sync("a", 1));
        let seen = outcomes(&rs);
        assert!(seen.iter().any(|m| m.is_empty()));
        assert!(
            seen.iter()
                .any(|m| m.get("a").map(Vec::as_slice) == Some(b"hello"))
        );
        // The data was synced: a surviving name never shows less.
        assert!(
            seen.iter()
                .all(|m| m.get("a").is_none_or(|d| d == b"hello"))
        );
    }

    #[test]
    fn unsynced_writes_keep_a_prefix_possibly_torn() {
        let mut rs = vec![Record::Create { path: p("a") }];
        rs.extend(sync("", 1));
        rs.push(write("a", 0, b"aaaa"));
        rs.push(write("a", 4, b"bbbb"));
        let seen: Vec<Vec<u8>> = outcomes(&rs).into_iter().map(|m| m["a"].clone()).collect();
        for d in &seen {
            assert!(b"aaaabbbb".starts_with(d), "not a prefix: {d:?}");
        }
        assert!(seen.iter().any(|d| d.is_empty()));
        assert!(seen.iter().any(|d| d == b"aaaabbbb"));
        assert!(seen.iter().any(|d| d.len() % 4 != 0), "never torn");
    }

    #[test]
    fn a_sync_covers_only_what_was_written_before_it_began() {
        let rs = vec![
            Record::Create { path: p("a") },
            Record::SyncBegin {
                path: p(""),
                ticket: 1,
            },
            Record::SyncEnd { ticket: 1 },
            write("a", 0, b"old"),
            Record::SyncBegin {
                path: p("a"),
                ticket: 2,
            },
            write("a", 0, b"new"),
            Record::SyncEnd { ticket: 2 },
        ];
        let seen: Vec<Vec<u8>> = outcomes(&rs).into_iter().map(|m| m["a"].clone()).collect();
        assert!(seen.iter().any(|d| d == b"old"));
        assert!(seen.iter().any(|d| d == b"new"));
        assert!(
            seen.iter()
                .all(|d| d == b"old" || d == b"new" || d == b"nld" || d == b"ned")
        );
    }

    #[test]
    fn unsynced_renames_land_in_any_order() {
        // Two replacements of `m`, neither followed by a directory sync:
        // the first may be lost while the second stays, or the reverse.
        let mut rs = vec![
            Record::InitialFile {
                path: p("m"),
                data: b"0".to_vec(),
            },
            Record::Create { path: p("t1") },
            write("t1", 0, b"1"),
        ];
        rs.extend(sync("t1", 1));
        rs.push(Record::Rename {
            from: p("t1"),
            to: p("m"),
        });
        rs.push(Record::Create { path: p("t2") });
        rs.push(write("t2", 0, b"2"));
        rs.extend(sync("t2", 2));
        rs.push(Record::Rename {
            from: p("t2"),
            to: p("m"),
        });
        let seen: std::collections::BTreeSet<Vec<u8>> = outcomes(&rs)
            .into_iter()
            .filter_map(|m| m.get("m").cloned())
            .collect();
        let want: std::collections::BTreeSet<Vec<u8>> =
            [b"0".to_vec(), b"1".to_vec(), b"2".to_vec()].into();
        assert_eq!(seen, want);
    }

    #[test]
    fn a_file_renamed_twice_never_has_two_names() {
        let rs = vec![
            Record::InitialFile {
                path: p("a"),
                data: b"x".to_vec(),
            },
            Record::Rename {
                from: p("a"),
                to: p("b"),
            },
            Record::Rename {
                from: p("b"),
                to: p("c"),
            },
        ];
        let seen = outcomes(&rs);
        for m in &seen {
            assert_eq!(
                m.len(),
                1,
                "one name, not {:?}",
                m.keys().collect::<Vec<_>>()
            );
        }
        let names: std::collections::BTreeSet<String> =
            seen.iter().flat_map(|m| m.keys().cloned()).collect();
        assert_eq!(names, ["a", "b", "c"].map(String::from).into());
    }

    #[test]
    fn a_removed_tree_may_come_back_until_its_parent_is_synced() {
        let mut rs = vec![
            Record::MakeDirs { path: p("r/f") },
            Record::Create { path: p("r/f/x") },
            write("r/f/x", 0, b"x"),
        ];
        rs.extend(sync("r/f/x", 1));
        rs.extend(sync("r/f", 2));
        rs.extend(sync("r", 3));
        rs.extend(sync("", 4));
        rs.push(Record::Link {
            from: p("r/f/x"),
            to: p("y"),
        });
        rs.extend(sync("", 5));
        rs.push(Record::RemoveTree { path: p("r") });
        let seen = outcomes(&rs);
        assert!(
            seen.iter().all(|m| m["y"] == b"x"),
            "the link holds the data"
        );
        assert!(seen.iter().any(|m| m.contains_key("r/f/x")));
        assert!(seen.iter().any(|m| !m.contains_key("r/f/x")));
        rs.extend(sync("", 6));
        assert!(outcomes(&rs).iter().all(|m| !m.contains_key("r/f/x")));
    }
}
