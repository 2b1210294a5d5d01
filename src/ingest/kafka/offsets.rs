//! Which offsets of each partition are durable, and so may be committed.

use std::collections::{BTreeMap, HashMap};

use crate::catalog::TableName;

pub type PartitionKey = (String, i32);

/// Per partition: the batches sent and not yet finished, by first offset.
/// The committable offset is one past the last message of the longest run
/// of finished batches from the front.
#[derive(Default)]
pub(super) struct OffsetTracker {
    pub(super) partitions: HashMap<PartitionKey, PartitionOffsets>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BatchState {
    Sent,
    /// Written to a table whose writes are acknowledged before they are
    /// durable; done once this happens.
    Written(Waiting),
    Done,
    /// Could not be written: the partition's commits stop before it until a
    /// restart replays it.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Waiting {
    /// ASYNC_WAL: a sync of the WAL.
    WalSync,
    /// SKIP_WAL: flushes of the table's regions past these sequence ids
    /// (region id -> highest sequence id when the batch was written).
    Flush {
        table: TableName,
        seqs: HashMap<u64, u64>,
    },
}

#[derive(Default)]
pub(super) struct PartitionOffsets {
    /// first offset -> (last offset, state)
    pub(super) in_flight: BTreeMap<i64, (i64, BatchState)>,
    /// Next offset to consume once everything before it is durable.
    pub(super) committable: Option<i64>,
    pub(super) committed: Option<i64>,
    /// Highest committable offset recorded in the store on its own.
    pub(super) noted_in_store: Option<i64>,
}

impl OffsetTracker {
    pub(super) fn sent(&mut self, p: &PartitionKey, first: i64, last: i64) {
        let po = self.partitions.entry(p.clone()).or_default();
        // The first batch of an assignment starts where consumption
        // started: at the committed offset or the durable position
        // recovered from the store, so everything below it is durable.
        po.committable.get_or_insert(first);
        po.in_flight.insert(first, (last, BatchState::Sent));
    }

    /// The offset below which every message of the partition is durable
    /// (or handled), as known now.
    pub(super) fn durable_below(&self, p: &PartitionKey) -> Option<i64> {
        self.partitions.get(p).and_then(|po| po.committable)
    }

    /// A batch is durable (or handled, `Done`) or given up (`Failed`); moves
    /// the committable offset past every done batch at the front.
    ///
    /// A batch is named by its first and last offsets: after a partition
    /// was revoked and assigned again, a late word about a batch of the
    /// earlier assignment may meet one of the new that starts at the same
    /// offset. It applies only if it ends at the same offset too — then it
    /// holds the very same messages, so their being durable is true of it.
    pub(super) fn finished(&mut self, p: &PartitionKey, first: i64, last: i64, state: BatchState) {
        let Some(po) = self.partitions.get_mut(p) else {
            return; // revoked meanwhile: the next owner replays it
        };
        if let Some(b) = po.in_flight.get_mut(&first)
            && b.0 == last
        {
            b.1 = state;
        }
        while let Some((&f, &(last, BatchState::Done))) = po.in_flight.first_key_value() {
            po.in_flight.remove(&f);
            po.committable = Some(last + 1);
        }
    }

    /// The partition starts at `at`, a position the store recovered:
    /// everything before it is durable, and the store knows it.
    pub(super) fn resumed_at(&mut self, p: &PartitionKey, at: i64) {
        let po = self.partitions.entry(p.clone()).or_default();
        po.committable = po.committable.max(Some(at));
        po.noted_in_store = po.noted_in_store.max(Some(at));
    }

    /// The committable offset of a partition with no batch in flight, when
    /// the store has not been told of it yet.
    pub(super) fn drained_position(&self, p: &PartitionKey) -> Option<i64> {
        let po = self.partitions.get(p)?;
        let at = po.committable?;
        (po.in_flight.is_empty() && po.noted_in_store < Some(at)).then_some(at)
    }

    pub(super) fn position_noted(&mut self, p: &PartitionKey, at: i64) {
        if let Some(po) = self.partitions.get_mut(p) {
            po.noted_in_store = po.noted_in_store.max(Some(at));
        }
    }

