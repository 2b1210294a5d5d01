//! The catalog: namespaces and tables — each table's column families, key
//! schema, durability and regions.
//!
//! Stored as one file, `CATALOG` (a checksummed JSON document, see
//! [`crate::fsutil::seal`]), replaced atomically on every change with the same
//! care as a region manifest: written to a temporary name, fsynced, renamed,
//! directory fsynced. A crash leaves the old catalog or the new one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::auth::TokenRecord;
use crate::error::{Error, Result};
use crate::key::KeySchema;
use crate::objects::{ObjectError, Objects, Version};
use crate::schema::{BloomType, Durability, FamilySpec};

pub const CATALOG_FILE: &str = "CATALOG";
const MAGIC: &[u8; 8] = b"HALCAT\0\x01";
pub const DEFAULT_NAMESPACE: &str = "default";

/// `namespace:table`; a bare `table` is in `default`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableName {
    pub namespace: String,
    pub table: String,
}

pub fn check_name(what: &str, name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "{what} name must be 1..=128 of letters, digits, '_', '-', '.'. name=`{}`",
            crate::codec::quote_prefix(name)
        )))
    }
}

impl TableName {
    pub fn parse(s: &str) -> Result<TableName> {
        let (namespace, table) = match s.split_once(':') {
            Some((ns, t)) => (ns, t),
            None => (DEFAULT_NAMESPACE, s),
        };
        check_name("namespace", namespace)?;
        check_name("table", table)?;
        Ok(TableName {
            namespace: namespace.into(),
            table: table.into(),
        })
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.namespace, self.table)
    }
}

impl Serialize for TableName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TableName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        TableName::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Bytes written as lowercase hex in JSON.
mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&b.iter().map(|x| format!("{x:02x}")).collect::<String>())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        super::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

pub use crate::codec::from_hex;

/// One region of a table: rows in `[start, end)`; an empty `end` is the end
/// of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionInfo {
    pub id: u64,
    #[serde(with = "hex_bytes")]
    pub start: Vec<u8>,
    #[serde(with = "hex_bytes")]
    pub end: Vec<u8>,
}

impl RegionInfo {
    pub fn contains(&self, row: &[u8]) -> bool {
        row >= self.start.as_slice() && (self.end.is_empty() || row < self.end.as_slice())
    }
}

/// A create-table request (from config or the API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTable {
    pub name: TableName,
    pub families: Vec<FamilySpec>,
    pub key: KeySchema,
    #[serde(default)]
    pub durability: Durability,
    /// Extra split points (hex row keys), on top of one region per salt bucket.
    #[serde(default)]
    pub split_points: Vec<String>,
}

/// Everything the catalog knows about a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableDescriptor {
    pub name: TableName,
    pub families: Vec<FamilySpec>,
    pub key: KeySchema,
    pub durability: Durability,
    /// Sorted by start key, covering every row exactly once.
    pub regions: Vec<RegionInfo>,
    pub created_ms: u64,
}

impl TableDescriptor {
    /// The region holding `row`.
    pub fn region_for(&self, row: &[u8]) -> &RegionInfo {
        let i = self
            .regions
            .partition_point(|r| r.start.as_slice() <= row)
            .saturating_sub(1);
        &self.regions[i]
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct CatalogData {
    namespaces: BTreeSet<String>,
    tables: BTreeMap<String, TableDescriptor>,
    next_region_id: u64,
    /// Region splits begun and not finished. Finishing one replaces the
    /// parent by its daughters and removes the intent in the same atomic
    /// catalog update; so an intent found at start-up belongs to a split
    /// that never finished, which is undone.
    #[serde(default)]
    splits: Vec<SplitIntent>,
    /// API tokens by id (docs/security.md): their scopes and the digest
    /// of their secret. Kept here so a cluster's nodes share them.
    #[serde(default)]
    tokens: BTreeMap<String, TokenRecord>,
    /// Retention policies by namespace; a namespace without an entry has
    /// the one InfluxDB makes with a database ([`RetentionPolicies::implicit`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    retention: BTreeMap<String, RetentionPolicies>,
    /// InfluxQL continuous queries by namespace, in the order made.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    continuous_queries: BTreeMap<String, Vec<ContinuousQuery>>,
}

/// A continuous query of a namespace: its name and its statement as it
/// was created (read again at each run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinuousQuery {
    pub name: String,
    pub query: String,
}

/// The table of a database's Prometheus samples (no retention policy's
/// measurement: kept by its own family TTL).
pub const SAMPLES_TABLE: &str = "samples";

/// The retention policy every database starts with, whose tables are
/// named after their measurements alone (`<db>:<measurement>`).
pub const AUTOGEN: &str = "autogen";

/// One retention policy of a namespace (InfluxDB's): how long its
/// measurements' points are kept, which its tables' family TTL enforces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPolicy {
    pub name: String,
    /// How long points are kept, in nanoseconds; 0 is forever.
    pub duration_ns: u64,
    /// InfluxDB's shard group duration: kept and shown, as halite cuts
    /// files by its families' time windows instead.
    pub shard_group_ns: u64,
    /// Kept and shown; a node keeps one copy (a cluster's object store
    /// keeps the files).
    pub replication: u32,
}

