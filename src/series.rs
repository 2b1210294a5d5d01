//! Open tag sets: a namespace's UID dictionary (metric names, tag keys and
//! tag values as 4-byte UIDs, as OpenTSDB's `tsdb-uid`), its tables' field
//! types and their series, kept in the namespace's own table `__tags`
//! (SYNC_WAL, one region) and in memory once loaded.
//!
//! The rule that keeps a crash from giving one UID two names: a UID, a
//! field type or a series entry is durable before any point that uses it
//! is submitted. The encoder assigns in memory and notes that it used
//! something not yet durable; the write path then calls
//! [`Dictionary::make_durable`], one synced write of everything pending,
//! before it submits the points. A UID assigned in memory and lost in a
//! crash was used by no durable point, so handing it out again is safe.
//! `docs/row-keys.md` ("Open tag sets") has the layouts.
//!
//! In cluster mode the entries live on the object store every node shares
//! instead (`series/shared.rs`): a UID is derived from its name and
//! claimed there, so every node gives a name the same UID.

pub mod shared;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, RwLock};

use crate::catalog::{CreateTable, TableName};
use crate::cell::{MAX_ROW_LEN, RowMutation};
use crate::codec::quote_prefix;
use crate::error::{Error, Result};
use crate::key::{FieldEncoding, KeyField, KeySchema, decode_tag_series};
use crate::region::read::Scan;
use crate::schema::{Durability, FamilySpec};
use crate::store::Store;
use crate::value::Value;

/// The table of each namespace that holds its dictionary and series.
pub const TAGS_TABLE: &str = "__tags";
const FAMILY: &[u8] = b"d";
const QUALIFIER: &[u8] = b"v";
/// Cells of `__tags` are written again unchanged (a replay, a second
/// make_durable): one fixed version makes that a no-op.
const VERSION: u64 = 1;

/// The longest name (a metric, tag key or tag value) the dictionary
/// holds: its `u` row is the name behind two bytes, and a row key is at
/// most [`MAX_ROW_LEN`] bytes.
pub const MAX_NAME_LEN: usize = MAX_ROW_LEN - 2;

/// The longest field name a table of open tag sets called `table` may
/// have: its `f` row is the name behind the table's.
pub fn max_field_name_len(table: &str) -> usize {
    MAX_ROW_LEN - 2 - table.len()
}

/// A name too long for the dictionary to hold. Checked before anything
/// is recorded: a refused point leaves no entry behind, which would make
/// every later write of something new fail with it.
/// Why a name got no UID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameRefused {
    #[error(transparent)]
    TooLong(#[from] NameTooLong),
    /// Cluster mode: every candidate UID of the name holds another name.
    #[error(
        "{what} `{}` found another name at each of its {} candidate UIDs in the shared dictionary",
        quote_prefix(name),
        shared::MAX_PROBES
    )]
    NoUid { what: &'static str, name: String },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} `{}` is {len} bytes, over the limit of {max}",
    quote_prefix(name)
)]
pub struct NameTooLong {
    pub what: &'static str,
    pub name: String,
    pub len: usize,
    pub max: usize,
}

/// Why a point's fields cannot be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsRefused {
    /// InfluxDB's field type conflict, in its words.
    #[error("{0}")]
    TypeConflict(String),
    #[error(transparent)]
    NameTooLong(#[from] NameTooLong),
}

/// What a UID names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UidKind {
    Metric = 1,
    TagKey = 2,
    TagValue = 3,
}

impl UidKind {
    /// What a name of this kind is called in messages.
    fn noun(self) -> &'static str {
        match self {
            UidKind::Metric => "measurement",
            UidKind::TagKey => "tag key",
            UidKind::TagValue => "tag value",
        }
    }

    fn from_byte(b: u8) -> Option<UidKind> {
        match b {
            1 => Some(UidKind::Metric),
            2 => Some(UidKind::TagKey),
            3 => Some(UidKind::TagValue),
            _ => None,
        }
    }
}

/// A field's type, fixed by its first point (InfluxDB refuses a point
/// whose field has another type than the measurement's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    Float = 1,
    Integer = 2,
    Unsigned = 3,
    Boolean = 4,
    String = 5,
}

impl FieldType {
    pub fn of(v: &Value) -> FieldType {
        match v {
            Value::Float(_) => FieldType::Float,
            Value::Int(_) => FieldType::Integer,
            Value::Uint(_) => FieldType::Unsigned,
            Value::Bool(_) => FieldType::Boolean,
            Value::Str(_) => FieldType::String,
        }
    }

    fn from_byte(b: u8) -> Option<FieldType> {
        match b {
            1 => Some(FieldType::Float),
            2 => Some(FieldType::Integer),
            3 => Some(FieldType::Unsigned),
            4 => Some(FieldType::Boolean),
            5 => Some(FieldType::String),
            _ => None,
        }
    }

    /// InfluxDB's name for it (`SHOW FIELD KEYS`, type conflicts).
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Float => "float",
            FieldType::Integer => "integer",
            FieldType::Unsigned => "unsigned",
            FieldType::Boolean => "boolean",
            FieldType::String => "string",
        }
    }
}

/// Every namespace's dictionary, each loaded on first use.
#[derive(Default)]
pub struct TagSets {
    namespaces: Mutex<HashMap<String, Arc<Dictionary>>>,
}

impl TagSets {
    pub fn new() -> TagSets {
        TagSets::default()
    }

    /// The dictionary of `namespace`, read from its `__tags` table (made
    /// the first time).
    pub fn dictionary(&self, store: &Store, namespace: &str) -> Result<Arc<Dictionary>> {
        let mut namespaces = self.namespaces.lock();
        // A dictionary whose table was dropped (with its namespace's
        // tables) is read again from a new one.
        if let Some(d) = namespaces.get(namespace)
            && (d.shared.is_some() || store.table(&d.table).is_ok())
            && !d.broken.load(Ordering::Acquire)
        {
            return Ok(d.clone());
        }
        let d = Arc::new(Dictionary::open(store, namespace)?);
        namespaces.insert(namespace.to_string(), d.clone());
        Ok(d)
    }

    /// Forgets a namespace's dictionary (its tables were dropped).
    pub fn forget(&self, namespace: &str) {
        self.namespaces.lock().remove(namespace);
    }
}

