//! A cluster's dictionary on the object store every node shares
//! (docs/cluster.md, "The shared dictionary"): no node assigns UIDs in
//! order, so none has to be asked. A name's UID is derived from the name
//! (xxh3 of its kind, a probe number and the name, 32 bits) and claimed
//! with a conditional create of `uid/<kind>/<uid>` holding the name. Every
//! node that meets the name derives the same first candidate and finds
//! either nothing there (it claims it), the name (it is the name's), or
//! another name (a collision: the next probe). So two nodes never give a
//! name two UIDs, and a cold node finds every UID again on the store.
//!
//! Field types are claimed the same way (`field/<table>/<field>` holds the
//! first type written: the one every node then holds the field to), and a
//! series is recorded once as `series/<table>/<series>` so any node lists
//! every node's series.
//!
//! Below `dict/<namespace>/` (a namespace or table named `.` or `..` is
//! `=2e` or `=2e2e` there, a part no object name may be):
//!
//! | object | holds |
//! |---|---|
//! | `uid/<kind>/<uid:08x>` (kind 1 measurement, 2 tag key, 3 tag value) | the name |
//! | `field/<table>/<hex of the name>` (or `h<hash>` past 400 bytes) | the type's byte, then the name |
//! | `series/<table>/<hex of the series>` (or `h<hash>` past 400 bytes) | the series (`KeySchema::tag_series`) |

use std::sync::Arc;

use bytes::Bytes;

use super::{FieldType, UidKind};
use crate::codec::{from_hex, to_hex};
use crate::objects::{ObjectError, Objects};

/// How many candidates a name tries before it is refused: each costs a
/// read, and at a billion names the chance of needing even four is tiny.
pub const MAX_PROBES: u32 = 16;

/// Names of fields and series longer than this are named by their hash
/// (S3 keys are at most 1,024 bytes), their bytes in the object.
const LONGEST_IN_NAME: usize = 400;

/// What a claim found.
#[derive(Debug, PartialEq, Eq)]
pub enum UidClaim {
    /// The name's UID (claimed now, or found holding the name).
    Uid(u32),
    /// Every candidate holds another name.
    Exhausted,
}

/// A namespace's entries on the object store.
pub struct SharedEntries {
    objects: Arc<Objects>,
    prefix: String,
}

/// Candidate `probe` for `name`: never 0 (no UID is 0, as none was in the
/// single-node dictionary, which counts from 1).
pub fn candidate(kind: UidKind, name: &str, probe: u32) -> u32 {
    let seed = (kind as u64) << 32 | u64::from(probe);
    let h = xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), seed) as u32;
    h.max(1)
}

/// A namespace or table name as a part of an object's name: as it is,
/// but for `.` and `..` (valid names, which no object name may hold as a
/// part), which are `=` and their hex (no name starts with `=`).
fn name_part(name: &str) -> String {
    if name == "." || name == ".." {
        format!("={}", to_hex(name.as_bytes()))
    } else {
        name.to_string()
    }
}

fn part_of(bytes: &[u8]) -> String {
    if bytes.len() <= LONGEST_IN_NAME {
        to_hex(bytes)
    } else {
        format!(
            "h{:032x}",
            xxhash_rust::xxh3::xxh3_128(bytes) // long names only
        )
    }
}

impl SharedEntries {
    pub fn new(objects: Arc<Objects>, namespace: &str) -> SharedEntries {
        SharedEntries {
            objects,
            prefix: format!("dict/{}", name_part(namespace)),
        }
    }

    fn uid_object(&self, kind: UidKind, uid: u32) -> String {
        format!("{}/uid/{}/{uid:08x}", self.prefix, kind as u8)
    }