/// The parts of a retention policy a statement gives (nanoseconds; a
/// `DURATION INF` is 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicySpec {
    pub duration_ns: Option<u64>,
    pub replication: Option<u32>,
    pub shard_duration_ns: Option<u64>,
}

/// A namespace's retention policies, in the order made, and the default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPolicies {
    pub policies: Vec<RetentionPolicy>,
    /// The policy writes and reads take when they name none; it may name
    /// a policy since dropped (InfluxDB keeps the name: such writes answer
    /// `retention policy not found`), and is empty when there is none.
    pub default: String,
}

impl RetentionPolicies {
    /// `autogen`, forever, 7-day shard groups, the default.
    pub fn implicit() -> RetentionPolicies {
        RetentionPolicies {
            policies: vec![RetentionPolicy {
                name: AUTOGEN.into(),
                duration_ns: 0,
                shard_group_ns: 7 * 24 * 3_600 * 1_000_000_000,
                replication: 1,
            }],
            default: AUTOGEN.into(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&RetentionPolicy> {
        self.policies.iter().find(|p| p.name == name)
    }

    /// Policy `name`, or the default one when `None` or empty; `Err` with
    /// the name looked for when there is no such policy.
    pub fn resolve(&self, name: Option<&str>) -> std::result::Result<&RetentionPolicy, String> {
        let name = name.filter(|n| !n.is_empty()).unwrap_or(&self.default);
        self.get(name).ok_or_else(|| name.to_string())
    }
}

/// Where a database's measurements of one retention policy live:
/// `autogen`'s in tables named after them (`<db>:<measurement>`), every
/// other policy's behind a prefix no measurement can start with
/// (`<db>:__rp.<policy>.<measurement>`, measurements never start with
/// `__`), so the same measurement in two policies is two tables.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PolicyTables {
    pub db: String,
    pub policy: String,
}

impl PolicyTables {
    pub fn new(db: &str, policy: &str) -> PolicyTables {
        PolicyTables {
            db: db.into(),
            policy: policy.into(),
        }
    }

    /// The autogen policy's tables of `db`.
    pub fn autogen(db: &str) -> PolicyTables {
        PolicyTables::new(db, AUTOGEN)
    }

    pub fn is_autogen(&self) -> bool {
        self.policy == AUTOGEN
    }

    /// The name of measurement `m`'s table (unchecked; [`TableName::parse`]
    /// checks it).
    pub fn table_text(&self, m: &str) -> String {
        if self.is_autogen() {
            m.to_string()
        } else {
            format!("__rp.{}.{m}", self.policy)
        }
    }

    pub fn table(&self, m: &str) -> Result<TableName> {
        TableName::parse(&format!("{}:{}", self.db, self.table_text(m)))
    }

    /// The measurement table `table` (of the namespace) holds in this
    /// policy; `None` when it is not one of this policy's (or is a
    /// namespace's own, such as the dictionary's `__tags`).
    pub fn measurement_of<'t>(&self, table: &'t str) -> Option<&'t str> {
        if self.is_autogen() {
            return (!table.starts_with("__")).then_some(table);
        }
        table
            .strip_prefix("__rp.")?
            .strip_prefix(self.policy.as_str())?
            .strip_prefix('.')
            .filter(|m| !m.is_empty())
    }
}

/// Whether a namespace's table `table` holds a measurement of some
/// retention policy (not one of the namespace's own, such as `__tags`).
pub fn is_measurement_table(table: &str) -> bool {
    !table.starts_with("__") || table.starts_with("__rp.")
}

/// A retention policy's name halite can name tables after: 1..=32
/// letters, digits, '_' and '-'.
pub fn check_policy_name(name: &str) -> std::result::Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "halite names a retention policy's tables after it: use 1 to 32 letters, digits, \
             '_' and '-' (not {:?})",
            crate::codec::quote_prefix(name)
        ))
    }
}

