//! Segment files: paths, preparation (zero-filled or recycled spares),
//! activation, and the checks recovery and `halite verify` run on them.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::fault::power;

use super::error::WalError;
use super::options::WalRecovery;
use super::record::{self, Frame, SEGMENT_HEADER_LEN, TYPE_SEGMENT_END};

pub(super) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.log"))
}

pub(super) fn fsync_dir(dir: &Path) -> Result<(), WalError> {
    crate::fsutil::fsync_dir(dir).map_err(|e| WalError::io(dir, "fsync directory", e))
}

/// What the check of one segment found.
pub(super) struct ScannedSegment {
    /// Bytes holding whole records (header included), up to where reading
    /// stops.
    pub(super) valid_len: u64,
    /// Highest sequence id per region among those records.
    pub(super) max_seq: HashMap<u64, u64>,
    /// Damage in the middle of the log was found (and stopped at, in
    /// `StopAtDamage` mode): later segments must not be replayed.
    pub(super) stopped: bool,
}

/// How a segment's records end, as [`check_segment`] reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentEnd {
    /// A segment-end record at this offset.
    Closed(u64),
    /// The last segment's written part ends here: zeros, or a frame cut
    /// short that nothing later claims was synced (recovery cuts it off).
    TornTail(u64),
    /// Damage in the middle of the log at this offset: in a closed segment
    /// before its end record, or in data a later sync point says was
    /// synced.
    Damage { offset: u64, what: &'static str },
}

/// The result of reading a segment's records without changing anything.
#[derive(Debug, Clone)]
pub struct SegmentCheck {
    pub end: SegmentEnd,
    /// Edits records read before the end.
    pub records: u64,
    /// Highest sequence id per region among them.
    pub max_seq: HashMap<u64, u64>,
}

/// Reads every record of segment `id` in `buf` (its whole file) and says
/// how it ends; `is_last` says whether it is the live (last) segment,
/// which may end in a torn tail. A bad header is an error.
pub fn check_segment(
    buf: &[u8],
    id: u64,
    is_last: bool,
) -> Result<SegmentCheck, (u64, &'static str)> {
    if buf.len() < SEGMENT_HEADER_LEN as usize || &buf[..8] != record::SEGMENT_MAGIC {
        return Err((0, "bad segment header magic"));
    }
    if buf[8..16] != id.to_le_bytes() {
        return Err((8, "segment header names another segment"));
    }
    let mut max_seq = HashMap::new();
    let mut records = 0;
    let mut pos = SEGMENT_HEADER_LEN as usize;
    let end = loop {
        let damage: &'static str = match record::read_frame(buf, pos, id) {
            Frame::Record {
                kind: TYPE_SEGMENT_END,
                ..
            } => break SegmentEnd::Closed(pos as u64),
            Frame::Record {
                kind: record::TYPE_SYNC_POINT,
                next,
                ..
            } => {
                pos = next;
                continue;
            }
            Frame::Record { payload, next, .. } => match record::decode_edits(payload) {
                Ok(edits) => {
                    // A position-only record holds a sequence id of its
                    // own, and the segment is needed until it is flushed.
                    let last = edits.first_seq + (edits.rows.len() as u64).max(1) - 1;
                    let m = max_seq.entry(edits.region_id).or_insert(0);
                    *m = last.max(*m);
                    records += 1;
                    pos = next;
                    continue;
                }
                // A record whose checksum holds but whose edits do not
                // decode was written wrong: damage whatever its place.
                Err(e) => {
                    break SegmentEnd::Damage {
                        offset: pos as u64,
                        what: e.what,
                    };
                }
            },
            Frame::EndOfData if !is_last => "closed segment has no end record",
            Frame::EndOfData => "zeros where synced records should be",
            Frame::Bad { what } => what,
        };
        let synced_past = record::highest_sync_claim_after(buf, pos + 1, id)
            .is_some_and(|claim| claim > pos as u64);
        break if is_last && !synced_past {
            SegmentEnd::TornTail(pos as u64)
        } else {
            SegmentEnd::Damage {
                offset: pos as u64,
                what: damage,
            }
        };
    };
    Ok(SegmentCheck {
        end,
        records,
        max_seq,
    })
}

/// Checks one segment at recovery: a torn tail is cut off by writing an end
/// record over it; damage in the middle of the log is an error, or with
/// `WalRecovery::StopAtDamage` where reading stops (cut off the same way).
pub(super) fn scan_segment(
    path: &Path,
    id: u64,
    is_last: bool,
    mode: WalRecovery,
) -> Result<ScannedSegment, WalError> {
    let buf = fs::read(path).map_err(|e| WalError::io(path, "read segment", e))?;
    let corrupt = |offset: u64, what: &'static str| WalError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what,
    };
    let check = check_segment(&buf, id, is_last).map_err(|(o, w)| corrupt(o, w))?;
    let end_here = |pos: u64| -> Result<(), WalError> {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| WalError::io(path, "open segment", e))?;
        let mut end = Vec::new();
        record::frame_into(&mut end, id, TYPE_SEGMENT_END, &[]);
        file.write_all_at(&end, pos)
            .and_then(|_| {
                power::wrote(path, pos, &end);
                crate::fsutil::sync_file_data(&file, path)
            })
            .map_err(|e| WalError::io(path, "write end record", e))
    };
    let scanned = |valid_len, stopped| ScannedSegment {
        valid_len,
        max_seq: check.max_seq.clone(),
        stopped,
    };
    match check.end {
        SegmentEnd::Closed(at) => Ok(scanned(at, false)),
        SegmentEnd::TornTail(at) => {
            // Torn tail (or never written): end the segment here so the
            // next recovery sees a cleanly closed segment.
            end_here(at)?;
            Ok(scanned(at, false))
        }
        SegmentEnd::Damage { offset, what } => match mode {
            WalRecovery::Strict => Err(corrupt(offset, what)),
            WalRecovery::StopAtDamage => {
                tracing::error!(
                    segment = %path.display(),
                    offset,
                    damage = what,
                    "damage in the middle of the WAL: recovering the records before it, \
                     giving up every record after it (wal.recovery = \"stop_at_damage\")"
                );
                end_here(offset)?;
                Ok(scanned(offset, true))
            }
        },
    }
}

