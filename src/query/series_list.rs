//! The series of a table of declared key fields, found by skipping: one
//! seek per series to its first row (and, for oldest-first keys, one
//! reverse seek to its newest), never a read of its points. It is what a
//! browser lists before it asks for data (the explorer, `GET
//! /api/v1/tables/{table}/series`); tables of open tag sets list theirs
//! from the namespace's dictionary instead (`crate::series`).

use std::collections::HashMap;
use std::sync::Arc;

use crate::codec::prefix_successor;
use crate::error::{Error, Result};
use crate::key::{FieldEncoding, FieldRef, FieldValue};
use crate::region::read::Scan;
use crate::series::FieldType;
use crate::table::{Table, TableScanner};

/// One series: the values of its identity fields (the leading key fields
/// before the time), its newest point's time in epoch ms (tables with a
/// time field), and the qualifiers of the table's first family that point
/// has.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesEntry {
    pub key: Vec<(String, FieldValue)>,
    /// The bytes every key of the series starts with (salt and identity
    /// fields), where it was first met.
    pub prefix: Vec<u8>,
    pub newest_ms: Option<u64>,
    pub fields: Vec<String>,
    /// The type of each of `fields` in that point (`None`: the cell is no
    /// typed value, as the raw row API may write).
    pub field_types: Vec<Option<FieldType>>,
}

#[derive(Debug, Default)]
pub struct SeriesListing {
    /// In key order (as an unsalted table would hold them).
    pub series: Vec<SeriesEntry>,
    /// More series exist past `limit`.
    pub truncated: bool,
}

/// Up to `limit` series of `table`. Salt spreads series over buckets, so
/// a listing cut by `limit` holds the first series of the buckets walked,
/// not the first in key order.
pub fn list_series(table: &Arc<Table>, limit: usize) -> Result<SeriesListing> {
    let schema = &table.desc.key;
    if schema.is_open_tags() {
        return Err(Error::InvalidInput(format!(
            "table `{}` has open tag sets: its series are listed by InfluxQL's SHOW SERIES through /query?db={}",
            table.desc.name, table.desc.name.namespace
        )));
    }
    let identity_fields = schema
        .fields
        .iter()
        .take_while(|f| f.encoding.is_identity())
        .count();
    if identity_fields == 0 {
        return Err(Error::InvalidInput(format!(
            "table `{}`'s key starts with `{}`, not with series fields: it has no series to list; scan it instead",
            table.desc.name,
            schema.fields.first().map_or("", |f| f.name.as_str())
        )));
    }
    if schema.md5_prefix > 0 {
        return Err(Error::InvalidInput(format!(
            "table `{}` has hashed keys (md5_prefix): a series' rows are spread by hash, so they cannot be listed by seeking; scan it instead",
            table.desc.name
        )));
    }
    let identity_len = schema.series_prefix_len();
    // The newest point is found by the key's order only when the time
    // field comes right after the series fields (not after a uniquifier).
    let time_field = schema
        .fields
        .get(identity_fields)
        .filter(|f| f.encoding.is_time())
        .map(|f| {
            (
                identity_fields,
                matches!(f.encoding, FieldEncoding::ReversedTimestamp),
            )
        });
    let family = table.desc.families.first().map(|f| f.name.as_bytes());

    let mut listing = SeriesListing::default();
    // Salt from the time (or a salt epoch) puts one series in several
    // buckets: it is listed once, where it is first met.
    let mut seen: HashMap<Vec<FieldValue>, usize> = HashMap::new();
    let mut cursor: Option<Vec<u8>> = None;
    while let Some(first) = first_row(table, cursor.take(), None, false)? {
        let decoded = (first.key.len() == schema.key_len())
            .then(|| schema.decode(&first.key).ok())
            .flatten();
        let Some(decoded) = decoded else {
            // A row this schema did not write (the raw row API takes any
            // key) is stepped over alone, not with the series after it.
            cursor = Some([first.key.as_slice(), &[0]].concat());
            continue;
        };
        let identity = &first.key[..identity_len];
        let next = prefix_successor(identity);
        // Oldest-first keys: the series' last row is its newest.
        let last = match time_field {
            Some((_, false)) => first_row(table, Some(identity.to_vec()), next.clone(), true)?
                .filter(|r| r.key.len() == schema.key_len() && schema.decode(&r.key).is_ok()),
            _ => None,
        };
        let newest = last.as_ref().unwrap_or(&first);
        let newest_ms = match time_field.map(|(i, _)| schema.decode_field_at(&newest.key, i)) {
            Some(Ok(FieldRef::Uint(t))) => schema.time_unit.to_ms_floor(t),
            _ => None,
        };
        // Cells come newest first per qualifier: the first of each is
        // the one a read sees.
        let mut fields: Vec<String> = Vec::new();
        let mut field_types: Vec<Option<FieldType>> = Vec::new();
        for c in newest
            .cells
            .iter()
            .filter(|c| family.is_none_or(|f| c.family.as_ref() == f))
        {
            let name = String::from_utf8_lossy(&c.qualifier);
            if fields.last().is_some_and(|l| *l == name) {
                continue;
            }
            fields.push(name.into_owned());
            field_types.push(crate::value::Value::decode(&c.value).map(|v| FieldType::of(&v)));
        }
        let key: Vec<(String, FieldValue)> =
            decoded.fields.into_iter().take(identity_fields).collect();
        let values: Vec<FieldValue> = key.iter().map(|(_, v)| v.clone()).collect();
        match seen.get(&values) {
            Some(&at) => {
                let kept = &mut listing.series[at];
                kept.newest_ms = kept.newest_ms.max(newest_ms);
                for (f, t) in fields.into_iter().zip(field_types) {
                    if !kept.fields.contains(&f) {
                        kept.fields.push(f);
                        kept.field_types.push(t);
                    }
                }
                let mut both: Vec<(String, Option<FieldType>)> = std::mem::take(&mut kept.fields)
                    .into_iter()
                    .zip(std::mem::take(&mut kept.field_types))
                    .collect();
                both.sort_by(|a, b| a.0.cmp(&b.0));
                (kept.fields, kept.field_types) = both.into_iter().unzip();
            }
            None if listing.series.len() == limit => {
                listing.truncated = true;
                break;
            }
            None => {
                seen.insert(values, listing.series.len());
                listing.series.push(SeriesEntry {
                    key,
                    prefix: identity.to_vec(),
                    newest_ms,
                    fields,
                    field_types,
                });
            }
        }
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    listing.series.sort_by(|a, b| {
        let values = |e: &SeriesEntry| e.key.iter().map(|(_, v)| v.clone()).collect::<Vec<_>>();
        schema.logical_cmp(&values(a), &values(b))
    });
    Ok(listing)
}

/// The first row at or after `start` (before `stop`), or the last one
/// when `reverse`.
fn first_row(
    table: &Arc<Table>,
    start: Option<Vec<u8>>,
    stop: Option<Vec<u8>>,
    reverse: bool,
) -> Result<Option<crate::cell::Row>> {
    let scan = Scan {
        start,
        stop,
        limit: Some(1),
        reverse,
        ..Scan::default()
    };
    TableScanner::new(table.clone(), scan)?.next_row()
}