    /// Batches written and waiting to become durable.
    pub(super) fn waiting(&self) -> Vec<(PartitionKey, (i64, i64), Waiting)> {
        self.partitions
            .iter()
            .flat_map(|(p, po)| {
                po.in_flight
                    .iter()
                    .filter_map(|(&first, (last, state))| match state {
                        BatchState::Written(w) => Some((p.clone(), (first, *last), w.clone())),
                        _ => None,
                    })
            })
            .collect()
    }

    /// Whether a batch of the partition that starts before `first` is
    /// still being written (its points may not be readable yet).
    pub(super) fn sent_before(&self, p: &PartitionKey, first: i64) -> bool {
        self.partitions.get(p).is_some_and(|po| {
            po.in_flight
                .range(..first)
                .any(|(_, b)| b.1 == BatchState::Sent)
        })
    }

    /// Batches of the partition still being written.
    pub(super) fn in_flight(&self, p: &PartitionKey) -> usize {
        self.partitions.get(p).map_or(0, |po| {
            po.in_flight
                .values()
                .filter(|b| b.1 == BatchState::Sent)
                .count()
        })
    }

    /// Offsets that moved since the last commit.
    pub(super) fn to_commit(&self) -> Vec<(PartitionKey, i64)> {
        self.partitions
            .iter()
            .filter_map(|(p, po)| match po.committable {
                Some(c) if po.committed != Some(c) => Some((p.clone(), c)),
                _ => None,
            })
            .collect()
    }