/// Creates `<id>.spare`: header, then zeros (or a recycled file's old bytes)
/// up to the segment size, synced, so appends overwrite allocated blocks.
pub(super) fn prepare_segment(
    dir: &Path,
    id: u64,
    size: u64,
    recycled: Option<PathBuf>,
) -> Result<File, WalError> {
    let spare = dir.join(format!("{id:020}.spare"));
    let reused = match recycled {
        // The renames that made the file free and then this spare must be
        // durable before its header changes: a power cut that lost them
        // would leave the old segment's name on the new segment's bytes.
        // (A failed sync is an error: truncating the renamed file instead
        // would rewrite its header all the same.)
        Some(from) => {
            let renamed = crate::fsutil::rename(&from, &spare).is_ok();
            if renamed {
                fsync_dir(dir)?;
            }
            renamed
        }
        None => false,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(!reused)
        .open(&spare)
        .map_err(|e| WalError::io(&spare, "create segment", e))?;
    if !reused {
        power::created(&spare);
    }
    let io_err = |e| WalError::io(&spare, "preallocate segment", e);
    crate::fault::fail_if_armed(crate::fault::Site::WalPrepare, &spare).map_err(io_err)?;
    let header = record::segment_header(id);
    file.write_all_at(&header, 0).map_err(io_err)?;
    power::wrote(&spare, 0, &header);
    let have = file.metadata().map_err(io_err)?.len();
    if have < size {
        let zeros = vec![0u8; 1024 * 1024];
        let mut at = have.max(SEGMENT_HEADER_LEN);
        while at < size {
            let n = (size - at).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], at).map_err(io_err)?;
            power::zeroed(&spare, at, n as u64);
            at += n as u64;
        }
    }
    if reused {
        // Stale records of the old segment fail their checksum (the segment
        // id is part of it); zero the first frame anyway so an empty reused
        // segment reads as empty rather than torn.
        file.write_all_at(&[0u8; record::FRAME_HEADER_LEN], SEGMENT_HEADER_LEN)
            .map_err(io_err)?;
        power::zeroed(&spare, SEGMENT_HEADER_LEN, record::FRAME_HEADER_LEN as u64);
    }
    crate::fsutil::sync_file(&file, &spare).map_err(io_err)?;
    Ok(file)
}

/// Makes a prepared segment live: from here on recovery reads it.
pub(super) fn activate_segment(dir: &Path, id: u64) -> Result<(), WalError> {
    let spare = dir.join(format!("{id:020}.spare"));
    let live = segment_path(dir, id);
    crate::fsutil::rename(&spare, &live).map_err(|e| WalError::io(&live, "activate segment", e))?;
    fsync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::power::{self, replay::Replay};

    /// A closed segment made free (renamed, its directory not yet synced,
    /// as the WAL does when a flush covers it) and then reused as the next
    /// spare: no power cut may leave the old segment's name on the new
    /// header, which recovery would refuse as damage. Found by the
    /// power-cut test (`tests/power_cut.rs`).
    #[test]
    fn a_recycled_segment_never_shows_its_old_name_with_a_new_header() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("wal");
        crate::fsutil::create_dir_all(&dir).unwrap();
        prepare_segment(&dir, 1, 4096, None).unwrap();
        activate_segment(&dir, 1).unwrap();
        let trace = root.path().join("trace");
        power::record_to(&dir, &trace).unwrap();
        let free = dir.join(format!("{:020}.free", 1));
        crate::fsutil::rename(&segment_path(&dir, 1), &free).unwrap();
        prepare_segment(&dir, 2, 4096, Some(free)).unwrap();
        power::stop();

        let bytes = std::fs::read(&trace).unwrap();
        let mut replay = Replay::new(&bytes).unwrap();
        let mut cuts = 0;
        loop {
            for seed in 0..16 {
                let out = root.path().join(format!("cut-{cuts}"));
                replay.materialize(&out, seed).unwrap();
                cuts += 1;
                let old = segment_path(&out, 1);
                if let Ok(buf) = std::fs::read(&old) {
                    assert!(
                        check_segment(&buf, 1, true).is_ok(),
                        "cut {cuts} at record {}: {} holds another segment's header",
                        replay.records(),
                        old.display()
                    );
                }
                std::fs::remove_dir_all(&out).unwrap();
            }
            if !replay.step().unwrap() {
                break;
            }
        }
        assert!(
            cuts > 16 * 5,
            "the trace holds the rename, the header and the syncs"
        );
    }
}
