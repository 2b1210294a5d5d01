//! Small file-system helpers shared by the formats that must survive a crash.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

/// Replaces `dir/name` with `bytes` atomically: written to `name.tmp`,
/// fsynced, renamed over `name`, and the directory fsynced, so a crash leaves
/// the old file or the new one, never a mix.
pub fn replace_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp)?;
    crate::fault::fail_if_armed(crate::fault::Site::MetaWrite, &tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    crate::failpoint::hit(&format!("{}-before-rename", name.to_ascii_lowercase()));
    fs::rename(&tmp, dir.join(name))?;
    fsync_dir(dir)
}

/// fsync of a directory: makes creations, renames and deletions in it durable.
pub fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
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