/// A region split under way: `parent` becomes `daughters[0]` (rows before
/// `at`) and `daughters[1]` (rows from `at`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitIntent {
    pub table: TableName,
    pub parent: u64,
    #[serde(with = "hex_bytes")]
    pub at: Vec<u8>,
    pub daughters: [u64; 2],
}

/// Where the catalog is kept.
#[derive(Debug)]
enum Backing {
    /// `CATALOG` in a directory: one server's.
    Dir(PathBuf),
    /// One object on the object store, shared by a cluster's nodes and
    /// replaced only conditionally on the version last read: two nodes
    /// changing it at once never lose a change (the loser reads again and
    /// applies its change to what the winner wrote).
    Objects {
        objects: Arc<Objects>,
        version: Mutex<Option<Version>>,
    },
}

/// The object a cluster's catalog is kept in.
pub const CATALOG_OBJECT: &str = "catalog/CATALOG";

/// How often a change to a shared catalog reads again after losing a race.
const ATTEMPTS: usize = 32;

/// The catalog of one server, or of a cluster's nodes.
#[derive(Debug)]
pub struct Catalog {
    backing: Backing,
    data: Mutex<CatalogData>,
}

impl Catalog {
    /// Opens the catalog in `dir`, creating an empty one (with the `default`
    /// namespace) if there is none.
    pub fn open(dir: impl AsRef<Path>) -> Result<Catalog> {
        let dir = dir.as_ref().to_path_buf();
        crate::fsutil::create_dir_all(&dir)
            .map_err(|e| Error::io(&dir, "create catalog directory", e))?;
        let path = dir.join(CATALOG_FILE);
        let data = match std::fs::read(&path) {
            Ok(buf) => {
                let corrupt = |offset: u64, what: String| Error::CatalogCorrupt {
                    path: path.clone(),
                    offset,
                    what,
                };
                let body =
                    crate::fsutil::unseal(MAGIC, &buf).map_err(|(o, w)| corrupt(o, w.into()))?;
                serde_json::from_slice(body)
                    .map_err(|e| corrupt(16, format!("invalid document: {e}")))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut d = CatalogData {
                    next_region_id: 1,
                    ..CatalogData::default()
                };
                d.namespaces.insert(DEFAULT_NAMESPACE.into());
                store(&dir, &d)?;
                d
            }
            Err(e) => return Err(Error::io(&path, "read catalog", e)),
        };
        Ok(Catalog {
            backing: Backing::Dir(dir),
            data: Mutex::new(data),
        })
    }