    /// The UID of `name`: the first of its candidates that holds it or
    /// holds nothing (then claimed). `other` learns of each candidate
    /// found holding another name, and `skip` says which candidates are
    /// known to (they are not read again).
    pub fn claim_uid(
        &self,
        kind: UidKind,
        name: &str,
        skip: impl Fn(u32) -> bool,
        mut other: impl FnMut(u32, String),
    ) -> Result<UidClaim, ObjectError> {
        for probe in 0..MAX_PROBES {
            let uid = candidate(kind, name, probe);
            if skip(uid) {
                continue;
            }
            let object = self.uid_object(kind, uid);
            match self
                .objects
                .create(&object, Bytes::copy_from_slice(name.as_bytes()))
            {
                Ok(_) => return Ok(UidClaim::Uid(uid)),
                Err(ObjectError::Lost { .. }) => {}
                Err(e) => return Err(e),
            }
            // Another claim was first: the name's own (the same name,
            // from another node or an earlier run), or a collision.
            match self.objects.get(&object)? {
                Some((held, _)) if held.as_ref() == name.as_bytes() => {
                    return Ok(UidClaim::Uid(uid));
                }
                Some((held, _)) => other(uid, String::from_utf8_lossy(&held).into_owned()),
                // Created and gone: nothing deletes these objects, so a
                // store that says so is not one to build on.
                None => {
                    return Err(ObjectError::Lost {
                        name: object.clone(),
                    });
                }
            }
        }
        Ok(UidClaim::Exhausted)
    }

    /// The name behind `uid`, when some node claimed it.
    pub fn name(&self, kind: UidKind, uid: u32) -> Result<Option<String>, ObjectError> {
        Ok(self
            .objects
            .get(&self.uid_object(kind, uid))?
            .map(|(b, _)| String::from_utf8_lossy(&b).into_owned()))
    }

    fn field_dir(&self, table: &str) -> String {
        format!("{}/field/{}", self.prefix, name_part(table))
    }

    /// The type field `field` of `table` has: `ty` when this claim was
    /// the first, else the one claimed before.
    pub fn claim_field(
        &self,
        table: &str,
        field: &str,
        ty: FieldType,
    ) -> Result<FieldType, ObjectError> {
        let object = format!("{}/{}", self.field_dir(table), part_of(field.as_bytes()));
        let mut body = vec![ty as u8];
        body.extend_from_slice(field.as_bytes());
        match self.objects.create(&object, Bytes::from(body)) {
            Ok(_) => return Ok(ty),
            Err(ObjectError::Lost { .. }) => {}
            Err(e) => return Err(e),
        }
        match self.objects.get(&object)? {
            Some((held, _)) => match held.first().copied().and_then(FieldType::from_byte) {
                Some(had) => Ok(had),
                None => Err(ObjectError::Lost { name: object }),
            },
            None => Err(ObjectError::Lost { name: object }),
        }
    }

    /// The fields of `table` every node recorded, with their types;
    /// `known` names the ones not to read again.
    pub fn fields(
        &self,
        table: &str,
        known: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, FieldType)>, ObjectError> {
        let mut out = Vec::new();
        for (object, _) in self.objects.list(&self.field_dir(table))? {
            let part = object.rsplit('/').next().unwrap_or("");
            let named = from_hex(part).ok().and_then(|b| String::from_utf8(b).ok());
            if named.as_deref().is_some_and(&known) {
                continue;
            }
            let Some((held, _)) = self.objects.get(&object)? else {
                continue;
            };
            let (Some(ty), Ok(name)) = (
                held.first().copied().and_then(FieldType::from_byte),
                std::str::from_utf8(&held[1..]),
            ) else {
                continue;
            };
            out.push((name.to_string(), ty));
        }
        Ok(out)
    }

    fn series_dir(&self, table: &str) -> String {
        format!("{}/series/{}", self.prefix, name_part(table))
    }

    /// Records `series` of `table` (idempotent).
    pub fn record_series(&self, table: &str, series: &[u8]) -> Result<(), ObjectError> {
        let object = format!("{}/{}", self.series_dir(table), part_of(series));
        match self.objects.create(&object, Bytes::copy_from_slice(series)) {
            Ok(_) | Err(ObjectError::Lost { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every series of `table` any node recorded; `known` says which
    /// need not be read (a series named by its hash is read from its
    /// object unless known by that name).
    pub fn series(
        &self,
        table: &str,
        known: impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<Vec<u8>>, ObjectError> {
        let mut out = Vec::new();
        for (object, _) in self.objects.list(&self.series_dir(table))? {
            let part = object.rsplit('/').next().unwrap_or("");
            if let Ok(series) = from_hex(part) {
                if !known(&series) {
                    out.push(series);
                }
                continue;
            }
            if let Some((held, _)) = self.objects.get(&object)?
                && !known(&held)
            {
                out.push(held.to_vec());
            }
        }
        Ok(out)
    }
}
