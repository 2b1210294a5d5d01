//! Small file-system helpers shared by the formats that must survive a crash.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::fault::power;

/// Replaces `dir/name` with `bytes` atomically: written to `name.tmp`,
/// fsynced, renamed over `name`, and the directory fsynced, so a crash leaves
/// the old file or the new one, never a mix.
pub fn replace_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    power::created(&tmp);
    crate::fault::fail_if_armed(crate::fault::Site::MetaWrite, &tmp)?;
    f.write_all(bytes)?;
    power::wrote(&tmp, 0, bytes);
    sync_file(&f, &tmp)?;
    drop(f);
    crate::failpoint::hit(&format!("{}-before-rename", name.to_ascii_lowercase()));
    rename(&tmp, &dir.join(name))?;
    fsync_dir(dir)
}

// Every change to a data directory goes through the functions below (or
// reports itself to `fault::power` where it cannot), so the power-cut tests
// see it.

/// fsync of a directory: makes creations, renames and deletions in it durable.
pub fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    let ticket = power::sync_begin(dir);
    File::open(dir)?.sync_all()?;
    power::sync_end(ticket);
    Ok(())
}

/// fsync of a file's data and size (not its name: see [`fsync_dir`]).
pub fn sync_file(file: &File, path: &Path) -> std::io::Result<()> {
    let ticket = power::sync_begin(path);
    file.sync_all()?;
    power::sync_end(ticket);
    Ok(())
}

/// fdatasync of a file: its data, and its size where that changed.
pub fn sync_file_data(file: &File, path: &Path) -> std::io::Result<()> {
    let ticket = power::sync_begin(path);
    file.sync_data()?;
    power::sync_end(ticket);
    Ok(())
}

pub fn rename(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::rename(from, to)?;
    power::renamed(from, to);
    Ok(())
}

pub fn remove_file(path: &Path) -> std::io::Result<()> {
    fs::remove_file(path)?;
    power::removed(path);
    Ok(())
}

pub fn remove_dir_all(path: &Path) -> std::io::Result<()> {
    fs::remove_dir_all(path)?;
    power::removed_tree(path);
    Ok(())
}

/// Creates `path` and any missing parents, durably: a new directory's
/// name is an entry in its parent, which a power cut loses unless the
/// parent is synced (files written and synced inside it would be lost
/// with it). `path`'s parent is synced even when `path` was there
/// already: an earlier run killed between the creation and the sync, or
/// another thread still before its sync, left a name that may not be
/// durable yet.
pub fn create_dir_all(path: &Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(p) = at {
        if p.as_os_str().is_empty() || p.is_dir() {
            break;
        }
        missing.push(p);
        at = p.parent();
    }
    if missing.is_empty() {
        missing.push(path);
    } else {
        fs::create_dir_all(path)?;
        power::made_dirs(path);
    }
    // Outermost first: each new directory's parent exists by then.
    for dir in missing.iter().rev() {
        if let Some(parent) = dir.parent() {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            fsync_dir(parent)?;
        }
    }
    Ok(())
}

pub fn hard_link(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::hard_link(from, to)?;
    power::linked(from, to);
    Ok(())
}

/// A checksummed container: `magic (8) · CRC32C of body (u32 LE) · body
/// length (u32 LE) · body`.
pub fn seal(magic: &[u8; 8], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 16);
    out.extend_from_slice(magic);
    out.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Checks and opens a [`seal`]ed container; the error says what is wrong and
/// at which offset.
pub fn unseal<'a>(magic: &[u8; 8], buf: &'a [u8]) -> Result<&'a [u8], (u64, &'static str)> {
    if buf.len() < 16 || &buf[..8] != magic {
        return Err((0, "bad magic"));
    }
    let crc = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(buf[12..16].try_into().expect("4 bytes")) as usize;
    let body = buf
        .get(16..16 + len)
        .ok_or((12, "length past the end of the file"))?;
    if crc32c::crc32c(body) != crc {
        return Err((8, "checksum mismatch"));
    }
    Ok(body)
}