/// One namespace's UIDs, field types and series.
pub struct Dictionary {
    table: TableName,
    /// In cluster mode: where the entries are kept instead of `table`.
    shared: Option<shared::SharedEntries>,
    state: RwLock<State>,
    /// Something was assigned that is not durable yet.
    dirty: AtomicBool,
    /// One make_durable at a time.
    persist: Mutex<()>,
    /// Cluster mode: a UID taken while the object store could not be
    /// reached was another name's there. Writes may have encoded points
    /// with it: every make_durable fails, and [`TagSets::dictionary`]
    /// opens the namespace's dictionary anew.
    broken: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Name → UID, one map per kind (indexed by kind).
    uids: [FastMap<Box<str>, Assigned>; 4],
    names: FastMap<(UidKind, u32), Box<str>>,
    /// The next UID of each kind (index by kind).
    next: [u32; 4],
    /// Each table's fields: type, and whether that is durable.
    fields: FastMap<Box<str>, FieldTypes>,
    /// Series of each table (metric, tag count, tags: `KeySchema::tag_series`).
    series: FastMap<Box<str>, FastMap<Box<[u8]>, bool>>,
    /// Series recorded since the dictionary opened: a resolved list made
    /// at an older count misses some.
    series_added: u64,
    /// Each table's series with their names resolved, sorted, and the
    /// `series_added` they were made at: every statement reads them, and
    /// resolving thousands of series' names each time cost more than
    /// reading a small answer.
    resolved: HashMap<Box<str>, (u64, Arc<SeriesList>)>,
    /// Per table, series as line protocol writes them (measurement and
    /// tags, escapes and all) with their metric and sorted tag UIDs, once
    /// all of it is durable: a point of a known series then costs one
    /// lookup instead of one per name (21 for a TSBS point, a tenth of
    /// the server's CPU at 4,000 hosts).
    written: FastMap<Box<str>, FastMap<Box<str>, WrittenSeries>>,
    written_count: usize,
    /// The version each table's field and series rows are written at
    /// (absent: [`VERSION`]). Forgetting a table (its measurement was
    /// dropped) deletes its rows at their version and raises it, so the
    /// rows of a measurement written again are not under those markers.
    generations: FastMap<Box<str>, u64>,
}

struct WrittenSeries {
    metric: u32,
    tags: Box<[(u32, u32)]>,
}

/// Series texts remembered at most, over all tables of a namespace (a
/// few hundred bytes each); past it, points of series not remembered
/// resolve their names one by one, as before.
const WRITTEN_SERIES_MAX: usize = 100_000;

type FieldTypes = FastMap<Box<str>, (FieldType, bool)>;

/// Every point looks up its measurement, each tag key and value, its
/// series and its fields here (about 23 lookups for a TSBS point), and
/// SipHash was 7.5 % of ingest CPU at 4,000 hosts. foldhash is several
/// times faster on short strings and still seeds itself per process, so
/// tag values chosen to collide cannot be precomputed.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Clone, Copy)]
struct Assigned {
    uid: u32,
    durable: bool,
}

/// A series of a table with its names: its bytes (`KeySchema::tag_series`),
/// metric and tags by tag key.
#[derive(Clone)]
pub struct NamedSeries {
    pub key: Vec<u8>,
    pub metric: String,
    pub tags: BTreeMap<String, String>,
}

/// A table's series, names resolved, sorted by metric and tags, with an
/// index by tag value and the set of tag keys, each made the first time a
/// statement asks for it.
pub struct SeriesList {
    series: Box<[NamedSeries]>,
    by_tag: std::sync::OnceLock<TagIndex>,
    tag_keys: std::sync::OnceLock<BTreeSet<String>>,
}

/// (tag key, value) → positions of the series with it, in order.
type TagIndex = FastMap<(Box<str>, Box<str>), Vec<u32>>;

impl SeriesList {
    pub fn new(series: Vec<NamedSeries>) -> Self {
        SeriesList {
            series: series.into(),
            by_tag: std::sync::OnceLock::new(),
            tag_keys: std::sync::OnceLock::new(),
        }
    }

    /// Every tag key of the series. Gathered once per list: comparing the
    /// tag keys of 4,000 series took a quarter of a one-host `SELECT *`
    /// (TSBS's high-cpu-1), and a list lasts until a series is added.
    pub fn tag_keys(&self) -> &BTreeSet<String> {
        self.tag_keys.get_or_init(|| {
            // Series mostly share one set of tag keys: a series with the
            // same keys as the one before adds nothing and costs a
            // comparison, not an insert per key.
            let mut keys: BTreeSet<&str> = BTreeSet::new();
            let mut last: Option<&BTreeMap<String, String>> = None;
            for s in &self.series {
                if last.is_some_and(|l| l.keys().eq(s.tags.keys())) {
                    continue;
                }
                keys.extend(s.tags.keys().map(String::as_str));
                last = Some(&s.tags);
            }
            keys.into_iter().map(str::to_owned).collect()
        })
    }

    /// The positions, in order, of the series whose tag `key` is `value`
    /// (a statement naming one host of thousands looks it up here rather
    /// than comparing every series' tags).
    pub fn with_tag(&self, key: &str, value: &str) -> &[u32] {
        let index = self.by_tag.get_or_init(|| {
            let mut index = TagIndex::default();
            for (i, s) in self.series.iter().enumerate() {
                for (k, v) in &s.tags {
                    index
                        .entry((k.as_str().into(), v.as_str().into()))
                        .or_default()
                        .push(i as u32);
                }
            }
            index
        });
        index
            .get(&(Box::<str>::from(key), Box::<str>::from(value)))
            .map_or(&[], Vec::as_slice)
    }
}

impl std::ops::Deref for SeriesList {
    type Target = [NamedSeries];

    fn deref(&self) -> &[NamedSeries] {
        &self.series
    }
}

/// What resolving a point's series found.
#[derive(Debug, PartialEq, Eq)]
pub enum SeriesOutcome {
    Known,
    /// New to the table (or not durable yet): make_durable before writing.
    Pending,
    /// New, and the table holds `series_limit` series already.
    OverLimit,
}

fn tags_table_request(namespace: &str) -> Result<CreateTable> {
    Ok(CreateTable {
        name: TableName::parse(&format!("{namespace}:{TAGS_TABLE}"))?,
        families: vec![FamilySpec::named("d")],
        // Rows are written whole (`Store::write`), never through a key
        // schema; the schema only has to be valid.
        key: KeySchema {
            fields: vec![KeyField {
                name: "row".into(),
                encoding: FieldEncoding::String { width: 1 },
            }],
            salt: None,
            md5_prefix: 0,
            time_unit: Default::default(),
            tags: None,
        },
        durability: Durability::SyncWal,
        split_points: Vec::new(),
    })
}

/// The row that raises `table`'s generation to `generation` (its version,
/// so the newest raise is the one read).
fn generation_row(table: &str, generation: u64) -> RowMutation {
    let mut row = vec![b'g'];
    table_part(&mut row, table);
    RowMutation::new(row).put(
        FAMILY,
        QUALIFIER,
        generation,
        generation.to_be_bytes().to_vec(),
    )
}