    /// Opens the catalog a cluster's nodes share on the object store,
    /// creating an empty one if there is none.
    pub fn open_shared(objects: Arc<Objects>) -> Result<Catalog> {
        let (data, version) = match load_object(&objects)? {
            Some(found) => found,
            None => {
                let mut d = CatalogData {
                    next_region_id: 1,
                    ..CatalogData::default()
                };
                d.namespaces.insert(DEFAULT_NAMESPACE.into());
                match objects.create(CATALOG_OBJECT, encode(&d)?) {
                    Ok(v) => (d, v),
                    // Another node made it first: take that one.
                    Err(ObjectError::Lost { .. }) => load_object(&objects)?.ok_or_else(|| {
                        Error::Internal("the shared catalog vanished while it was created".into())
                    })?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        Ok(Catalog {
            backing: Backing::Objects {
                objects,
                version: Mutex::new(Some(version)),
            },
            data: Mutex::new(data),
        })
    }

    /// Reads a shared catalog again (other nodes change it); whether it
    /// changed. A catalog in a directory is this server's alone.
    pub fn refresh(&self) -> Result<bool> {
        let Backing::Objects { objects, version } = &self.backing else {
            return Ok(false);
        };
        // Read under the lock a change holds too: a change made meanwhile
        // is never replaced by what was read before it.
        let mut data = self.data.lock();
        let Some((fresh, fresh_version)) = load_object(objects)? else {
            return Ok(false);
        };
        let mut held = version.lock();
        if held.as_ref() == Some(&fresh_version) {
            return Ok(false);
        }
        *data = fresh;
        *held = Some(fresh_version);
        Ok(true)
    }

    /// Whether the catalog is shared by a cluster's nodes.
    pub fn is_shared(&self) -> bool {
        matches!(self.backing, Backing::Objects { .. })
    }

    /// Reads the catalog in `dir` without creating or changing anything
    /// (for `halite verify`): its tables and the splits under way.
    pub fn inspect(dir: impl AsRef<Path>) -> Result<(Vec<TableDescriptor>, Vec<SplitIntent>)> {
        let path = dir.as_ref().join(CATALOG_FILE);
        let buf = std::fs::read(&path).map_err(|e| Error::io(&path, "read catalog", e))?;
        let corrupt = |offset: u64, what: String| Error::CatalogCorrupt {
            path: path.clone(),
            offset,
            what,
        };
        let body = crate::fsutil::unseal(MAGIC, &buf).map_err(|(o, w)| corrupt(o, w.into()))?;
        let data: CatalogData = serde_json::from_slice(body)
            .map_err(|e| corrupt(16, format!("invalid document: {e}")))?;
        Ok((data.tables.into_values().collect(), data.splits))
    }

    /// Applies `change` to a copy, stores it, then makes it current. A
    /// shared catalog that another node changed since it was read is read
    /// again and `change` applied to that.
    fn update<T>(&self, mut change: impl FnMut(&mut CatalogData) -> Result<T>) -> Result<T> {
        self.update_unless_same(|d| change(d).map(Some))
            .map(|out| out.expect("every change is stored"))
    }

    /// [`Catalog::update`], where `change` answering `None` leaves the
    /// catalog as it was, unwritten.
    fn update_unless_same<T>(
        &self,
        mut change: impl FnMut(&mut CatalogData) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let mut data = self.data.lock();
        let (objects, version) = match &self.backing {
            Backing::Dir(dir) => {
                let mut next = data.clone();
                let Some(out) = change(&mut next)? else {
                    return Ok(None);
                };
                store(dir, &next)?;
                *data = next;
                return Ok(Some(out));
            }
            Backing::Objects { objects, version } => (objects, version),
        };
        let mut held = version.lock();
        for _ in 0..ATTEMPTS {
            let mut next = data.clone();
            let Some(out) = change(&mut next)? else {
                return Ok(None);
            };
            let bytes = encode(&next)?;
            let written = match held.as_ref() {
                Some(v) => objects.replace(CATALOG_OBJECT, bytes, v),
                None => objects.create(CATALOG_OBJECT, bytes),
            };
            match written {
                Ok(v) => {
                    *held = Some(v);
                    *data = next;
                    return Ok(Some(out));
                }
                Err(ObjectError::Lost { .. }) => {
                    if let Some((fresh, v)) = load_object(objects)? {
                        *data = fresh;
                        *held = Some(v);
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Conflict(format!(
            "the shared catalog changed under {ATTEMPTS} attempts in a row; try again"
        )))
    }

    pub fn namespaces(&self) -> Vec<String> {
        self.data.lock().namespaces.iter().cloned().collect()
    }

    /// Whether namespace `ns` exists (without copying every name: every
    /// write and statement asks).
    pub fn has_namespace(&self, ns: &str) -> bool {
        self.data.lock().namespaces.contains(ns)
    }

    pub fn create_namespace(&self, ns: &str) -> Result<()> {
        self.create_namespace_with(ns, None)
    }

    /// Makes namespace `ns` with `policies` (else the implicit ones), in
    /// one change of the catalog.
    pub fn create_namespace_with(
        &self,
        ns: &str,
        policies: Option<RetentionPolicies>,
    ) -> Result<()> {
        check_name("namespace", ns)?;
        self.update(|d| {
            if !d.namespaces.insert(ns.into()) {
                return Err(Error::Conflict(format!(
                    "namespace exists. namespace=`{ns}`"
                )));
            }
            if let Some(p) = &policies {
                d.retention.insert(ns.into(), p.clone());
            }
            Ok(())
        })
    }

    pub fn drop_namespace(&self, ns: &str) -> Result<()> {
        if ns == DEFAULT_NAMESPACE {
            return Err(Error::InvalidInput(
                "the default namespace cannot be dropped".into(),
            ));
        }
        self.update(|d| {
            if !d.namespaces.contains(ns) {
                return Err(Error::NotFound(format!(
                    "no such namespace. namespace=`{ns}`"
                )));
            }
            if d.tables.values().any(|t| t.name.namespace == ns) {
                return Err(Error::Conflict(format!(
                    "namespace still has tables; drop them first. namespace=`{ns}`"
                )));
            }
            d.namespaces.remove(ns);
            d.retention.remove(ns);
            d.continuous_queries.remove(ns);
            Ok(())
        })
    }

    /// Every namespace's continuous queries.
    pub fn continuous_queries(&self) -> BTreeMap<String, Vec<ContinuousQuery>> {
        self.data.lock().continuous_queries.clone()
    }

    /// Changes namespace `ns`'s continuous queries through `change`, in
    /// one change of the catalog (`Ok(None)`: left as they were).
    pub fn update_continuous_queries<T>(
        &self,
        ns: &str,
        mut change: impl FnMut(&mut Vec<ContinuousQuery>) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        self.update_unless_same(|d| {
            if !d.namespaces.contains(ns) {
                return Err(Error::NotFound(format!("database not found: {ns}")));
            }
            let queries = d.continuous_queries.entry(ns.to_string()).or_default();
            let out = change(queries);
            if queries.is_empty() {
                d.continuous_queries.remove(ns);
            }
            out
        })
    }

    /// Namespace `ns`'s retention policies (the implicit `autogen` when
    /// none were ever changed).
    pub fn retention_policies(&self, ns: &str) -> RetentionPolicies {
        self.data
            .lock()
            .retention
            .get(ns)
            .cloned()
            .unwrap_or_else(RetentionPolicies::implicit)
    }

    /// Changes namespace `ns`'s retention policies through `change`, in one
    /// change of the catalog; `change` answering `Ok(None)` leaves them
    /// as they were.
    pub fn update_retention_policies<T>(
        &self,
        ns: &str,
        mut change: impl FnMut(&mut RetentionPolicies) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        self.update_unless_same(|d| {
            if !d.namespaces.contains(ns) {
                return Err(Error::NotFound(format!("database not found: {ns}")));
            }
            let mut policies = d
                .retention
                .get(ns)
                .cloned()
                .unwrap_or_else(RetentionPolicies::implicit);
            let out = change(&mut policies)?;
            if out.is_some() {
                d.retention.insert(ns.to_string(), policies);
            }
            Ok(out)
        })
    }

    /// Removes namespace `ns` and every table in it in one change (the
    /// `default` namespace stays, empty); the caller deletes the tables'
    /// regions. Writes then find no database, so none makes a table of
    /// the old one while its regions go.
    pub fn drop_namespace_and_tables(&self, ns: &str) -> Result<Vec<TableDescriptor>> {
        self.update(|d| {
            if !d.namespaces.contains(ns) {
                return Err(Error::NotFound(format!(
                    "no such namespace. namespace=`{ns}`"
                )));
            }
            let names: Vec<String> = d
                .tables
                .iter()
                .filter(|(_, t)| t.name.namespace == ns)
                .map(|(k, _)| k.clone())
                .collect();
            let dropped: Vec<TableDescriptor> =
                names.iter().filter_map(|k| d.tables.remove(k)).collect();
            d.splits.retain(|s| s.table.namespace != ns);
            if ns != DEFAULT_NAMESPACE {
                d.namespaces.remove(ns);
            }
            d.retention.remove(ns);
            d.continuous_queries.remove(ns);
            Ok(dropped)
        })
    }

    /// Keeps a token made by [`crate::auth::mint`].
    pub fn add_token(&self, record: &TokenRecord) -> Result<()> {
        self.update(|d| {
            if d.tokens.contains_key(&record.id) {
                return Err(Error::Conflict(format!(
                    "a token with this id exists; make another. id=`{}`",
                    record.id
                )));
            }
            d.tokens.insert(record.id.clone(), record.clone());
            Ok(())
        })
    }

    /// Every token, by id (their secrets' digests included).
    pub fn tokens(&self) -> Vec<TokenRecord> {
        self.data.lock().tokens.values().cloned().collect()
    }

    /// Whether any token exists.
    pub fn has_tokens(&self) -> bool {
        !self.data.lock().tokens.is_empty()
    }

    /// Calls `f` with the token named `id`, if there is one, without
    /// copying it (every authenticated request looks one up).
    pub fn with_token<T>(&self, id: &str, f: impl FnOnce(Option<&TokenRecord>) -> T) -> T {
        f(self.data.lock().tokens.get(id))
    }

    /// Revokes a token: the next request that presents it is refused.
    pub fn revoke_token(&self, id: &str) -> Result<TokenRecord> {
        self.update(|d| {
            d.tokens
                .remove(id)
                .ok_or_else(|| Error::NotFound(format!("no such token. id=`{id}`")))
        })
    }

    /// Creates a table, pre-split into one region per salt bucket plus the
    /// extra split points.
    pub fn create_table(&self, req: &CreateTable, now_ms: u64) -> Result<TableDescriptor> {
        self.create_tables_with(std::slice::from_ref(req), now_ms, None, |_| Ok(()))?
            .pop()
            .ok_or_else(|| Error::Conflict(format!("table exists. table=`{}`", req.name)))
    }

    /// Creates the tables of `reqs` the catalog does not hold yet (those
    /// `limit` leaves room for), in one change of the catalog: one
    /// rewrite, where a table at a time rewrote it per table (a write
    /// naming a thousand new measurements rewrote a growing catalog a
    /// thousand times). Answers the tables made, in
    /// `reqs`' order; one already there is left out, and a request named
    /// twice is made once. `prepare` runs on the new descriptors before
    /// the catalog names them (the store makes the regions' directories
    /// there, so a region the catalog names always has one).
    pub fn create_tables_with(
        &self,
        reqs: &[CreateTable],
        now_ms: u64,
        limit: Option<TableLimit<'_>>,
        mut prepare: impl FnMut(&[TableDescriptor]) -> Result<()>,
    ) -> Result<Vec<TableDescriptor>> {
        let mut checked = Vec::with_capacity(reqs.len());
        for req in reqs {
            checked.push((req, Self::checked_layout(req)?));
        }
        let made = self.update_unless_same(|d| {
            let mut made: Vec<TableDescriptor> = Vec::new();
            // Counted here, against the catalog being changed: writers
            // making tables at once (or nodes of a cluster, whose change
            // is applied again to the catalog another one stored) cannot
            // pass the limit together.
            let mut held: BTreeMap<String, usize> = BTreeMap::new();
            for (req, (families, splits)) in &checked {
                let key = req.name.to_string();
                if d.tables.contains_key(&key) || made.iter().any(|t| t.name == req.name) {
                    continue;
                }
                if let Some(limit) = limit {
                    let ns = &req.name.namespace;
                    let held = held.entry(ns.clone()).or_insert_with(|| {
                        d.tables
                            .values()
                            .filter(|t| &t.name.namespace == ns && (limit.counted)(&t.name.table))
                            .count()
                    });
                    if *held >= limit.most {
                        continue;
                    }
                    *held += 1;
                }
                let mut starts = vec![Vec::new()];
                starts.extend(splits.iter().cloned());
                let mut regions = Vec::with_capacity(starts.len());
                for (i, start) in starts.iter().enumerate() {
                    regions.push(RegionInfo {
                        id: d.next_region_id,
                        start: start.clone(),
                        end: starts.get(i + 1).cloned().unwrap_or_default(),
                    });
                    d.next_region_id += 1;
                }
                made.push(TableDescriptor {
                    name: req.name.clone(),
                    families: families.clone(),
                    key: req.key.clone(),
                    durability: req.durability,
                    regions,
                    created_ms: now_ms,
                });
            }
            if made.is_empty() {
                return Ok(None);
            }
            prepare(&made)?;
            for t in &made {
                // A table's namespace comes with it, whether the table is
                // created from the config or through the API.
                d.namespaces.insert(t.name.namespace.clone());
                d.tables.insert(t.name.to_string(), t.clone());
            }
            Ok(Some(made))
        })?;
        Ok(made.unwrap_or_default())
    }

    /// A table request's families (with their prefix lengths) and split
    /// points, checked.
    fn checked_layout(req: &CreateTable) -> Result<(Vec<FamilySpec>, BTreeSet<Vec<u8>>)> {
        if req.families.is_empty() {
            return Err(Error::InvalidInput(format!(
                "table `{}` needs at least one column family",
                req.name
            )));
        }
        req.key.validate()?;
        let families = with_prefix_lengths(&req.families, &req.key);
        let mut names = BTreeSet::new();
        for f in &families {
            f.descriptor().validate()?;
            if !names.insert(&f.name) {
                return Err(Error::InvalidInput(format!(
                    "family `{}` is listed twice",
                    f.name
                )));
            }
        }
        let mut splits = BTreeSet::new();
        for b in 1..req.key.buckets() {
            splits.insert(req.key.salt_bytes(b));
        }
        for p in &req.split_points {
            let key = from_hex(p).map_err(Error::InvalidInput)?;
            if !key.is_empty() {
                splits.insert(key);
            }
        }
        Ok((families, splits))
    }

    /// Whether the catalog names table `name`.
    pub fn holds(&self, name: &TableName) -> bool {
        self.data.lock().tables.contains_key(&name.to_string())
    }

    pub fn table(&self, name: &TableName) -> Result<TableDescriptor> {
        self.data
            .lock()
            .tables
            .get(&name.to_string())
            .cloned()
            .ok_or_else(|| Error::NotFound(format!("no such table. table=`{name}`")))
    }

    /// Tables, all or of one namespace, by name.
    pub fn tables(&self, namespace: Option<&str>) -> Vec<TableDescriptor> {
        self.data
            .lock()
            .tables
            .values()
            .filter(|t| namespace.is_none_or(|ns| t.name.namespace == ns))
            .cloned()
            .collect()
    }

    /// Changes family attributes or adds families. New store files use the
    /// new attributes; the next major compaction rewrites the old ones.
    pub fn alter_families(
        &self,
        name: &TableName,
        families: &[FamilySpec],
    ) -> Result<TableDescriptor> {
        self.alter(name, families, None)
    }

    /// Changes family attributes, adds families and, when given, the
    /// table's durability (HBase's `ALTER … DURABILITY`).
    pub fn alter(
        &self,
        name: &TableName,
        families: &[FamilySpec],
        durability: Option<Durability>,
    ) -> Result<TableDescriptor> {
        self.update(|d| {
            let t = d
                .tables
                .get_mut(&name.to_string())
                .ok_or_else(|| Error::NotFound(format!("no such table. table=`{name}`")))?;
            let families = with_prefix_lengths(families, &t.key);
            for f in &families {
                f.descriptor().validate()?;
            }
            for f in families {
                match t.families.iter_mut().find(|x| x.name == f.name) {
                    Some(existing) => *existing = f,
                    None => t.families.push(f),
                }
            }
            if let Some(durability) = durability {
                t.durability = durability;
            }
            Ok(t.clone())
        })
    }

    /// Starts a salt epoch: points of `name` at or after `from` (in the
    /// table's time unit) are salted into `buckets` buckets. A count above
    /// every earlier one gets a region per new bucket, carved off the end
    /// of the region that holds the old last bucket's successor; no key
    /// written so far moves, as every one has a salt below the old count.
    /// `prepare` sees the new descriptor and the ids of the new regions
    /// before the catalog names them.
    pub fn add_salt_epoch(
        &self,
        name: &TableName,
        from: u64,
        buckets: u32,
        mut prepare: impl FnMut(&TableDescriptor, &[u64]) -> Result<()>,
    ) -> Result<(TableDescriptor, Vec<u64>)> {
        self.update(|d| {
            let next_id = &mut d.next_region_id;
            let t = d
                .tables
                .get_mut(&name.to_string())
                .ok_or_else(|| Error::NotFound(format!("no such table. table=`{name}`")))?;
            let old_max = t.key.buckets();
            let key = t.key.with_salt_epoch(&name.to_string(), from, buckets)?;
            let mut regions = t.regions.clone();
            let mut new_ids = Vec::new();
            for b in old_max..buckets {
                let at = key.salt_bytes(b);
                let i = regions
                    .iter()
                    .position(|r| r.contains(&at))
                    .ok_or_else(|| Error::Internal("regions do not cover every row".into()))?;
                if regions[i].start == at {
                    continue;
                }
                let end = std::mem::replace(&mut regions[i].end, at.clone());
                regions.insert(
                    i + 1,
                    RegionInfo {
                        id: *next_id,
                        start: at,
                        end,
                    },
                );
                new_ids.push(*next_id);
                *next_id += 1;
            }
            let mut next = t.clone();
            next.key = key;
            next.regions = regions;
            prepare(&next, &new_ids)?;
            *t = next.clone();
            Ok((next, new_ids))
        })
    }

    /// Records that `parent` of `name` is about to split at row `at`, and
    /// gives its daughters their ids.
    pub fn begin_split(&self, name: &TableName, parent: u64, at: &[u8]) -> Result<SplitIntent> {
        self.update(|d| {
            let t = d
                .tables
                .get(&name.to_string())
                .ok_or_else(|| Error::NotFound(format!("no such table. table=`{name}`")))?;
            let r = t
                .regions
                .iter()
                .find(|r| r.id == parent)
                .ok_or_else(|| Error::NotFound(format!("no such region. region=`{parent}`")))?;
            if !r.contains(at) || at == r.start.as_slice() {
                return Err(Error::InvalidInput(format!(
                    "split row must lie strictly inside region {parent}"
                )));
            }
            if d.splits.iter().any(|s| s.parent == parent) {
                return Err(Error::Conflict(format!(
                    "region {parent} is already splitting"
                )));
            }
            let intent = SplitIntent {
                table: name.clone(),
                parent,
                at: at.to_vec(),
                daughters: [d.next_region_id, d.next_region_id + 1],
            };
            d.next_region_id += 2;
            d.splits.push(intent.clone());
            Ok(intent)
        })
    }

    /// The commit point of a split: the parent's range now belongs to the
    /// daughters, and the intent is gone — in one atomic update.
    pub fn finish_split(&self, intent: &SplitIntent) -> Result<TableDescriptor> {
        self.update(|d| {
            let at =
                d.splits.iter().position(|s| s == intent).ok_or_else(|| {
                    Error::NotFound(format!("no split of region {}", intent.parent))
                })?;
            d.splits.remove(at);
            let t = d.tables.get_mut(&intent.table.to_string()).ok_or_else(|| {
                Error::NotFound(format!("no such table. table=`{}`", intent.table))
            })?;
            let i = t
                .regions
                .iter()
                .position(|r| r.id == intent.parent)
                .ok_or_else(|| {
                    Error::NotFound(format!("no such region. region=`{}`", intent.parent))
                })?;
            let parent = t.regions.remove(i);
            t.regions.insert(
                i,
                RegionInfo {
                    id: intent.daughters[1],
                    start: intent.at.clone(),
                    end: parent.end,
                },
            );
            t.regions.insert(
                i,
                RegionInfo {
                    id: intent.daughters[0],
                    start: parent.start,
                    end: intent.at.clone(),
                },
            );
            Ok(t.clone())
        })
    }

    /// Forgets a split that did not finish (its daughters are leftovers).
    pub fn abandon_split(&self, intent: &SplitIntent) -> Result<()> {
        self.update(|d| {
            d.splits.retain(|s| s != intent);
            Ok(())
        })
    }

    /// Splits begun and not finished.
    pub fn pending_splits(&self) -> Vec<SplitIntent> {
        self.data.lock().splits.clone()
    }

    /// Removes a table from the catalog; the caller deletes its regions.
    pub fn drop_table(&self, name: &TableName) -> Result<TableDescriptor> {
        self.update(|d| {
            d.splits.retain(|s| s.table != *name);
            d.tables
                .remove(&name.to_string())
                .ok_or_else(|| Error::NotFound(format!("no such table. table=`{name}`")))
        })
    }

    /// Every region id the catalog knows, to find leftovers of dropped tables.
    pub fn region_ids(&self) -> BTreeSet<u64> {
        self.data
            .lock()
            .tables
            .values()
            .flat_map(|t| t.regions.iter().map(|r| r.id))
            .collect()
    }
}

/// The catalog's bytes: the JSON document, sealed with a checksum.
fn encode(data: &CatalogData) -> Result<bytes::Bytes> {
    let body = serde_json::to_vec_pretty(data)
        .map_err(|e| Error::InvalidInput(format!("catalog does not serialise: {e}")))?;
    Ok(bytes::Bytes::from(crate::fsutil::seal(MAGIC, &body)))
}

/// Reads a shared catalog and its version; `None` when there is none yet.
fn load_object(objects: &Objects) -> Result<Option<(CatalogData, Version)>> {
    let Some((buf, version)) = objects.get(CATALOG_OBJECT)? else {
        return Ok(None);
    };
    let path = PathBuf::from(CATALOG_OBJECT);
    let corrupt = |offset: u64, what: String| Error::CatalogCorrupt {
        path: path.clone(),
        offset,
        what,
    };
    let body = crate::fsutil::unseal(MAGIC, &buf).map_err(|(o, w)| corrupt(o, w.into()))?;
    let data =
        serde_json::from_slice(body).map_err(|e| corrupt(16, format!("invalid document: {e}")))?;
    Ok(Some((data, version)))
}

fn store(dir: &Path, data: &CatalogData) -> Result<()> {
    let body = serde_json::to_vec_pretty(data)
        .map_err(|e| Error::InvalidInput(format!("catalog does not serialise: {e}")))?;
    crate::fsutil::replace_atomically(dir, CATALOG_FILE, &crate::fsutil::seal(MAGIC, &body))
        .map_err(|e| Error::io(dir.join(CATALOG_FILE), "replace catalog", e))
}

/// Most tables a namespace holds, of those whose names `counted` takes:
/// a table past it is not made.
#[derive(Clone, Copy)]
pub struct TableLimit<'a> {
    pub most: usize,
    pub counted: &'a dyn Fn(&str) -> bool,
}

/// Families with a ROWPREFIX bloom and no prefix length get the key
/// schema's salt + series identity length: a series query then fixes the
/// whole prefix, and files without the series are skipped.
fn with_prefix_lengths(families: &[FamilySpec], key: &KeySchema) -> Vec<FamilySpec> {
    families
        .iter()
        .map(|f| {
            let mut f = f.clone();
            if f.bloomfilter == BloomType::RowPrefix && f.prefix_length.is_none() {
                f.prefix_length = Some(key.series_prefix_len());
            }
            f
        })
        .collect()
}