    pub(super) fn committed(&mut self, done: &[(PartitionKey, i64)]) {
        for (p, o) in done {
            if let Some(po) = self.partitions.get_mut(p) {
                po.committed = Some(*o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn commits_stop_at_the_first_batch_not_yet_durable() {
        let mut t = OffsetTracker::default();
        let p = ("t".to_string(), 0);
        t.sent(&p, 0, 9);
        t.sent(&p, 10, 19);
        t.sent(&p, 20, 29);
        t.finished(&p, 10, 19, BatchState::Done);
        t.finished(&p, 20, 29, BatchState::Done);
        // Where consumption started is durable; nothing past it yet.
        assert_eq!(t.to_commit(), vec![(p.clone(), 0)]);
        assert_eq!(t.durable_below(&p), Some(0));
        t.finished(&p, 0, 9, BatchState::Done);
        assert_eq!(t.to_commit(), vec![(p.clone(), 30)]);
        assert_eq!(t.durable_below(&p), Some(30));
        t.committed(&[(p.clone(), 30)]);
        assert!(t.to_commit().is_empty());
        // A batch that failed holds the offset back for good.
        t.sent(&p, 30, 39);
        t.sent(&p, 40, 49);
        t.finished(&p, 30, 39, BatchState::Failed);
        t.finished(&p, 40, 49, BatchState::Done);
        assert!(t.to_commit().is_empty());
        assert_eq!(t.in_flight(&p), 0, "nothing left to wait for");
        t.sent(&p, 50, 50);
        assert_eq!(t.in_flight(&p), 1);
        // A revoked partition's late batch changes nothing.
        t.partitions.remove(&p);
        t.finished(&p, 50, 50, BatchState::Done);
        assert!(t.to_commit().is_empty());
    }

    #[test]
    pub(super) fn a_drained_partition_tells_the_store_its_position_once() {
        let mut t = OffsetTracker::default();
        let p = ("t".to_string(), 0);
        // Resumed from the store at 100: committed later, not noted again.
        t.resumed_at(&p, 100);
        assert_eq!(t.to_commit(), vec![(p.clone(), 100)]);
        assert_eq!(t.drained_position(&p), None);
        t.sent(&p, 100, 109);
        t.sent(&p, 110, 119);
        t.finished(&p, 100, 109, BatchState::Done);
        // A batch still in the pipeline: its own record will carry more.
        assert_eq!(t.drained_position(&p), None);
        t.finished(&p, 110, 119, BatchState::Done);
        assert_eq!(t.drained_position(&p), Some(120));
        t.position_noted(&p, 120);
        assert_eq!(t.drained_position(&p), None);
        // Written but not yet durable (ASYNC_WAL) is not drained.
        t.sent(&p, 120, 129);
        t.finished(&p, 120, 129, BatchState::Written(Waiting::WalSync));
        assert_eq!(t.drained_position(&p), None);
    }

    /// The commit rule over thousands of random interleavings of what the
    /// pipeline does concurrently: batches fetched, written by any writer
    /// in any order (SYNC_WAL, ASYNC_WAL, SKIP_WAL), WAL syncs, flushes,
    /// acknowledgements arriving late and out of order, failed writes,
    /// partitions revoked and assigned again (at the committed offset or at
    /// a position the store recovered). Every offset the tracker offers to
    /// commit must have every message below it durable — synced in the
    /// WAL or flushed — at that moment; and once everything settles, the
    /// commit reaches the end of what was fetched.
    #[test]
    pub(super) fn every_commit_follows_the_sync_or_flush_of_everything_below_it() {
        #[derive(Clone, Copy, PartialEq)]
        enum Mode {
            Sync,
            Async,
            Skip,
        }
        struct Flight {
            p: usize,
            first: i64,
            last: i64,
            mode: Mode,
        }
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        const PARTITIONS: usize = 3;
        let mut commits_checked = 0u64;
        for _ in 0..20_000 {
            let keys: Vec<PartitionKey> = (0..PARTITIONS)
                .map(|i| ("t".to_string(), i as i32))
                .collect();
            let mut t = OffsetTracker::default();
            let mut fetch = [0i64; PARTITIONS];
            let mut assigned = [true; PARTITIONS];
            let mut group_commit = [0i64; PARTITIONS];
            // Partitions where a write failed: their commits may stop.
            let mut failed = [false; PARTITIONS];
            let mut durable: Vec<Vec<bool>> = vec![Vec::new(); PARTITIONS];
            let mut queued: Vec<Flight> = Vec::new(); // fetched, not yet written
            let mut in_wal: Vec<(Flight, bool)> = Vec::new(); // (batch, failed)
            let mut in_memstore: Vec<Flight> = Vec::new();
            let mut acks: Vec<(usize, i64, i64, BatchState)> = Vec::new();
            let mark = |durable: &mut Vec<Vec<bool>>, f: &Flight| {
                let d = &mut durable[f.p];
                if d.len() <= f.last as usize {
                    d.resize(f.last as usize + 1, false);
                }
                for o in f.first..=f.last {
                    d[o as usize] = true;
                }
            };
            for _ in 0..120 {
                match next(10) {
                    0 | 1 => {
                        let p = next(PARTITIONS as u64) as usize;
                        if assigned[p] {
                            let n = 1 + next(5) as i64;
                            let first = fetch[p];
                            fetch[p] += n;
                            t.sent(&keys[p], first, first + n - 1);
                            let mode = [Mode::Sync, Mode::Async, Mode::Skip][next(3) as usize];
                            queued.push(Flight {
                                p,
                                first,
                                last: first + n - 1,
                                mode,
                            });
                        }
                    }
                    2 if !queued.is_empty() => {
                        // Any writer, any order.
                        let f = queued.swap_remove(next(queued.len() as u64) as usize);
                        if next(25) == 0 {
                            failed[f.p] = true;
                            acks.push((f.p, f.first, f.last, BatchState::Failed));
                            continue;
                        }
                        match f.mode {
                            Mode::Sync => in_wal.push((f, false)),
                            Mode::Async => {
                                acks.push((
                                    f.p,
                                    f.first,
                                    f.last,
                                    BatchState::Written(Waiting::WalSync),
                                ));
                                in_wal.push((f, false));
                            }
                            Mode::Skip => {
                                acks.push((
                                    f.p,
                                    f.first,
                                    f.last,
                                    BatchState::Written(Waiting::Flush {
                                        table: TableName::parse("t").expect("name"),
                                        seqs: HashMap::new(),
                                    }),
                                ));
                                in_memstore.push(f);
                            }
                        }
                    }
                    3 => {
                        // A WAL sync: everything appended is durable;
                        // SYNC_WAL writers hear of it on their own time.
                        for (f, _) in in_wal.drain(..) {
                            mark(&mut durable, &f);
                            if f.mode == Mode::Sync {
                                acks.push((f.p, f.first, f.last, BatchState::Done));
                            }
                        }
                    }
                    4 => {
                        // What the pipeline's settle does: the batches
                        // written and waiting, then a WAL sync or flushes,
                        // then those batches are done.
                        let waiting = t.waiting();
                        let wal = next(2) == 0;
                        if wal {
                            for (f, _) in in_wal.drain(..) {
                                mark(&mut durable, &f);
                                if f.mode == Mode::Sync {
                                    acks.push((f.p, f.first, f.last, BatchState::Done));
                                }
                            }
                        } else {
                            for f in in_memstore.drain(..) {
                                mark(&mut durable, &f);
                            }
                        }
                        for (key, (first, last), w) in waiting {
                            if (w == Waiting::WalSync) == wal {
                                t.finished(&key, first, last, BatchState::Done);
                            }
                        }
                    }
                    9 => {
                        // A flush on its own (size, age).
                        for f in in_memstore.drain(..) {
                            mark(&mut durable, &f);
                        }
                    }
                    5 | 6 if !acks.is_empty() => {
                        let (p, first, last, state) =
                            acks.swap_remove(next(acks.len() as u64) as usize);
                        t.finished(&keys[p], first, last, state);
                    }
                    7 => {
                        let offered = t.to_commit();
                        for (key, o) in &offered {
                            let p = key.1 as usize;
                            for below in 0..*o {
                                assert!(
                                    durable[p].get(below as usize).copied().unwrap_or(false)
                                        || below < group_commit[p],
                                    "offset {o} of partition {p} offered while {below} is not durable"
                                );
                            }
                            group_commit[p] = *o;
                            commits_checked += 1;
                        }
                        t.committed(&offered);
                    }
                    8 => {
                        // A rebalance: revoked, or assigned again — at the
                        // group's commit, or at the store's durable
                        // position when that is further.
                        let p = next(PARTITIONS as u64) as usize;
                        if assigned[p] {
                            assigned[p] = false;
                            t.partitions.remove(&keys[p]);
                        } else {
                            assigned[p] = true;
                            let durable_prefix =
                                durable[p].iter().take_while(|d| **d).count() as i64;
                            let start =
                                group_commit[p].max(if next(2) == 0 { durable_prefix } else { 0 });
                            if start > group_commit[p] {
                                t.resumed_at(&keys[p], start);
                            }
                            fetch[p] = start;
                        }
                    }
                    _ => {}
                }
            }
            // Everything settles: the commit reaches what was fetched,
            // unless a write failed (then it stops before it, for good).
            for f in queued.drain(..) {
                acks.push((f.p, f.first, f.last, BatchState::Written(Waiting::WalSync)));
                in_wal.push((f, false));
            }
            for (p, first, last, state) in acks.drain(..) {
                t.finished(&keys[p], first, last, state);
            }
            let waiting = t.waiting();
            for (f, _) in in_wal.drain(..) {
                mark(&mut durable, &f);
                if f.mode == Mode::Sync {
                    t.finished(&keys[f.p], f.first, f.last, BatchState::Done);
                }
            }
            for f in in_memstore.drain(..) {
                mark(&mut durable, &f);
            }
            for (key, (first, last), _) in waiting {
                t.finished(&key, first, last, BatchState::Done);
            }
            for p in 0..PARTITIONS {
                if assigned[p] && !failed[p] && t.partitions.contains_key(&keys[p]) {
                    assert_eq!(t.durable_below(&keys[p]), Some(fetch[p]), "partition {p}");
                }
            }
        }
        assert!(
            commits_checked > 10_000,
            "{commits_checked} commits checked"
        );
    }
}