fn table_part(out: &mut Vec<u8>, table: &str) {
    out.push(table.len() as u8);
    out.extend_from_slice(table.as_bytes());
}

/// Splits `[len][table][rest]`.
fn split_table(b: &[u8]) -> Option<(&str, &[u8])> {
    let n = *b.first()? as usize;
    let name = std::str::from_utf8(b.get(1..1 + n)?).ok()?;
    Some((name, &b[1 + n..]))
}

impl Dictionary {
    /// Whether the dictionary is a cluster's, on the object store.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// The table the dictionary is kept in (`<namespace>:__tags`).
    pub fn table(&self) -> &TableName {
        &self.table
    }

    fn open(store: &Store, namespace: &str) -> Result<Dictionary> {
        let req = tags_table_request(namespace)?;
        let table = req.name.clone();
        if let Some(objects) = store.objects() {
            return Ok(Dictionary::shared(objects.clone(), table));
        }
        if store.table(&table).is_err() {
            match store.create_table(&req) {
                Ok(_) | Err(Error::Conflict(_)) => {}
                Err(e) => return Err(e),
            }
        }
        let mut state = State {
            next: [1; 4],
            ..State::default()
        };
        let mut scanner = store.scanner(&table, &Scan::default())?;
        while let Some(row) = scanner.next_row()? {
            let Some(value) = row.cells.first().map(|c| c.value.clone()) else {
                continue;
            };
            state.load_row(&row.key, &value);
        }
        Ok(Dictionary {
            table,
            shared: None,
            state: RwLock::new(state),
            dirty: AtomicBool::new(false),
            persist: Mutex::new(()),
            broken: AtomicBool::new(false),
        })
    }

    /// A cluster's dictionary of the namespace of `table`: read from the
    /// object store as it is met (a cold node needs none of it before its
    /// first write).
    fn shared(objects: Arc<crate::objects::Objects>, table: TableName) -> Dictionary {
        Dictionary {
            shared: Some(shared::SharedEntries::new(objects, &table.namespace)),
            table,
            state: RwLock::new(State {
                next: [1; 4],
                ..State::default()
            }),
            dirty: AtomicBool::new(false),
            persist: Mutex::new(()),
            broken: AtomicBool::new(false),
        }
    }

    /// The UID of `name`, assigned (in memory) when new; `true` with it
    /// when it is not durable yet. The caller has checked the name's
    /// length ([`MAX_NAME_LEN`]).
    fn uid(&self, kind: UidKind, name: &str) -> std::result::Result<(u32, bool), NameRefused> {
        if let Some(a) = self.state.read().uids[kind as usize].get(name) {
            return Ok((a.uid, !a.durable));
        }
        if let Some(shared) = &self.shared {
            return self.shared_uid(shared, kind, name);
        }
        let mut state = self.state.write();
        if let Some(a) = state.uids[kind as usize].get(name) {
            return Ok((a.uid, !a.durable));
        }
        let uid = state.next[kind as usize];
        state.next[kind as usize] += 1;
        state.uids[kind as usize].insert(
            name.into(),
            Assigned {
                uid,
                durable: false,
            },
        );
        state.names.insert((kind, uid), name.into());
        self.dirty.store(true, Ordering::Release);
        Ok((uid, true))
    }

    /// [`Dictionary::uid`] in cluster mode: claimed on the object store
    /// now, so it is durable when returned. When the store cannot be
    /// reached the first candidate no other name is known to hold is
    /// taken as not durable yet: make_durable claims it, and fails the
    /// write should it turn out another's.
    fn shared_uid(
        &self,
        shared: &shared::SharedEntries,
        kind: UidKind,
        name: &str,
    ) -> std::result::Result<(u32, bool), NameRefused> {
        let held_by_another = |uid: u32| self.state.read().claimed_by_another(kind, uid, name);
        let learn = |uid: u32, held: String| self.state.write().learn(kind, uid, held.into());
        let (uid, durable) = match shared.claim_uid(kind, name, held_by_another, learn) {
            Ok(shared::UidClaim::Uid(uid)) => (uid, true),
            Ok(shared::UidClaim::Exhausted) => {
                return Err(NameRefused::NoUid {
                    what: kind.noun(),
                    name: name.to_string(),
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "claiming a UID on the object store failed; the write waits for it");
                let uid = (0..shared::MAX_PROBES)
                    .map(|p| shared::candidate(kind, name, p))
                    .find(|&u| !held_by_another(u))
                    .ok_or_else(|| NameRefused::NoUid {
                        what: kind.noun(),
                        name: name.to_string(),
                    })?;
                (uid, false)
            }
        };
        let mut state = self.state.write();
        if let Some(a) = state.uids[kind as usize].get(name) {
            return Ok((a.uid, !a.durable));
        }
        state.uids[kind as usize].insert(name.into(), Assigned { uid, durable });
        state.names.insert((kind, uid), name.into());
        if !durable {
            self.dirty.store(true, Ordering::Release);
        }
        Ok((uid, !durable))
    }

    /// The UIDs of `names()` in order, each with whether it is new (as
    /// [`Dictionary::uid`]), into `out`. A point asks for about 21; all
    /// known ones are read under one shared lock, since taking it once a
    /// name made its cache line bounce between the writer threads. A name
    /// over [`MAX_NAME_LEN`] refuses them all, before any is assigned.
    pub fn uids_into<'n, I>(
        &self,
        names: impl Fn() -> I,
        out: &mut Vec<(u32, bool)>,
    ) -> std::result::Result<(), NameRefused>
    where
        I: Iterator<Item = (UidKind, &'n str)>,
    {
        out.clear();
        {
            let state = self.state.read();
            for (kind, name) in names() {
                match state.uids[kind as usize].get(name) {
                    Some(a) => out.push((a.uid, !a.durable)),
                    None => break,
                }
            }
        }
        if let Some((kind, name)) = names()
            .skip(out.len())
            .find(|(_, name)| name.len() > MAX_NAME_LEN)
        {
            out.clear();
            return Err(NameRefused::TooLong(NameTooLong {
                what: kind.noun(),
                name: name.to_string(),
                len: name.len(),
                max: MAX_NAME_LEN,
            }));
        }
        for (kind, name) in names().skip(out.len()) {
            match self.uid(kind, name) {
                Ok(uid) => out.push(uid),
                Err(e) => {
                    out.clear();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The UIDs of `names()` in order into `out`, assigning none: `false`
    /// (and `out` cut short) at the first name not in the dictionary.
    pub fn known_uids_into<'n>(
        &self,
        names: impl Iterator<Item = (UidKind, &'n str)>,
        out: &mut Vec<(u32, bool)>,
    ) -> bool {
        out.clear();
        let state = self.state.read();
        for (kind, name) in names {
            match state.uids[kind as usize].get(name) {
                Some(a) => out.push((a.uid, !a.durable)),
                None => return false,
            }
        }
        true
    }

    /// Whether `table` holds `series`, durable or not.
    pub fn has_series(&self, table: &str, series: &[u8]) -> bool {
        self.state
            .read()
            .series
            .get(table)
            .is_some_and(|s| s.contains_key(series))
    }

    /// The metric UID of the series `text` writes in `table`, its tag
    /// UIDs (sorted) into `tags`, when [`Dictionary::remember_written`]
    /// was told of it.
    pub fn written_series(
        &self,
        table: &str,
        text: &str,
        tags: &mut Vec<(u32, u32)>,
    ) -> Option<u32> {
        let state = self.state.read();
        let series = state.written.get(table)?.get(text)?;
        tags.clear();
        tags.extend_from_slice(&series.tags);
        Some(series.metric)
    }

    /// Remembers that `text` writes the series `series` (of `metric` and
    /// `tags`, sorted) in `table`. Only for a series whose names' UIDs and
    /// record are durable, and a text whose tags passed the table's
    /// checks: a remembered text is taken as it is.
    pub fn remember_written(
        &self,
        table: &str,
        text: &str,
        series: &[u8],
        metric: u32,
        tags: &[(u32, u32)],
    ) {
        let mut state = self.state.write();
        if state.written_count >= WRITTEN_SERIES_MAX {
            return;
        }
        // Still recorded and durable: a DROP or DELETE may have forgotten
        // it since the writer looked, and a remembered text is never
        // looked up again.
        if state.series.get(table).and_then(|s| s.get(series)) != Some(&true) {
            return;
        }
        let series = WrittenSeries {
            metric,
            tags: tags.into(),
        };
        let added = match state.written.get_mut(table) {
            Some(of_table) => of_table.insert(text.into(), series).is_none(),
            None => {
                let mut of_table = FastMap::default();
                of_table.insert(text.into(), series);
                state.written.insert(table.into(), of_table);
                true
            }
        };
        state.written_count += usize::from(added);
    }

    /// The name of a UID (in cluster mode read from the object store
    /// when this node has not met it).
    pub fn name(&self, kind: UidKind, uid: u32) -> Option<String> {
        if let Some(n) = self.state.read().names.get(&(kind, uid)) {
            return Some(n.to_string());
        }
        let held = self.shared.as_ref()?.name(kind, uid).ok()??;
        self.state.write().learn(kind, uid, held.as_str().into());
        Some(held)
    }

    /// Cluster mode: learns the series and fields of `table` every node
    /// recorded (and the names they use) from the object store, so the
    /// listings below hold them all. Nothing to do on a single node.
    pub fn refresh(&self, table: &str) -> Result<()> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let series = shared.series(table, |s| {
            self.state
                .read()
                .series
                .get(table)
                .is_some_and(|t| t.contains_key(s))
        })?;
        let fields = shared.fields(table, |f| {
            self.state
                .read()
                .fields
                .get(table)
                .is_some_and(|t| t.contains_key(f))
        })?;
        let mut unnamed = BTreeSet::new();
        {
            let state = self.state.read();
            for s in &series {
                let Some((metric, tags)) = decode_tag_series(s) else {
                    continue;
                };
                let uids = std::iter::once((UidKind::Metric, metric)).chain(
                    tags.into_iter()
                        .flat_map(|(k, v)| [(UidKind::TagKey, k), (UidKind::TagValue, v)]),
                );
                unnamed.extend(uids.filter(|u| !state.names.contains_key(u)));
            }
        }
        let mut named = Vec::with_capacity(unnamed.len());
        for (kind, uid) in unnamed {
            if let Some(name) = shared.name(kind, uid)? {
                named.push((kind, uid, name));
            }
        }
        let mut state = self.state.write();
        for (kind, uid, name) in named {
            state.learn(kind, uid, name.into());
        }
        let of_table = state.series.entry(table.into()).or_default();
        let mut added = 0;
        for s in series {
            if decode_tag_series(&s).is_some() && of_table.insert(s.into(), true).is_none() {
                added += 1;
            }
        }
        state.series_added += added;
        let of_table = state.fields.entry(table.into()).or_default();
        for (field, ty) in fields {
            of_table.entry(field.into()).or_insert((ty, true));
        }
        Ok(())
    }

    /// Checks the types of a point's `fields` against the table's and
    /// records the new ones, all or none: `Ok(true)` when a record it
    /// relies on is not durable yet; the error is InfluxDB's field type
    /// conflict.
    pub fn fields<'f>(
        &self,
        table: &str,
        measurement: &str,
        fields: impl Iterator<Item = (&'f str, FieldType)> + Clone,
    ) -> std::result::Result<bool, FieldsRefused> {
        let conflict = |field: &str, ty: FieldType, had: FieldType| {
            FieldsRefused::TypeConflict(format!(
                "field type conflict: input field \"{}\" on measurement \"{}\" is type {}, already exists as type {}",
                quote_prefix(field),
                quote_prefix(measurement),
                ty.name(),
                had.name()
            ))
        };
        {
            let state = self.state.read();
            let known = state.fields.get(table);
            let (mut missing, mut undurable) = (false, false);
            for (field, ty) in fields.clone() {
                match known.and_then(|f| f.get(field)) {
                    Some(&(had, _)) if had != ty => return Err(conflict(field, ty, had)),
                    Some(&(_, durable)) => undurable |= !durable,
                    None => missing = true,
                }
            }
            if !missing {
                return Ok(undurable);
            }
        }
        // A new name too long to record refuses the point (a known one was
        // checked when it was recorded).
        let max = max_field_name_len(table);
        if let Some((field, _)) = fields.clone().find(|(f, _)| f.len() > max) {
            return Err(NameTooLong {
                what: "field name",
                name: field.to_string(),
                len: field.len(),
                max,
            }
            .into());
        }
        // One name twice in a point with two types, one of them new, is
        // refused before either is recorded (when both are known, one
        // conflicts above).
        for (i, (field, ty)) in fields.clone().enumerate() {
            if let Some((_, other)) = fields
                .clone()
                .skip(i + 1)
                .find(|(f, t)| *f == field && *t != ty)
            {
                return Err(conflict(field, other, ty));
            }
        }
        // Cluster mode: the first type any node claimed is the field's.
        let mut claimed = Vec::new();
        if let Some(shared) = &self.shared {
            for (field, ty) in fields.clone() {
                let known = self
                    .state
                    .read()
                    .fields
                    .get(table)
                    .is_some_and(|f| f.contains_key(field));
                if known {
                    continue;
                }
                match shared.claim_field(table, field, ty) {
                    Ok(had) => {
                        claimed.push(field);
                        if had != ty {
                            self.state
                                .write()
                                .fields
                                .entry(table.into())
                                .or_default()
                                .insert(field.into(), (had, true));
                            return Err(conflict(field, ty, had));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "claiming a field's type on the object store failed; the write waits for it");
                    }
                }
            }
        }
        let mut state = self.state.write();
        let of_table = state.fields.entry(table.into()).or_default();
        // Checked again: another writer may have recorded one meanwhile.
        for (field, ty) in fields.clone() {
            if let Some(&(had, _)) = of_table.get(field)
                && had != ty
            {
                return Err(conflict(field, ty, had));
            }
        }
        let mut undurable = false;
        for (field, ty) in fields {
            let (had, durable) = *of_table.entry(field.into()).or_insert_with(|| {
                let durable = claimed.contains(&field);
                if !durable {
                    self.dirty.store(true, Ordering::Release);
                }
                (ty, durable)
            });
            // Refused before the lock; kept so no path records half a point.
            if had != ty {
                return Err(conflict(field, ty, had));
            }
            undurable |= !durable;
        }
        Ok(undurable)
    }

    /// Records `series` (`KeySchema::tag_series`) of `table` unless it
    /// would pass `limit` series.
    pub fn series(&self, table: &str, series: &[u8], limit: u64) -> SeriesOutcome {
        if let Some(durable) = self
            .state
            .read()
            .series
            .get(table)
            .and_then(|s| s.get(series).copied())
        {
            return if durable {
                SeriesOutcome::Known
            } else {
                SeriesOutcome::Pending
            };
        }
        let mut state = self.state.write();
        let of_table = state.series.entry(table.into()).or_default();
        if let Some(&durable) = of_table.get(series) {
            return if durable {
                SeriesOutcome::Known
            } else {
                SeriesOutcome::Pending
            };
        }
        if of_table.len() as u64 >= limit {
            return SeriesOutcome::OverLimit;
        }
        of_table.insert(series.into(), false);
        state.series_added += 1;
        self.dirty.store(true, Ordering::Release);
        SeriesOutcome::Pending
    }

    /// Series the table holds.
    pub fn series_count(&self, table: &str) -> usize {
        self.state.read().series.get(table).map_or(0, FastMap::len)
    }

    /// Writes everything assigned but not durable yet to `__tags` in one
    /// synced write, then marks it durable. Points that used any of it may
    /// be submitted once this returned Ok.
    pub fn make_durable(&self, store: &Store) -> Result<()> {
        self.make_durable_with(|rows| store.write(&self.table, rows, None))
    }

    /// [`Dictionary::make_durable`], the `__tags` rows written by `write`.
    fn make_durable_with(&self, write: impl FnOnce(Vec<RowMutation>) -> Result<()>) -> Result<()> {
        // Under the lock even when nothing looks pending: a write of what
        // the caller used may be under way in another thread, and the
        // caller's points must wait for it.
        let _one = self.persist.lock();
        if self.broken.load(Ordering::Acquire) {
            return Err(Error::Unavailable(format!(
                "the shared dictionary of namespace `{}` gave a UID another node holds while the \
                 object store could not be reached; try the write again",
                self.table.namespace
            )));
        }
        if !self.dirty.load(Ordering::Acquire) {
            return Ok(());
        }
        // Cleared before collecting: what is assigned from here on sets it
        // again and is written by the next call.
        self.dirty.store(false, Ordering::Release);
        let mut rows = Vec::new();
        let (mut uids, mut fields, mut series) = (Vec::new(), Vec::new(), Vec::new());
        {
            let state = self.state.read();
            let kinds = [UidKind::Metric, UidKind::TagKey, UidKind::TagValue];
            for (kind, name, a) in kinds
                .iter()
                .flat_map(|k| state.uids[*k as usize].iter().map(move |(n, a)| (k, n, a)))
            {
                if a.durable {
                    continue;
                }
                let mut forward = vec![b'u', *kind as u8];
                forward.extend_from_slice(name.as_bytes());
                rows.push(RowMutation::new(forward).put(
                    FAMILY,
                    QUALIFIER,
                    VERSION,
                    a.uid.to_be_bytes().to_vec(),
                ));
                let mut reverse = vec![b'n', *kind as u8];
                reverse.extend_from_slice(&a.uid.to_be_bytes());
                rows.push(RowMutation::new(reverse).put(
                    FAMILY,
                    QUALIFIER,
                    VERSION,
                    name.as_bytes().to_vec(),
                ));
                uids.push((*kind, name.clone()));
            }
            for (table, of_table) in &state.fields {
                for (field, (ty, durable)) in of_table {
                    if *durable {
                        continue;
                    }
                    let mut row = vec![b'f'];
                    table_part(&mut row, table);
                    row.extend_from_slice(field.as_bytes());
                    rows.push(RowMutation::new(row).put(
                        FAMILY,
                        QUALIFIER,
                        state.generation(table),
                        vec![*ty as u8],
                    ));
                    fields.push((table.clone(), field.clone()));
                }
            }
            for (table, of_table) in &state.series {
                for (s, durable) in of_table {
                    if *durable {
                        continue;
                    }
                    let mut row = vec![b's'];
                    table_part(&mut row, table);
                    row.extend_from_slice(s);
                    rows.push(RowMutation::new(row).put(
                        FAMILY,
                        QUALIFIER,
                        state.generation(table),
                        vec![1],
                    ));
                    series.push((table.clone(), s.clone()));
                }
            }
        }
        if let Some(shared) = &self.shared {
            if let Err(e) = self.claim_pending(shared, &uids, &fields, &series) {
                self.dirty.store(true, Ordering::Release);
                return Err(e);
            }
        } else if rows.is_empty() {
            return Ok(());
        } else if let Err(e) = write(rows) {
            self.dirty.store(true, Ordering::Release);
            return Err(e);
        }
        let mut state = self.state.write();
        for (kind, name) in uids {
            if let Some(a) = state.uids[kind as usize].get_mut(&name) {
                a.durable = true;
            }
        }
        for (table, field) in fields {
            if let Some(f) = state.fields.get_mut(&table).and_then(|f| f.get_mut(&field)) {
                f.1 = true;
            }
        }
        for (table, s) in series {
            if let Some(d) = state.series.get_mut(&table).and_then(|t| t.get_mut(&s)) {
                *d = true;
            }
        }
        Ok(())
    }

    /// make_durable in cluster mode: what was assigned while the object
    /// store could not be reached is claimed now (a UID or type another
    /// node claimed first is taken as it is there, and the write that
    /// used the one assigned here fails: its points are encoded again
    /// when it is tried again), and new series are recorded.
    fn claim_pending(
        &self,
        shared: &shared::SharedEntries,
        uids: &[(UidKind, Box<str>)],
        fields: &[(Box<str>, Box<str>)],
        series: &[(Box<str>, Box<[u8]>)],
    ) -> Result<()> {
        let taken_meanwhile = |what: &str| {
            Err(Error::Unavailable(format!(
                "{what} another node claimed first in the shared dictionary while the object \
                 store could not be reached here; try the write again"
            )))
        };
        for (kind, name) in uids {
            let Some(assigned) = self.state.read().uids[*kind as usize].get(name).copied() else {
                continue;
            };
            let claim = shared.claim_uid(
                *kind,
                name,
                |uid| self.state.read().claimed_by_another(*kind, uid, name),
                |uid, held| self.state.write().learn(*kind, uid, held.into()),
            )?;
            if claim != shared::UidClaim::Uid(assigned.uid) {
                // Points of other writes may be encoded with it already:
                // this dictionary fails every write from now on, and the
                // namespace's next write opens a new one from the store.
                self.broken.store(true, Ordering::Release);
                return taken_meanwhile(&format!(
                    "the UID of {} `{}` was",
                    kind.noun(),
                    quote_prefix(name)
                ));
            }
        }
        for (table, field) in fields {
            let Some((ty, _)) = self
                .state
                .read()
                .fields
                .get(table)
                .and_then(|f| f.get(field))
                .copied()
            else {
                continue;
            };
            let had = shared.claim_field(table, field, ty)?;
            if had != ty {
                if let Some(f) = self.state.write().fields.get_mut(table) {
                    f.insert(field.clone(), (had, true));
                }
                return taken_meanwhile(&format!(
                    "the type of field `{}` was",
                    quote_prefix(field)
                ));
            }
        }
        for (table, s) in series {
            shared.record_series(table, s)?;
        }
        Ok(())
    }

    /// Forgets table `table`'s field types and series (its measurement was
    /// dropped): gone from memory, and their rows deleted in one synced
    /// write with the table's raised generation, so the measurement
    /// written again starts with no series and takes any field type. The
    /// names' UIDs stay: other tables may use them.
    pub fn forget_table(&self, store: &Store, table: &str) -> Result<()> {
        self.forget(store, table, None)
    }

    /// Forgets series `keys` of table `table` (InfluxQL's `DROP SERIES`, or
    /// a `DELETE` that left them no point), as [`Self::forget_table`] its
    /// series. The table's field types stay.
    pub fn forget_series(&self, store: &Store, table: &str, keys: &[Vec<u8>]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.forget(store, table, Some(keys))
    }

    /// Deletes the rows of `table`'s series `keys` (every series and
    /// field type when `None`) at the table's generation, which then
    /// rises: a delete marker masks every version at or before its own,
    /// so what is written again is recorded above the markers.
    fn forget(&self, store: &Store, table: &str, keys: Option<&[Vec<u8>]>) -> Result<()> {
        if self.shared.is_some() {
            return Err(Error::InvalidInput(
                "a cluster's shared dictionary does not forget series yet".into(),
            ));
        }
        let _one = self.persist.lock();
        let mut state = self.state.write();
        let generation = state.generation(table);
        let deleted = |kind: u8, rest: &[u8]| {
            let mut row = vec![kind];
            table_part(&mut row, table);
            row.extend_from_slice(rest);
            RowMutation::new(row).delete_row(Some(generation))
        };
        let mut rows = Vec::new();
        match keys {
            Some(keys) => rows.extend(keys.iter().map(|k| deleted(b's', k))),
            None => {
                if let Some(fields) = state.fields.get(table) {
                    rows.extend(fields.keys().map(|f| deleted(b'f', f.as_bytes())));
                }
                if let Some(series) = state.series.get(table) {
                    rows.extend(series.keys().map(|k| deleted(b's', k)));
                }
            }
        }
        rows.push(generation_row(table, generation + 1));
        store.write(&self.table, rows, None)?;
        match keys {
            Some(keys) => {
                if let Some(of_table) = state.series.get_mut(table) {
                    for key in keys {
                        of_table.remove(key.as_slice());
                    }
                }
            }
            None => {
                state.fields.remove(table);
                state.series.remove(table);
            }
        }
        state.resolved.remove(table);
        // The texts remembered name series by UIDs: the table's go (a
        // cache, filled again as points arrive).
        if let Some(written) = state.written.remove(table) {
            state.written_count -= written.len();
        }
        state.series_added += 1;
        state.generations.insert(table.into(), generation + 1);
        Ok(())
    }

    /// Every series of `table`, names resolved, sorted by metric and
    /// tags (InfluxDB's series-key order). Made once per set of series and
    /// shared until a new series arrives.
    pub fn series_of(&self, table: &str) -> Arc<SeriesList> {
        let (made_at, list) = {
            let state = self.state.read();
            if let Some((at, list)) = state.resolved.get(table)
                && *at == state.series_added
            {
                return list.clone();
            }
            (
                state.series_added,
                Arc::new(SeriesList::new(state.resolve(table, None))),
            )
        };
        let mut state = self.state.write();
        // A series recorded meanwhile makes this list stale: answer with
        // it (it was the set when asked) but do not keep it.
        if state.series_added == made_at {
            state
                .resolved
                .insert(table.into(), (made_at, Arc::clone(&list)));
        }
        list
    }

    /// [`Dictionary::series_of`], only those of `metric` when given (a
    /// table holds many metrics when Prometheus writes it). While new
    /// series keep arriving the shared list is stale; then only the
    /// metric's series are resolved, by its UID, not the whole table's.
    pub fn series_of_metric(&self, table: &str, metric: Option<&str>) -> Vec<NamedSeries> {
        let Some(metric) = metric else {
            return self.series_of(table).to_vec();
        };
        let all = {
            let state = self.state.read();
            match state.resolved.get(table) {
                Some((at, list)) if *at == state.series_added => Arc::clone(list),
                _ => {
                    let Some(uid) = state.uids[UidKind::Metric as usize].get(metric) else {
                        return Vec::new();
                    };
                    return state.resolve(table, Some(uid.uid));
                }
            }
        };
        // Sorted by metric first: the metric's series are one run.
        let from = all.partition_point(|s| s.metric.as_str() < metric);
        all[from..]
            .iter()
            .take_while(|s| s.metric == metric)
            .cloned()
            .collect()
    }

    /// The tables with series, sorted.
    pub fn tables(&self) -> BTreeSet<String> {
        self.state
            .read()
            .series
            .iter()
            .filter(|(_, s)| !s.is_empty())
            .map(|(t, _)| t.to_string())
            .collect()
    }

    /// The fields of `table` with their types, by name.
    pub fn fields_of(&self, table: &str) -> BTreeMap<String, FieldType> {
        self.state
            .read()
            .fields
            .get(table)
            .map(|f| f.iter().map(|(k, (t, _))| (k.to_string(), *t)).collect())
            .unwrap_or_default()
    }
}

impl State {
    fn generation(&self, table: &str) -> u64 {
        self.generations.get(table).copied().unwrap_or(VERSION)
    }

    /// `table`'s series (only those of the metric with UID `metric`, when
    /// given), names resolved, sorted by metric and tags.
    fn resolve(&self, table: &str, metric: Option<u32>) -> Vec<NamedSeries> {
        let Some(of_table) = self.series.get(table) else {
            return Vec::new();
        };
        let name = |kind, uid| -> String {
            self.names
                .get(&(kind, uid))
                .map_or_else(|| format!("#{uid}"), |n| n.to_string())
        };
        let wanted = metric.map(u32::to_be_bytes);
        let mut out: Vec<NamedSeries> = of_table
            .keys()
            .filter(|s| wanted.is_none_or(|uid| s.starts_with(&uid)))
            .filter_map(|s| {
                let (metric, tags) = decode_tag_series(s)?;
                Some(NamedSeries {
                    key: s.to_vec(),
                    metric: name(UidKind::Metric, metric),
                    tags: tags
                        .into_iter()
                        .map(|(k, v)| (name(UidKind::TagKey, k), name(UidKind::TagValue, v)))
                        .collect(),
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.metric, &a.tags).cmp(&(&b.metric, &b.tags)));
        out
    }

    /// Whether the store holds `uid` of `kind` for another name than
    /// `name`, as far as this node knows: only claimed UIDs count (one
    /// taken while the store could not be reached may be free there, and
    /// skipping it would give `name` another UID than other nodes give).
    fn claimed_by_another(&self, kind: UidKind, uid: u32, name: &str) -> bool {
        self.names.get(&(kind, uid)).is_some_and(|n| {
            &**n != name
                && self.uids[kind as usize]
                    .get(n)
                    .is_some_and(|a| a.durable && a.uid == uid)
        })
    }

    /// That `uid` names `name` (read from the shared dictionary). A name
    /// assigned another UID while the store could not be reached keeps
    /// it: make_durable finds the difference and fails that write.
    fn learn(&mut self, kind: UidKind, uid: u32, name: Box<str>) {
        self.uids[kind as usize]
            .entry(name.clone())
            .or_insert(Assigned { uid, durable: true });
        self.names.insert((kind, uid), name);
    }

    fn load_row(&mut self, key: &[u8], value: &[u8]) {
        match key.split_first() {
            Some((b'u', rest)) => {
                let (Some((&kind, name)), Ok(uid)) =
                    (rest.split_first(), <[u8; 4]>::try_from(value))
                else {
                    return;
                };
                let (Some(kind), Ok(name)) = (UidKind::from_byte(kind), std::str::from_utf8(name))
                else {
                    return;
                };
                let uid = u32::from_be_bytes(uid);
                self.uids[kind as usize].insert(name.into(), Assigned { uid, durable: true });
                self.names.insert((kind, uid), name.into());
                let next = &mut self.next[kind as usize];
                *next = (*next).max(uid + 1);
            }
            // A reverse row without its forward one (a torn pair cannot
            // happen: both are in one write) still keeps its UID from
            // being handed out again.
            Some((b'n', rest)) => {
                if let (Some((&kind, uid)), true) = (rest.split_first(), rest.len() == 5)
                    && let (Some(kind), Ok(uid)) =
                        (UidKind::from_byte(kind), <[u8; 4]>::try_from(uid))
                {
                    let uid = u32::from_be_bytes(uid);
                    let next = &mut self.next[kind as usize];
                    *next = (*next).max(uid + 1);
                }
            }
            Some((b'g', rest)) => {
                if let Some((table, _)) = split_table(rest)
                    && let Ok(generation) = <[u8; 8]>::try_from(value)
                {
                    self.generations
                        .insert(table.into(), u64::from_be_bytes(generation));
                }
            }
            Some((b'f', rest)) => {
                if let Some((table, field)) = split_table(rest)
                    && let Ok(field) = std::str::from_utf8(field)
                    && let Some(ty) = value.first().copied().and_then(FieldType::from_byte)
                {
                    self.fields
                        .entry(table.into())
                        .or_default()
                        .insert(field.into(), (ty, true));
                }
            }
            Some((b's', rest)) => {
                if let Some((table, series)) = split_table(rest)
                    && decode_tag_series(series).is_some()
                {
                    self.series
                        .entry(table.into())
                        .or_default()
                        .insert(series.into(), true);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(tags: &[(&str, &str)]) -> NamedSeries {
        NamedSeries {
            key: Vec::new(),
            metric: "cpu".into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn memory_objects() -> Arc<crate::objects::Objects> {
        Arc::new(
            crate::objects::Objects::with_store(
                Arc::new(object_store::memory::InMemory::new()),
                "",
                "memory",
            )
            .expect("objects"),
        )
    }

    fn two_nodes() -> (Dictionary, Dictionary, Arc<crate::objects::Objects>) {
        let objects = memory_objects();
        let table = TableName::parse("db:__tags").expect("name");
        (
            Dictionary::shared(objects.clone(), table.clone()),
            Dictionary::shared(objects.clone(), table),
            objects,
        )
    }

    fn uids(d: &Dictionary, names: &[(UidKind, &str)]) -> Vec<(u32, bool)> {
        let mut out = Vec::new();
        d.uids_into(|| names.iter().copied(), &mut out)
            .expect("uids");
        out
    }

    #[test]
    fn nodes_sharing_a_dictionary_give_every_name_one_uid() {
        let (a, b, objects) = two_nodes();
        let names = [
            (UidKind::Metric, "cpu"),
            (UidKind::TagKey, "host"),
            (UidKind::TagValue, "a"),
            (UidKind::TagValue, "b"),
        ];
        let on_a = uids(&a, &names);
        // Claimed on the store as they were assigned: durable at once.
        assert!(on_a.iter().all(|(_, new)| !new), "{on_a:?}");
        assert_eq!(uids(&b, &names), on_a);
        // A collision: the first candidate of `x` already names `y`.
        let taken = shared::candidate(UidKind::TagValue, "x", 0);
        objects
            .create(
                &format!("dict/db/uid/3/{taken:08x}"),
                bytes::Bytes::from_static(b"y"),
            )
            .expect("plant");
        let x = uids(&a, &[(UidKind::TagValue, "x")])[0].0;
        assert_eq!(x, shared::candidate(UidKind::TagValue, "x", 1));
        assert_eq!(uids(&b, &[(UidKind::TagValue, "x")])[0].0, x);
        assert_eq!(b.name(UidKind::TagValue, taken).as_deref(), Some("y"));
        // A cold node finds the same.
        let cold = Dictionary::shared(objects, TableName::parse("db:__tags").unwrap());
        assert_eq!(
            cold.name(UidKind::TagValue, on_a[2].0).as_deref(),
            Some("a")
        );
        assert_eq!(uids(&cold, &names), on_a);
    }

    #[test]
    fn a_field_keeps_the_first_type_any_node_gave_it() {
        let (a, b, _) = two_nodes();
        let float = [("usage", FieldType::Float)];
        assert_eq!(a.fields("cpu", "cpu", float.iter().copied()), Ok(false));
        let err = b
            .fields("cpu", "cpu", [("usage", FieldType::Integer)].into_iter())
            .expect_err("a conflict across nodes");
        let err = err.to_string();
        assert!(err.starts_with("field type conflict"), "{err}");
        assert!(err.contains("already exists as type float"), "{err}");
        assert_eq!(b.fields("cpu", "cpu", float.iter().copied()), Ok(false));
    }

    #[test]
    fn a_node_lists_the_series_and_fields_another_recorded() {
        let (a, b, _) = two_nodes();
        let names = [
            (UidKind::Metric, "cpu"),
            (UidKind::TagKey, "host"),
            (UidKind::TagValue, "h1"),
        ];
        let u = uids(&a, &names);
        let mut series = u[0].0.to_be_bytes().to_vec();
        series.push(1);
        series.extend_from_slice(&u[1].0.to_be_bytes());
        series.extend_from_slice(&u[2].0.to_be_bytes());
        assert_eq!(a.series("cpu", &series, 10), SeriesOutcome::Pending);
        a.fields("cpu", "cpu", [("usage", FieldType::Float)].into_iter())
            .expect("fields");
        a.make_durable_with(|_| unreachable!("no __tags table in cluster mode"))
            .expect("durable");
        assert!(b.series_of("cpu").is_empty());
        b.refresh("cpu").expect("refresh");
        let listed = b.series_of("cpu");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].metric, "cpu");
        assert_eq!(listed[0].tags.get("host").map(String::as_str), Some("h1"));
        assert_eq!(
            b.fields_of("cpu").into_iter().collect::<Vec<_>>(),
            [("usage".to_string(), FieldType::Float)]
        );
    }

    #[test]
    fn a_uid_assigned_while_the_store_was_away_and_claimed_by_another_fails_the_write() {
        let (a, b, objects) = two_nodes();
        // `a` could not reach the store: it took the first candidate.
        let first = shared::candidate(UidKind::TagValue, "z", 0);
        {
            let mut state = a.state.write();
            state.uids[UidKind::TagValue as usize].insert(
                "z".into(),
                Assigned {
                    uid: first,
                    durable: false,
                },
            );
            state.names.insert((UidKind::TagValue, first), "z".into());
            let mut series = 7u32.to_be_bytes().to_vec();
            series.push(1);
            series.extend_from_slice(&8u32.to_be_bytes());
            series.extend_from_slice(&first.to_be_bytes());
            state
                .series
                .entry("cpu".into())
                .or_default()
                .insert(series.into(), false);
        }
        a.dirty.store(true, Ordering::Release);
        // Meanwhile another node claimed that candidate for another name.
        objects
            .create(
                &format!("dict/db/uid/3/{first:08x}"),
                bytes::Bytes::from_static(b"other"),
            )
            .expect("plant");
        let err = a
            .make_durable_with(|_| unreachable!())
            .expect_err("the write must fail");
        assert!(matches!(err, Error::Unavailable(_)), "{err}");
        // Other writes may hold points encoded with it: every later one
        // through this dictionary fails too.
        assert!(a.make_durable_with(|_| unreachable!()).is_err());
        // Opened anew (as TagSets does), `z` gets its UID from the store,
        // the one every node gives it.
        let fresh = Dictionary::shared(objects, TableName::parse("db:__tags").unwrap());
        let z = uids(&fresh, &[(UidKind::TagValue, "z")])[0];
        assert_eq!(z, (shared::candidate(UidKind::TagValue, "z", 1), false));
        assert_eq!(uids(&b, &[(UidKind::TagValue, "z")])[0].0, z.0);
    }

    #[test]
    fn a_namespace_and_a_measurement_named_dot_dot_keep_their_entries() {
        // `.` and `..` are valid names, and no object name's part.
        let objects = memory_objects();
        let table = TableName::parse("..:__tags").expect("name");
        let (a, b) = (
            Dictionary::shared(objects.clone(), table.clone()),
            Dictionary::shared(objects, table),
        );
        let u = uids(&a, &[(UidKind::Metric, ".."), (UidKind::TagKey, ".")]);
        assert!(u.iter().all(|(_, new)| !new), "{u:?}");
        let mut series = u[0].0.to_be_bytes().to_vec();
        series.push(0);
        assert_eq!(a.series("..", &series, 10), SeriesOutcome::Pending);
        a.fields("..", "..", [(".", FieldType::Float)].into_iter())
            .expect("fields");
        a.make_durable_with(|_| unreachable!()).expect("durable");
        b.refresh("..").expect("refresh");
        assert_eq!(b.series_of("..").len(), 1);
        assert_eq!(b.series_of("..")[0].metric, "..");
        assert_eq!(b.fields_of("..").len(), 1);
    }

    #[test]
    fn a_uid_taken_while_the_store_was_away_does_not_move_other_names() {
        let (a, b, _) = two_nodes();
        // `a` took `y`'s first candidate for `x` while the store was
        // away; `y` itself is claimed at its first candidate all the same.
        let first = shared::candidate(UidKind::TagValue, "y", 0);
        {
            let mut state = a.state.write();
            state.uids[UidKind::TagValue as usize].insert(
                "x".into(),
                Assigned {
                    uid: first,
                    durable: false,
                },
            );
            state.names.insert((UidKind::TagValue, first), "x".into());
        }
        let y = uids(&a, &[(UidKind::TagValue, "y")])[0].0;
        assert_eq!(y, first);
        assert_eq!(uids(&b, &[(UidKind::TagValue, "y")])[0].0, first);
    }

    #[test]
    fn tag_keys_are_every_series_keys_once() {
        // A series with other keys between two with the same keys, and
        // a series with none: each series' keys count, each once.
        let list = SeriesList::new(vec![
            named(&[]),
            named(&[("host", "a")]),
            named(&[("host", "b"), ("zone", "z")]),
            named(&[("host", "c")]),
            named(&[("arch", "x"), ("host", "d")]),
        ]);
        let keys: Vec<&str> = list.tag_keys().iter().map(String::as_str).collect();
        assert_eq!(keys, ["arch", "host", "zone"]);
        // Made once: the second answer is the same set.
        assert!(std::ptr::eq(list.tag_keys(), list.tag_keys()));
        assert!(SeriesList::new(Vec::new()).tag_keys().is_empty());
    }
}
