//! Turning points into rows: decoders (Influx line protocol in
//! `line_protocol.rs`, JSON in `json.rs`) and the mapping of a point onto
//! a table's key schema.
//!
//! A point maps to one row per series and timestamp, one cell per field
//! (tall layout). Key fields take their values by name: `metric` (or
//! `measurement`) from the measurement, timestamp fields from the point's
//! time, every other field from the tag of that name. A tag that is not a key
//! field is an error: silently dropping it would merge distinct series.

pub mod databases;
pub mod json;
pub mod kafka;
pub mod line_protocol;
pub mod produce;
pub mod refusal;
pub mod remote_write;
pub mod retention;
pub mod rows_message;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use crate::catalog::TableDescriptor;
use crate::cell::{CellKind, EntryBatch, KeyRef, MAX_QUALIFIER_LEN};
use crate::codec::{bytes_equal, compare_bytes, quote_prefix};
use crate::key::{FieldEncoding, FieldRef, KeyField, OpenTags};
use crate::series::{Dictionary, FieldType, FieldsRefused, SeriesOutcome, UidKind};
use crate::table::RoutedRows;
use crate::value::Value;
use json::JsonPoint;
use line_protocol::{LineParser, ParsedLine, Point, Precision};
use refusal::{PointRefusal, Refusals};

/// What the encoder reads of a point, whichever decoder made it.
pub trait PointFields {
    fn measurement(&self) -> &str;
    /// Tags in the order written.
    fn tags(&self) -> impl Iterator<Item = (&str, &str)>;
    /// Tag `i` (< the number of tags), in the order written.
    fn tag(&self, i: usize) -> (&str, &str) {
        self.tags().nth(i).unwrap_or_default()
    }
    fn field_count(&self) -> usize;
    /// Field `i` (< `field_count`), in the order written.
    fn field(&self, i: usize) -> (&str, &Value);
    /// In the decoder's precision; `None` means now.
    fn timestamp(&self) -> Option<i64>;
    /// The measurement and tags as the point's text wrote them (escapes
    /// and all), where there is such a text: the same text names the same
    /// series, so it can stand for the names it holds.
    fn series_text(&self) -> Option<&str> {
        None
    }
}

/// The longest series key InfluxDB takes (`cpu,host=a`: the measurement
/// and each tag as `,key=value`); a longer one's point is refused, as
/// InfluxDB's `max key length exceeded`.
pub const MAX_SERIES_KEY_LEN: usize = 65_535;

/// Whether a point names one tag key twice (`cpu,host=a,host=b`), which
/// every door refuses as InfluxDB does rather than pick one.
pub fn has_duplicate_tag_keys(point: &impl PointFields) -> bool {
    point
        .tags()
        .enumerate()
        .any(|(i, (k, _))| point.tags().skip(i + 1).any(|(other, _)| other == k))
}

/// A Prometheus sample as a point: `__name__` the measurement, the other
/// labels its tags, one field `value`, the time in ms.
pub struct SamplePoint<'a> {
    pub metric: &'a str,
    pub labels: &'a [(String, String)],
    pub value: Value,
    pub timestamp_ms: i64,
}

impl PointFields for SamplePoint<'_> {
    fn measurement(&self) -> &str {
        self.metric
    }
    fn tags(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels
            .iter()
            .filter(|(k, _)| k != "__name__")
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }
    fn field_count(&self) -> usize {
        1
    }
    fn field(&self, _: usize) -> (&str, &Value) {
        ("value", &self.value)
    }
    fn timestamp(&self) -> Option<i64> {
        Some(self.timestamp_ms)
    }
}

impl PointFields for Point<'_> {
    fn measurement(&self) -> &str {
        &self.measurement
    }
    fn tags(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tags.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }
    fn tag(&self, i: usize) -> (&str, &str) {
        self.tags
            .get(i)
            .map_or(("", ""), |(k, v)| (k.as_ref(), v.as_ref()))
    }
    fn field_count(&self) -> usize {
        self.fields.len()
    }
    fn field(&self, i: usize) -> (&str, &Value) {
        let (k, v) = &self.fields[i];
        (k, v)
    }
    fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }
}

impl<'l: 'p, 'p> PointFields for ParsedLine<'l, 'p> {
    fn measurement(&self) -> &str {
        ParsedLine::measurement(self)
    }
    fn tags(&self) -> impl Iterator<Item = (&str, &str)> {
        ParsedLine::tags(self)
    }
    fn tag(&self, i: usize) -> (&str, &str) {
        ParsedLine::tag(self, i)
    }
    fn field_count(&self) -> usize {
        ParsedLine::field_count(self)
    }
    fn field(&self, i: usize) -> (&str, &Value) {
        ParsedLine::field(self, i)
    }
    fn timestamp(&self) -> Option<i64> {
        ParsedLine::timestamp(self)
    }
    fn series_text(&self) -> Option<&str> {
        Some(ParsedLine::series_text(self))
    }
}

/// Encodes points as rows of one table straight into the entry encoding
/// the regions log and store: one reused key buffer, values written in
/// place, no per-cell allocations (this is the ingest hot path).
pub struct PointEncoder<'t> {
    table: &'t TableDescriptor,
    family: &'t [u8],
    max_value_size: usize,
    key: Vec<u8>,
    /// Field indices of the point being added, in name order...
    order: Vec<usize>,
    /// ...worked out for the field names of the last point (concatenated,
    /// with their ends), which the next point of a series usually repeats.
    order_names: Vec<u8>,
    order_name_ends: Vec<usize>,
    /// No two of those names are equal: the point's cells then go out in
    /// strictly rising key order (`EntryBatch::end_sorted_row`).
    order_names_distinct: bool,
    parser: LineParser,
    /// One batch per region of the table, as the encoder found them: rows
    /// land straight in their region's batch (no routing copy later).
    batches: Vec<EntryBatch>,
    rows: usize,
    /// Number (line, or place in a JSON array) of the point being added,
    /// for errors that name another point...
    point_number: usize,
    /// ...counted from here (the lines of a body's earlier pieces).
    number_base: usize,
    /// Index of the next point of the Kafka message being added.
    message_index: u64,
    /// Keys written by this body, by point number, while its timestamps
    /// are finer than the table's unit: two points that only the dropped
    /// digits told apart are refused rather than merged.
    seen: Option<HashMap<Vec<u8>, (usize, bool)>>,
    uniquifiers: Uniquifiers,
    /// Cell TTL (ms) of the write's points: HBase's per-cell TTL, which
    /// reads cap at the family's.
    write_ttl: Option<u64>,
    /// The cell TTL of the point being added: its own, else the write's.
    point_ttl: Option<u64>,
    /// Points older (cell versions, ms) are refused as beyond their
    /// retention policy.
    oldest_ms: Option<u64>,
    /// The namespace's dictionary, for a table of open tag sets.
    dictionary: Option<&'t Dictionary>,
    /// The points added used a UID, field type or series that is not
    /// durable yet: [`Dictionary::make_durable`] before submitting them.
    undurable: bool,
    /// The tag UIDs of the point being added (reused).
    tag_uids: Vec<(u32, u32)>,
    /// A point's measurement and tag UIDs as the dictionary answered
    /// them (reused buffer).
    uids: Vec<(u32, bool)>,
    /// NaN and infinities are values (Prometheus' staleness markers and
    /// `+Inf`), not mistakes.
    non_finite: bool,
    /// A table of open tag sets that holds one measurement (an InfluxDB
    /// measurement's table, which InfluxQL reads as that measurement)
    /// takes points of it only.
    /// The one measurement the table takes points of, if one.
    one_measurement: Option<Box<str>>,
    /// For each key field, the index of its tag among the point's tags
    /// ([`NO_TAG`]: none)...
    key_tags: Vec<u32>,
    /// ...worked out for the tag names of the last point (concatenated,
    /// with their ends), which the next point of a series repeats: a name
    /// compared once a point rather than searched for by every key field.
    key_tag_names: Vec<u8>,
    key_tag_name_ends: Vec<usize>,
    key_tags_known: bool,
    /// The encoded series of the table's points by their text, when its
    /// keys are a series then a time ([`KeySchema::is_series_then_time`]);
    /// kept by the thread between encoders ([`SERIES_KEYS`]).
    series_keys: Option<SeriesKeys>,
}

/// The series keys a thread encoded last, of a few tables: a Kafka
/// writer or an HTTP write meets a series again in its next batch, and a
/// key copied by its text costs far less than its tags found and encoded
/// again (ten key fields and the salt's hash, for TSBS's devops rows).
struct SeriesKeys {
    table: crate::catalog::TableName,
    created_ms: u64,
    key: crate::key::KeySchema,
    /// The series part of the key (everything before the time) by the
    /// point's measurement and tags as written.
    by_text: HashMap<Box<str>, Box<[u8]>, foldhash::fast::RandomState>,
    bytes: usize,
}

/// Bytes of series text and keys a thread keeps for one table: TSBS's
/// 4,000 devops hosts take 1.3 MB. Past it the thread starts over.
const SERIES_KEYS_BYTES: usize = 4 << 20;
/// Tables a thread keeps series keys of.
const SERIES_KEYS_TABLES: usize = 4;

thread_local! {
    static SERIES_KEYS: std::cell::RefCell<Vec<SeriesKeys>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl SeriesKeys {
    /// This thread's series keys of `table`, or new ones; `None` when its
    /// keys cannot be kept by series.
    fn take(table: &TableDescriptor) -> Option<SeriesKeys> {
        if !table.key.is_series_then_time() {
            return None;
        }
        // A thread being torn down has none (nor takes any back).
        let kept = SERIES_KEYS
            .try_with(|tables| {
                let mut tables = tables.borrow_mut();
                let at = tables.iter().position(|t| {
                    t.table == table.name && t.created_ms == table.created_ms && t.key == table.key
                })?;
                Some(tables.remove(at))
            })
            .ok()
            .flatten();
        Some(kept.unwrap_or_else(|| SeriesKeys {
            table: table.name.clone(),
            created_ms: table.created_ms,
            key: table.key.clone(),
            by_text: HashMap::default(),
            bytes: 0,
        }))
    }

    /// Back to the thread, for its next encoder.
    fn give_back(self) {
        let _ = SERIES_KEYS.try_with(|tables| {
            let mut tables = tables.borrow_mut();
            if tables.len() >= SERIES_KEYS_TABLES {
                tables.remove(0);
            }
            tables.push(self);
        });
    }

    fn remember(&mut self, text: &str, series: &[u8]) {
        let bytes = text.len() + series.len() + 64;
        if self.bytes + bytes > SERIES_KEYS_BYTES {
            self.by_text.clear();
            self.bytes = 0;
        }
        self.bytes += bytes;
        self.by_text.insert(text.into(), series.into());
    }
}

impl Drop for PointEncoder<'_> {
    fn drop(&mut self) {
        if let Some(keys) = self.series_keys.take() {
            keys.give_back();
        }
    }
}

/// A key field the point has no tag for.
const NO_TAG: u32 = u32::MAX;

/// Where the numbers of a key's uniquifier field come from when a point
/// carries no tag of that name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Uniquifiers {
    /// A process-wide sequence that starts at the wall clock's nanoseconds
    /// (DESIGN's "nanotime"): every point gets a number no other point of
    /// this process, or of an earlier one, got.
    #[default]
    Sequence,
    /// From a Kafka message's place: its topic and partition (12 bits of
    /// their hash), offset (low 36 bits) and the point's index in the
    /// message (16 bits), so a message read again gives its points the
    /// same numbers, and a replay after a crash rewrites them instead of
    /// adding copies. (Made by [`Uniquifiers::message`].)
    Message { stream: u64, offset: i64 },
}

impl Uniquifiers {
    /// The 12 bits of a topic and partition in [`Uniquifiers::Message`].
    pub fn stream(topic: &str, partition: i32) -> u64 {
        let mut key = Vec::with_capacity(topic.len() + 4);
        key.extend_from_slice(topic.as_bytes());
        key.extend_from_slice(&partition.to_be_bytes());
        xxhash_rust::xxh3::xxh3_64(&key) & 0xfff
    }

    pub fn message(topic: &str, partition: i32, offset: i64) -> Uniquifiers {
        Uniquifiers::Message {
            stream: Uniquifiers::stream(topic, partition),
            offset,
        }
    }
}

/// The next number of [`Uniquifiers::Sequence`].
fn next_in_sequence() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    NEXT.fetch_max(now_ns, Ordering::Relaxed);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl<'t> PointEncoder<'t> {
    /// A value longer than `max_value_size` rejects its point.
    pub fn new(table: &'t TableDescriptor, max_value_size: usize) -> Result<Self, String> {
        let family = table
            .families
            .first()
            .map(|f| f.name.as_bytes())
            .ok_or_else(|| format!("table `{}` has no column family", table.name))?;
        Ok(PointEncoder {
            table,
            family,
            max_value_size,
            key: Vec::with_capacity(table.key.key_len()),
            order: Vec::new(),
            order_names: Vec::new(),
            order_name_ends: Vec::new(),
            order_names_distinct: false,
            parser: LineParser::default(),
            batches: table.regions.iter().map(|_| EntryBatch::new()).collect(),
            rows: 0,
            point_number: 0,
            number_base: 0,
            message_index: 0,
            seen: None,
            uniquifiers: Uniquifiers::default(),
            write_ttl: None,
            point_ttl: None,
            oldest_ms: None,
            dictionary: None,
            one_measurement: None,
            undurable: false,
            tag_uids: Vec::new(),
            uids: Vec::new(),
            non_finite: false,
            key_tags: Vec::new(),
            key_tag_names: Vec::new(),
            key_tag_name_ends: Vec::new(),
            key_tags_known: false,
            series_keys: SeriesKeys::take(table),
        })
    }

    /// Takes NaN and infinite floats as values (Prometheus remote write:
    /// a staleness marker is a NaN whose bits must be kept).
    pub fn allow_non_finite(&mut self) {
        self.non_finite = true;
    }

    /// The dictionary of the table's namespace: a table of open tag sets
    /// takes points only with one.
    pub fn set_dictionary(&mut self, dictionary: &'t Dictionary) {
        self.dictionary = Some(dictionary);
    }

    /// Takes points of the measurement the table is named after only
    /// (InfluxQL reads a measurement's table as that one measurement; a
    /// Prometheus samples table holds every metric, and does not ask this).
    pub fn one_measurement(&mut self) {
        self.one_measurement = Some(self.table.name.table.as_str().into());
    }

    /// [`Self::one_measurement`] of a table named otherwise (a retention
    /// policy's, `catalog::PolicyTables`).
    pub fn one_measurement_named(&mut self, measurement: &str) {
        self.one_measurement = Some(measurement.into());
    }

    /// Whether the table has open tag sets (its series keys are the
    /// dictionary's UIDs).
    pub fn has_open_tags(&self) -> bool {
        self.table.key.tags.is_some()
    }

    /// Whether the points added used UIDs, field types or series that
    /// must be made durable ([`Dictionary::make_durable`]) before the
    /// points are submitted.
    pub fn needs_durable_dictionary(&self) -> bool {
        self.undurable
    }

    /// A cell TTL in milliseconds for the points added next (a JSON point's
    /// own `ttl_ms` wins). Reads hide a cell once the shorter of it and its
    /// family's TTL passed, so it never outlives the family's.
    pub fn set_ttl(&mut self, ttl_ms: Option<u64>) {
        self.write_ttl = ttl_ms;
        self.point_ttl = ttl_ms;
    }

    /// Refuses points older than `oldest_ms` (a cell version) as beyond
    /// their retention policy.
    pub fn set_oldest(&mut self, oldest_ms: Option<u64>) {
        self.oldest_ms = oldest_ms;
    }

    /// Where uniquifier numbers come from for the points added next; a
    /// Kafka message's place starts its points' indexes at 0.
    pub fn set_uniquifiers(&mut self, u: Uniquifiers) {
        self.uniquifiers = u;
        self.message_index = 0;
    }

    /// The keys this encoder remembers for [`PointEncoder::add`]'s check of
    /// points merged by their time unit, to hand on to the encoder of the
    /// next piece of one body.
    pub fn take_seen(&mut self) -> Option<HashMap<Vec<u8>, (usize, bool)>> {
        self.seen.take()
    }

    pub fn set_seen(&mut self, seen: Option<HashMap<Vec<u8>, (usize, bool)>>) {
        self.seen = seen;
    }

    /// Lines of the body before the text added next (a later piece of one
    /// body), so errors naming two points number them in the whole body.
    pub fn set_number_base(&mut self, lines_before: usize) {
        self.number_base = lines_before;
    }

    /// Adds every point of `body` (an HTTP write, a Kafka message). A body
    /// that cannot be read at all (not UTF-8, not JSON points) is an error;
    /// otherwise the good points are added and the bad ones come back with
    /// their number (line, or place in a JSON array) and reason, in order.
    /// Timestamps are in `precision` when given, else in each format's
    /// own default: nanoseconds for line protocol (as InfluxDB), and
    /// milliseconds for JSON.
    pub fn add_body(
        &mut self,
        format: Format,
        body: &[u8],
        precision: Option<Precision>,
        now_ms: u64,
    ) -> Result<Refusals, String> {
        let mut errors = Refusals::default();
        // A body (an HTTP write, a Kafka message) is checked on its own
        // for points that only cut time digits told apart.
        self.seen = None;
        match format {
            Format::Line => {
                let text = std::str::from_utf8(body)
                    .map_err(|e| format!("line protocol must be UTF-8: {e}"))?;
                errors = self.add_lines(text, precision.unwrap_or_default(), now_ms);
            }
            Format::Json => {
                // Each point of an array is read on its own: one that is
                // wrong is refused by its number, the others are written.
                let points = json::points(body)?;
                self.reserve(points.len());
                let precision = precision.unwrap_or(Precision::Milliseconds);
                for (i, point) in points.into_iter().enumerate() {
                    let outcome = point
                        .and_then(JsonPoint::read)
                        .map_err(PointRefusal::from)
                        .and_then(|jp| self.add_json_point(i + 1, &jp, precision, now_ms));
                    if let Err(e) = outcome {
                        errors.push(i + 1, e);
                    }
                }
            }
            Format::RemoteWrite => {
                let series = remote_write::decode_write_request(body).map_err(|e| e.to_string())?;
                errors = self.add_remote_write(&series, now_ms);
            }
        }
        Ok(errors)
    }

    /// Adds the samples of a remote write's series as Prometheus takes
    /// them: a series needs `__name__`, a label named twice makes no
    /// series, and NaN (staleness markers) and infinities are values. The
    /// refused come back with their series' number (from 1) and why.
    pub fn add_remote_write(&mut self, series: &[remote_write::Series], now_ms: u64) -> Refusals {
        self.allow_non_finite();
        let mut errors = Refusals::default();
        for (i, one) in series.iter().enumerate() {
            self.point_number = i + 1;
            let Some(metric) = one
                .labels
                .iter()
                .find(|(k, _)| k == "__name__")
                .map(|(_, v)| v.as_str())
                .filter(|m| !m.is_empty())
            else {
                errors.push(
                    i + 1,
                    "a series has no `__name__` label: every sample needs its metric name".into(),
                );
                continue;
            };
            // As Prometheus' TSDB: a label named twice (`__name__` too)
            // makes no series, rather than one of either value.
            if let Some((twice, _)) = one
                .labels
                .iter()
                .enumerate()
                .find(|(at, (k, _))| one.labels[at + 1..].iter().any(|(other, _)| other == k))
                .map(|(_, label)| label)
            {
                errors.push(
                    i + 1,
                    format!(
                        "label name {:?} is not unique: invalid sample",
                        quote_prefix(twice)
                    )
                    .into(),
                );
                continue;
            }
            for &(value, timestamp_ms) in &one.samples {
                let point = SamplePoint {
                    metric,
                    labels: &one.labels,
                    value: Value::Float(value),
                    timestamp_ms,
                };
                if let Err(reason) = self.add(&point, Precision::Milliseconds, now_ms) {
                    errors.push(i + 1, reason);
                }
            }
        }
        errors
    }

    /// A new body's points follow: two of them that only the time digits
    /// the table drops told apart are refused, as in [`Self::add_body`].
    pub fn start_body(&mut self) {
        self.seen = None;
    }

    /// Adds JSON point `point`, number `number` of its body.
    pub fn add_json_point(
        &mut self,
        number: usize,
        point: &JsonPoint,
        precision: Precision,
        now_ms: u64,
    ) -> Result<(), PointRefusal> {
        self.point_number = number;
        self.point_ttl = point.ttl_ms.or(self.write_ttl);
        let added = point
            .to_point()
            .map_err(PointRefusal::from)
            .and_then(|p| self.add(&p, precision, now_ms));
        self.point_ttl = self.write_ttl;
        added
    }

    /// Adds one line of line protocol, line `number` of its body.
    pub fn add_line(
        &mut self,
        number: usize,
        line: &str,
        precision: Precision,
        now_ms: u64,
    ) -> Result<(), PointRefusal> {
        let mut parser = std::mem::take(&mut self.parser);
        let added = self.add_parsed_line(&mut parser, number, line, precision, now_ms);
        self.parser = parser;
        added
    }

    fn add_parsed_line(
        &mut self,
        parser: &mut LineParser,
        number: usize,
        line: &str,
        precision: Precision,
        now_ms: u64,
    ) -> Result<(), PointRefusal> {
        self.point_number = number;
        // A series met before needs only its fields parsed.
        let known_end = match &self.series_keys {
            Some(_) => line_protocol::series_end(line)
                .filter(|&end| self.copy_known_series(Some(&line[..end]))),
            None => None,
        };
        match known_end {
            Some(end) => parser
                .parse_after_series(line, end)
                .map_err(PointRefusal::from)
                .and_then(|point| self.add_to_key(&point, precision, now_ms, true)),
            // Not a kept series (looked for just now): encoded whole.
            None => parser
                .parse(line)
                .map_err(PointRefusal::from)
                .and_then(|point| self.add_to_key(&point, precision, now_ms, false)),
        }
    }

    /// Adds every line of line protocol `text`; the bad ones come back with
    /// their line number and reason, in order.
    pub fn add_lines(&mut self, text: &str, precision: Precision, now_ms: u64) -> Refusals {
        let mut errors = Refusals::default();
        // A body of many lines (an HTTP write) is sized at once; a Kafka
        // message, one line, was sized with its batch. Lines too short
        // to be points (a body of blank or bad ones) get no room.
        if text.len() > 4096 {
            let lines = memchr::memchr_iter(b'\n', text.as_bytes()).count() + 1;
            self.reserve(lines.min(text.len() / MIN_SIZED_LINE + 1));
        }
        // The parser's buffers serve every line; it is taken out while
        // `add` borrows the encoder.
        let mut parser = std::mem::take(&mut self.parser);
        for (number, line) in line_protocol::lines(text) {
            if let Err(e) = self.add_parsed_line(&mut parser, number, line, precision, now_ms) {
                errors.push(number, e);
            }
        }
        self.parser = parser;
        errors
    }

    /// Room for `points` more rows at once: growing the batch step by step
    /// touches fresh pages at every step, which costs more than encoding.
    fn reserve(&mut self, points: usize) {
        // A TSBS cpu row is its row key (41 bytes, or 109 with every
        // devops tag in it) and 10 cells of ~33 bytes (family, qualifier,
        // timestamp, kind and value); rows spread over the regions (a
        // salted table's, evenly).
        let per_region = points / self.batches.len().max(1) + 1;
        for b in &mut self.batches {
            b.reserve(per_region * 480, per_region * 10, per_region);
        }
    }

    /// Room for the points of `bytes` of messages (a Kafka batch) in one
    /// allocation, rather than growing message by message.
    pub fn reserve_for_bytes(&mut self, bytes: usize) {
        // A TSBS cpu line is 160-230 bytes; rather too much room than a
        // reallocation of the whole batch.
        let rows = bytes / 160 + 1;
        self.reserve(rows);
    }

    /// Rows added so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Adds `point` as one row; `now_ms` stands in for a missing timestamp.
    /// A point that is wrong adds nothing and says which key field or value
    /// is wrong.
    pub fn add(
        &mut self,
        point: &impl PointFields,
        precision: Precision,
        now_ms: u64,
    ) -> Result<(), PointRefusal> {
        let known = self.copy_known_series(point.series_text());
        self.add_to_key(point, precision, now_ms, known)
    }

    /// The series part of the key of the point whose series text is
    /// `text` into [`Self::key`], when a point of it was met before.
    fn copy_known_series(&mut self, text: Option<&str>) -> bool {
        let (Some(text), Some(keys)) = (text, &self.series_keys) else {
            return false;
        };
        match keys.by_text.get(text) {
            Some(series) => {
                self.key.clear();
                self.key.extend_from_slice(series);
                true
            }
            None => false,
        }
    }

    /// [`Self::add`], `known` when [`Self::key`] holds the point's series
    /// part already (its measurement and tags are then not read).
    fn add_to_key(
        &mut self,
        point: &impl PointFields,
        precision: Precision,
        now_ms: u64,
        known: bool,
    ) -> Result<(), PointRefusal> {
        let table = self.table;
        let unit = table.key.time_unit;
        let (time, exact) = match point.timestamp() {
            Some(t) => precision.to_unit(t, unit).ok_or_else(|| {
                if t < 0 {
                    format!("timestamp {t} is before 1970, the earliest a point may have")
                } else {
                    format!(
                        "timestamp {t} is out of range: after \
                         2262-04-11T23:47:16.854775806Z, the latest a point may have"
                    )
                }
            })?,
            None => Precision::Milliseconds
                .to_unit(now_ms as i64, unit)
                .ok_or("the clock is out of range")?,
        };
        // Cell versions are milliseconds whatever the key's unit.
        let ts = unit
            .to_ms_floor(time)
            .ok_or_else(|| format!("timestamp {time}{} is out of range", unit.name()))?;
        if self.oldest_ms.is_some_and(|oldest| ts < oldest) {
            return Err(PointRefusal::beyond_retention());
        }
        if table.key.tags.is_none() && !known {
            self.match_key_tags(point)?;
        }
        let field_count = point.field_count();
        if field_count == 0 {
            return Err("point has no fields".into());
        }
        for i in 0..field_count {
            let (name, value) = point.field(i);
            match value {
                Value::Float(v) if !v.is_finite() && !self.non_finite => {
                    return Err(format!("field `{name}` is not a finite number").into());
                }
                Value::Str(v) if v.len() >= self.max_value_size => {
                    return Err(format!(
                        "field `{name}` is {} bytes, over the limit of {} bytes per value",
                        v.len(),
                        self.max_value_size
                    )
                    .into());
                }
                _ => {}
            }
            // A table of open tag sets records each field name in its
            // dictionary, whose rows hold the table's name too.
            let max_name = if table.key.tags.is_some() {
                crate::series::max_field_name_len(&table.name.table)
            } else {
                MAX_QUALIFIER_LEN
            };
            if name.len() > max_name {
                return Err(format!(
                    "a field name is {} bytes, over the limit of {max_name}",
                    name.len()
                )
                .into());
            }
        }
        if let Some(open) = &table.key.tags {
            self.encode_open_tags(point, open, time)?;
        } else if known {
            table.key.put_last_time(time, &mut self.key);
        } else {
            let uniquifier = match table
                .key
                .fields
                .iter()
                .zip(&self.key_tags)
                .find(|&(f, &tag)| {
                    matches!(f.encoding, FieldEncoding::Uniquifier { .. }) && tag == NO_TAG
                }) {
                Some((f, _)) => Some(self.next_uniquifier(f)?),
                None => None,
            };
            let key_tags = &self.key_tags;
            table
                .key
                .encode_with(&mut self.key, |i, f| {
                    let tag = key_tags
                        .get(i)
                        .filter(|&&t| t != NO_TAG)
                        .map(|&t| point.tag(t as usize).1);
                    key_field_value(table, f, tag, point, time, uniquifier)
                })
                .map_err(|e| match e {
                    crate::error::Error::InvalidInput(reason) => reason,
                    other => other.to_string(),
                })?;
            if let (Some(text), Some(keys)) = (point.series_text(), &mut self.series_keys) {
                let time_width = table.key.fields.last().map_or(0, |f| f.encoding.width());
                keys.remember(text, &self.key[..self.key.len() - time_width]);
            }
        }
        if precision.unit().per_second() > unit.per_second() {
            let number = self.number_base + self.point_number;
            let seen = self.seen.get_or_insert_with(HashMap::new);
            match seen.get(&self.key) {
                Some(&(earlier, earlier_exact)) if !(exact && earlier_exact) => {
                    return Err(format!(
                        "point {number} has the time of point {earlier} once cut to table `{}`'s time unit ({}): \
                         it would replace that point; keep both by creating the table with a finer time_unit",
                        table.name,
                        unit.name()
                    ).into());
                }
                _ => {
                    seen.insert(self.key.clone(), (number, exact));
                }
            }
        }
        // Cells in key order (by field name; stable, so of two fields with
        // one name the later stays later): the MemStore then finds the row
        // sorted instead of sorting it by whole cell keys.
        if !self.same_names_as_last(point) {
            self.order.clear();
            self.order.extend(0..field_count);
            self.order
                .sort_by(|&a, &b| point.field(a).0.cmp(point.field(b).0));
            self.order_names.clear();
            self.order_name_ends.clear();
            for i in 0..field_count {
                self.order_names
                    .extend_from_slice(point.field(i).0.as_bytes());
                self.order_name_ends.push(self.order_names.len());
            }
            self.order_names_distinct = self
                .order
                .windows(2)
                .all(|w| point.field(w[0]).0 < point.field(w[1]).0);
        }
        let region = table
            .regions
            .partition_point(|r| compare_bytes(&r.start, &self.key).is_le())
            .saturating_sub(1);
        let batch = &mut self.batches[region];
        batch.start_row(&self.key);
        for &i in &self.order {
            let (name, value) = point.field(i);
            batch.push_cell_with(
                self.family,
                name.as_bytes(),
                ts,
                CellKind::Put,
                self.point_ttl,
                |out| value.encode_into(out),
            );
        }
        // One family, time and kind, names rising: keys rising.
        if self.order_names_distinct {
            batch.end_sorted_row();
        } else {
            batch.end_row();
        }
        self.rows += 1;
        Ok(())
    }

    /// The key of a point of a table of open tag sets: its measurement and
    /// tags as UIDs (assigned when new), its series recorded, its fields'
    /// types checked against the table's (InfluxDB's rules and words).
    fn encode_open_tags(
        &mut self,
        point: &impl PointFields,
        open: &OpenTags,
        time: u64,
    ) -> Result<(), PointRefusal> {
        let table = self.table;
        let Some(dictionary) = self.dictionary else {
            return Err(format!(
                "table `{}` has open tag sets: write it through /write?db={} (InfluxDB line protocol)",
                table.name, table.name.namespace
            ).into());
        };
        let measurement = point.measurement();
        let table_name = table.name.table.as_str();
        if let Some(only) = self.one_measurement.as_deref()
            && measurement != only
        {
            return Err(format!(
                "a point of measurement `{}` in table `{}`, which holds measurement `{only}` \
                 only (InfluxQL reads it as that measurement): send it to its own table",
                quote_prefix(measurement),
                table.name
            )
            .into());
        }
        for i in 0..point.field_count() {
            let (name, _) = point.field(i);
            if name == "time" {
                return Err(PointRefusal::conflict(format!(
                    "invalid field name: input field \"time\" on measurement \"{}\" is invalid",
                    quote_prefix(measurement)
                )));
            }
        }
        let text = point.series_text();
        let remembered =
            text.and_then(|text| dictionary.written_series(table_name, text, &mut self.tag_uids));
        match remembered {
            // The text passed resolve_series' checks when it was remembered.
            Some(metric) if self.tag_uids.len() <= open.max_tags => {
                table
                    .key
                    .encode_tag_key(metric, &self.tag_uids, time, &mut self.key);
            }
            _ => self.resolve_series(point, open, time, dictionary, text)?,
        }
        // The series is recorded even when a field's type refuses the
        // point, as InfluxDB does (SHOW SERIES lists it).
        let fields = (0..point.field_count()).map(|i| {
            let (name, value) = point.field(i);
            (name, FieldType::of(value))
        });
        self.undurable |= dictionary.fields(table_name, measurement, fields).map_err(
            |refused| match refused {
                FieldsRefused::TypeConflict(reason) => PointRefusal::conflict(reason),
                too_long => too_long.to_string().into(),
            },
        )?;
        Ok(())
    }

    /// The key of a point of a series not remembered by its text: each
    /// name's UID (assigned when new), the tags checked, the series
    /// recorded; remembered by `text` once all of it is durable.
    fn resolve_series(
        &mut self,
        point: &impl PointFields,
        open: &OpenTags,
        time: u64,
        dictionary: &Dictionary,
        text: Option<&str>,
    ) -> Result<(), PointRefusal> {
        let table = self.table;
        let measurement = point.measurement();
        let table_name = table.name.table.as_str();
        for (count, (k, _)) in point.tags().enumerate() {
            if k == "time" {
                return Err(PointRefusal::conflict(format!(
                    "invalid tag key: input tag \"time\" on measurement \"{}\" is invalid",
                    quote_prefix(measurement)
                )));
            }
            if count == open.max_tags {
                return Err(format!(
                    "a point has more than {} tags, the most table `{}` allows",
                    open.max_tags, table.name
                )
                .into());
            }
        }
        // What refuses a point is checked before the dictionary records
        // any of its names: a refused point leaves nothing behind.
        let key_len = point
            .tags()
            .fold(measurement.len(), |n, (k, v)| n + k.len() + v.len() + 2);
        if key_len > MAX_SERIES_KEY_LEN {
            return Err(
                format!("max key length exceeded: {key_len} > {MAX_SERIES_KEY_LEN}").into(),
            );
        }
        if has_duplicate_tag_keys(point) {
            return Err("duplicate tags".into());
        }
        let names = || {
            std::iter::once((UidKind::Metric, measurement)).chain(
                point
                    .tags()
                    .flat_map(|(k, v)| [(UidKind::TagKey, k), (UidKind::TagValue, v)]),
            )
        };
        // At its limit a table takes points of the series it holds only:
        // a point with a name the dictionary lacks is of a new series.
        let at_limit = dictionary.series_count(table_name) as u64 >= open.series_limit;
        if at_limit && !dictionary.known_uids_into(names(), &mut self.uids) {
            return Err(self.over_limit(open));
        }
        // The measurement's UID, then each tag's key and value UIDs.
        dictionary
            .uids_into(names, &mut self.uids)
            .map_err(|e| e.to_string())?;
        let new_names = self.uids.iter().any(|&(_, new)| new);
        self.undurable |= new_names;
        let metric = self.uids[0].0;
        self.tag_uids.clear();
        self.tag_uids
            .extend(self.uids[1..].chunks_exact(2).map(|kv| (kv[0].0, kv[1].0)));
        self.tag_uids.sort_unstable();
        table
            .key
            .encode_tag_key(metric, &self.tag_uids, time, &mut self.key);
        let series = &self.key[table.key.prefix_len()..self.key.len() - 8];
        if at_limit && !dictionary.has_series(table_name, series) {
            return Err(self.over_limit(open));
        }
        match dictionary.series(table_name, series, open.series_limit) {
            SeriesOutcome::Known => {
                if let Some(text) = text.filter(|_| !new_names) {
                    dictionary.remember_written(table_name, text, series, metric, &self.tag_uids);
                }
            }
            SeriesOutcome::Pending => self.undurable = true,
            SeriesOutcome::OverLimit => return Err(self.over_limit(open)),
        }
        Ok(())
    }

    /// Counts a point of a new series refused at the table's limit, and
    /// says so.
    fn over_limit(&mut self, open: &OpenTags) -> PointRefusal {
        let table = self.table;
        metrics::counter!("halite_series_refused_total", "table" => table.name.to_string())
            .increment(1);
        PointRefusal::series_limit(format!(
            "table `{}` holds its limit of {} series: points of new series are refused \
             (raise the table's series_limit, or drop series)",
            table.name, open.series_limit
        ))
    }

    /// The uniquifier of a point that carries none.
    fn next_uniquifier(&mut self, f: &KeyField) -> Result<u64, String> {
        if f.encoding.width() != 8 {
            return Err(format!(
                "point has no tag `{}`: halite numbers only 8-byte uniquifiers itself, and this one is {} bytes",
                f.name,
                f.encoding.width()
            ));
        }
        Ok(match self.uniquifiers {
            Uniquifiers::Sequence => next_in_sequence(),
            Uniquifiers::Message { stream, offset } => {
                let index = self.message_index;
                if index >= 1 << 16 {
                    return Err(format!(
                        "a message holds at most 65,536 points for a table with a uniquifier (`{}`)",
                        f.name
                    ));
                }
                self.message_index += 1;
                (stream << 52) | ((offset as u64 & ((1 << 36) - 1)) << 16) | index
            }
        })
    }

    /// Finds each key field's tag ([`Self::key_tags`]), unless the point's
    /// tag names are the last point's; a tag that is no key field refuses
    /// the point.
    fn match_key_tags(&mut self, point: &impl PointFields) -> Result<(), String> {
        if self.key_tags_known
            && names_are(
                &self.key_tag_names,
                &self.key_tag_name_ends,
                point.tags().map(|(k, _)| k),
            )
        {
            return Ok(());
        }
        let table = self.table;
        self.key_tags_known = false;
        self.key_tags.clear();
        self.key_tags.resize(table.key.fields.len(), NO_TAG);
        self.key_tag_names.clear();
        self.key_tag_name_ends.clear();
        for (i, (k, _)) in point.tags().enumerate() {
            match table.key.fields.iter().position(|f| f.name == k) {
                Some(field) if self.key_tags[field] == NO_TAG => {
                    self.key_tags[field] = u32::try_from(i).unwrap_or(NO_TAG);
                }
                // Of two tags of one name neither is the key's: InfluxDB
                // refuses such a point, and so does every door here.
                Some(_) => return Err("duplicate tags".into()),
                None => {
                    return Err(format!(
                        "tag `{}` is not a key field of table `{}` (key fields: {})",
                        quote_prefix(k),
                        table.name,
                        table
                            .key
                            .fields
                            .iter()
                            .map(|f| f.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
            }
            self.key_tag_names.extend_from_slice(k.as_bytes());
            self.key_tag_name_ends.push(self.key_tag_names.len());
        }
        self.key_tags_known = true;
        Ok(())
    }

    /// Whether `point` has the field names, in the same order, of the point
    /// `order` was worked out for.
    fn same_names_as_last(&self, point: &impl PointFields) -> bool {
        names_are(
            &self.order_names,
            &self.order_name_ends,
            (0..point.field_count()).map(|i| point.field(i).0),
        )
    }

    /// Adds rows encoded elsewhere (a rows message, `rows_message.rs`),
    /// each to its region by its key. A row whose key does not fit the
    /// table's key schema is refused (the rows before it stay added).
    pub fn add_encoded_rows(&mut self, rows: Vec<Vec<crate::cell::Entry>>) -> Result<(), String> {
        let table = self.table;
        for (i, row) in rows.into_iter().enumerate() {
            let Some(first) = row.first() else {
                continue;
            };
            let row_key = crate::cell::row_of(&first.key).to_vec();
            // Open tag sets: the sender's node gave the names their UIDs
            // in the shared dictionary (cluster mode), and recorded the
            // series, before it sent them.
            if table.key.is_open_tags() {
                if table.key.tag_series(&row_key).is_none() {
                    return Err(format!(
                        "row {i}: a key of {} bytes that is no series of open tags and a time \
                         (table `{}`)",
                        row_key.len(),
                        table.name
                    ));
                }
            } else if row_key.len() != table.key.key_len() {
                return Err(format!(
                    "row {i}: a key of {} bytes, where table `{}` has keys of {}",
                    row_key.len(),
                    table.name,
                    table.key.key_len()
                ));
            }
            // Salted as this node's schema says: the sender may have
            // encoded it before the table's bucket count changed.
            let mut salted = row_key.clone();
            table.key.resalt_row(&mut salted);
            let region = table
                .regions
                .partition_point(|r| compare_bytes(&r.start, &salted).is_le())
                .saturating_sub(1);
            // Every key checked before the row is begun: a refused row
            // leaves nothing behind.
            let keys = row
                .iter()
                .map(|e| {
                    KeyRef::parse(&e.key)
                        .filter(|k| k.row == row_key.as_slice())
                        .ok_or_else(|| format!("row {i}: a cell key of another row"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let batch = &mut self.batches[region];
            for (e, k) in row.iter().zip(keys) {
                batch.push(
                    &salted,
                    k.family,
                    k.qualifier,
                    k.timestamp,
                    k.kind,
                    e.ttl_ms,
                    &e.value,
                );
            }
            batch.end_row();
            self.rows += 1;
        }
        Ok(())
    }

    pub fn finish(mut self) -> RoutedRows {
        RoutedRows {
            region_ids: self.table.regions.iter().map(|r| r.id).collect(),
            batches: std::mem::take(&mut self.batches),
            salt_generation: self.table.key.salt_generation(),
        }
    }
}

/// Whether `names` are, in order, the names kept concatenated in `kept`
/// with their ends in `ends`.
fn names_are<'n>(kept: &[u8], ends: &[usize], names: impl Iterator<Item = &'n str>) -> bool {
    let mut from = 0;
    let mut ends = ends.iter();
    let same = names.into_iter().all(|name| match ends.next() {
        Some(&end) => {
            let last = &kept[from..end];
            from = end;
            bytes_equal(last, name.as_bytes())
        }
        None => false,
    });
    same && ends.next().is_none()
}

/// The value of key field `f` for a point: the point's time (in the
/// table's unit) for timestamp fields, the measurement for
/// `metric`/`measurement` without a tag of that name, the number given for
/// a uniquifier without a tag, else the tag.
fn key_field_value<'p>(
    table: &TableDescriptor,
    f: &KeyField,
    tag: Option<&'p str>,
    point: &'p impl PointFields,
    ts: u64,
    uniquifier: Option<u64>,
) -> Result<FieldRef<'p>, crate::error::Error> {
    let bad = crate::error::Error::InvalidInput;
    Ok(match (&f.encoding, tag) {
        (FieldEncoding::Timestamp | FieldEncoding::ReversedTimestamp, _) => FieldRef::Uint(ts),
        (FieldEncoding::String { .. }, Some(v)) => FieldRef::Str(v),
        (FieldEncoding::String { .. }, None) if f.name == "metric" || f.name == "measurement" => {
            FieldRef::Str(point.measurement())
        }
        (FieldEncoding::Uint { .. } | FieldEncoding::Uniquifier { .. }, Some(v)) => {
            FieldRef::Uint(v.parse().map_err(|_| {
                bad(format!(
                    "tag `{}` must be an unsigned integer, got `{}`",
                    f.name,
                    quote_prefix(v)
                ))
            })?)
        }
        (FieldEncoding::Uniquifier { .. }, None) => FieldRef::Uint(uniquifier.unwrap_or(0)),
        (_, None) => {
            return Err(bad(format!(
                "point has no tag `{}`, a key field of table `{}`",
                f.name, table.name
            )));
        }
    })
}

/// How a body (an HTTP write, a Kafka message) carries its points.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// Influx line protocol, one or more lines.
    #[default]
    Line,
    /// One JSON point or an array of them.
    Json,
    /// A Prometheus remote-write request (1.0: a snappy-compressed
    /// protobuf `WriteRequest`), one a message.
    RemoteWrite,
}

/// Bytes a line of a large body is taken to have at the least when its
/// rows are sized (a point with a tag and a field and its time has more).
const MIN_SIZED_LINE: usize = 32;

/// What [`write_lines`] did: rows written, and the bad lines (numbered in
/// the whole text).
#[derive(Debug, Default)]
pub struct LinesWritten {
    pub rows: usize,
    pub rejected: Refusals,
}

/// Where a write's encoded rows go: a single node's store (its regions'
/// WALs and MemStores), or in cluster mode the table's topic
/// (`kafka/topic_writer.rs`). Submitting hands rows on; waiting returns
/// once they are as durable as the destination makes them.
pub trait RowsSink {
    type Pending;
    fn submit_rows(
        &self,
        table: &TableDescriptor,
        rows: RoutedRows,
    ) -> Result<Self::Pending, crate::error::Error>;
    fn wait_rows(&self, pending: Self::Pending) -> Result<(), crate::error::Error>;
}

impl RowsSink for crate::store::Store {
    type Pending = crate::store::PendingBatch;

    fn submit_rows(
        &self,
        table: &TableDescriptor,
        rows: RoutedRows,
    ) -> Result<Self::Pending, crate::error::Error> {
        self.submit_encoded(&table.name, rows, None)
    }

    fn wait_rows(&self, pending: Self::Pending) -> Result<(), crate::error::Error> {
        self.wait(pending)
    }
}

/// Writes line protocol `body` into table `table` of `store`, returning
/// once every written row is durable as the table's durability says. Pieces
/// of [`LineWrite::piece_bytes`] (cut after a newline) are encoded and submitted
/// one after the other, so their writes are logged in text order per
/// region: of two points with the same key the later line wins, as in one
/// batch. Bad lines are skipped and reported; the good ones are written.
/// A body that is not UTF-8 anywhere is refused before anything is written.
pub fn write_lines<S: RowsSink>(
    sink: &S,
    table: &TableDescriptor,
    body: &[u8],
    how: &LineWrite<'_>,
) -> Result<LinesWritten, WriteLinesError> {
    let LineWrite {
        max_value_size,
        precision,
        ttl_ms,
        oldest_ms,
        now_ms,
        dictionary,
        piece_bytes,
    } = *how;
    let piece_bytes = piece_bytes.max(1);
    let text = std::str::from_utf8(body).map_err(WriteLinesError::NotUtf8)?;
    let mut out = LinesWritten::default();
    let mut pending = Vec::new();
    let mut lines_before = 0;
    let mut seen = None;
    let mut rest = text;
    while !rest.is_empty() {
        let cut = if rest.len() <= piece_bytes {
            rest.len()
        } else {
            memchr::memchr(b'\n', &rest.as_bytes()[piece_bytes..])
                .map_or(rest.len(), |at| piece_bytes + at + 1)
        };
        let (piece, after) = rest.split_at(cut);
        rest = after;
        let mut encoder =
            PointEncoder::new(table, max_value_size).map_err(WriteLinesError::Table)?;
        encoder.set_seen(seen.take());
        encoder.set_number_base(lines_before);
        encoder.set_ttl(ttl_ms);
        encoder.set_oldest(oldest_ms);
        if let Some((d, _)) = dictionary {
            encoder.set_dictionary(d);
        }
        let errors = encoder.add_lines(piece, precision, now_ms);
        seen = encoder.take_seen();
        if encoder.needs_durable_dictionary()
            && let Some((d, store)) = dictionary
        {
            d.make_durable(store).map_err(WriteLinesError::Store)?;
        }
        out.rejected.append(errors, lines_before);
        lines_before += memchr::memchr_iter(b'\n', piece.as_bytes()).count();
        let rows = encoder.finish();
        if rows.rows() > 0 {
            out.rows += rows.rows();
            pending.push(
                sink.submit_rows(table, rows)
                    .map_err(WriteLinesError::Store)?,
            );
        }
    }
    for p in pending {
        sink.wait_rows(p).map_err(WriteLinesError::Store)?;
    }
    Ok(out)
}

/// How [`write_lines`] reads and writes a body.
#[derive(Clone, Copy)]
pub struct LineWrite<'a> {
    /// A value longer refuses its point.
    pub max_value_size: usize,
    pub precision: Precision,
    /// Cell TTL of the written points.
    pub ttl_ms: Option<u64>,
    /// Points older (ms) are refused as beyond their retention policy.
    pub oldest_ms: Option<u64>,
    /// The time of points without one.
    pub now_ms: u64,
    /// For a table of open tag sets: its namespace's dictionary, and the
    /// store that keeps it.
    pub dictionary: Option<(&'a Dictionary, &'a crate::store::Store)>,
    /// Bytes encoded before they go to the writer shards (`server.write_piece`):
    /// a large body is encoded piece by piece, each handed to the shards as
    /// soon as it is encoded, so the shards log and insert one piece while
    /// the next is parsed.
    pub piece_bytes: usize,
}

/// Why [`write_lines`] failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum WriteLinesError {
    /// The table cannot take points (it has no column family).
    #[error("{0}")]
    Table(String),
    #[error("line protocol must be UTF-8: {0}")]
    NotUtf8(std::str::Utf8Error),
    #[error(transparent)]
    Store(#[from] crate::error::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::KeyRef;
    use crate::key::FieldValue;
    use line_protocol::{LineParser, parse_line};

    fn table() -> TableDescriptor {
        table_of(
            serde_json::json!([
                {"name": "metric", "type": "string", "width": 8},
                {"name": "host", "type": "string", "width": 8},
                {"name": "ts", "type": "reversed_timestamp"}
            ]),
            serde_json::json!({"buckets": 4}),
        )
    }

    /// Table `metrics:cpu` of one region with these key fields and salt.
    fn table_of(fields: serde_json::Value, salt: serde_json::Value) -> TableDescriptor {
        serde_json::from_value(serde_json::json!({
            "name": "metrics:cpu",
            "families": [{"name": "f"}],
            "key": {"fields": fields, "salt": salt},
            "durability": "SYNC_WAL",
            "regions": [{"id": 1, "start": "", "end": ""}],
            "created_ms": 0
        }))
        .expect("table descriptor")
    }

    #[test]
    fn points_become_rows_and_bad_points_add_nothing() {
        let t = table();
        let mut enc = PointEncoder::new(&t, 16).expect("encoder");
        let lines = [
            "cpu,host=h1 user=1.5,idle=2i 1000",
            "cpu,host=h1 user=0 1000",
            "cpu,rack=r1 user=1 1000",
            "cpu,host=a-very-long-host user=1 1000",
            "cpu,host=h2 s=\"0123456789abcdef\" 1000",
            "cpu,host=h2 s=\"short\" 2000",
        ];
        let mut points: Vec<Point<'_>> = lines
            .iter()
            .map(|l| parse_line(l).expect("parses"))
            .collect();
        // The line protocol parser refuses NaN itself; the encoder checks again
        // for every other decoder.
        points[1].fields[0].1 = Value::Float(f64::NAN);
        let outcomes: Vec<Result<(), PointRefusal>> = points
            .iter()
            .map(|p| enc.add(p, Precision::Milliseconds, 0))
            .collect();
        assert!(outcomes[0].is_ok() && outcomes[5].is_ok(), "{outcomes:?}");
        for (i, needle) in [
            (1, "finite"),
            (2, "not a key field"),
            (3, "width 8"),
            (4, "over the limit"),
        ] {
            let e = outcomes[i].as_ref().expect_err("bad point accepted");
            assert!(e.reason.contains(needle), "line {i}: {e}");
        }
        let batch = enc.finish().into_batch();
        assert_eq!(batch.rows(), 2);
        let key = |host: &str, ts: u64| {
            t.key
                .encode_ordered(&[
                    FieldValue::Str("cpu".into()),
                    FieldValue::Str(host.into()),
                    FieldValue::Uint(ts),
                ])
                .expect("key")
        };
        assert_eq!(batch.row_key(0), Some(key("h1", 1000).as_slice()));
        assert_eq!(batch.row_key(1), Some(key("h2", 2000).as_slice()));
        let cells: Vec<(Vec<u8>, u64, Value)> = batch
            .row(0)
            .map(|e| {
                let k = KeyRef::from_parts(e.row, e.after_row).expect("key");
                assert_eq!(k.family, b"f");
                (
                    k.qualifier.to_vec(),
                    k.timestamp,
                    Value::decode(e.value).expect("value"),
                )
            })
            .collect();
        // In key order (by field name), whatever the line's order.
        assert_eq!(
            cells,
            vec![
                (b"idle".to_vec(), 1000, Value::Int(2)),
                (b"user".to_vec(), 1000, Value::Float(1.5)),
            ]
        );
    }

    /// An encoder works out which tag is which key field once for a run of
    /// points with the same tag names: through one encoder, points whose
    /// tags change name, order, number or repeat get the keys and errors
    /// each gets from an encoder of its own.
    #[test]
    fn tags_find_their_key_fields_as_each_point_alone_would() {
        let t = table_of(
            serde_json::json!([
                {"name": "metric", "type": "string", "width": 8},
                {"name": "dc", "type": "string", "width": 4},
                {"name": "host", "type": "string", "width": 4},
                {"name": "ts", "type": "reversed_timestamp"}
            ]),
            serde_json::json!({"buckets": 4}),
        );
        let lines = [
            "cpu,host=h1,dc=d1 v=1 1000",
            "cpu,host=h2,dc=d2 v=1 1000",
            "cpu,dc=d3,host=h3 v=1 1000",
            "cpu,host=h4,dc=d4 v=1 1000",
            "cpu,host=h5,dc=d5,rack=r v=1 1000",
            "cpu,host=h6,dc=d6 v=1 1000",
            "cpu,host=h7 v=1 1000",
            "cpu,host=h8,dc=d8 v=1 1000",
            "cpu,host=h9,host=hA,dc=d9 v=1 1000",
            "cpu,host=hB,dc=dB,host=hC v=1 1000",
            "cpu,host=hD,dc=dD v=1 1000",
            "cpu,hos=hE,tdc=dE v=1 1000",
            "cpu,metric=mem,host=hF,dc=dF v=1 1000",
            "cpu,host=hG,dc=dG v=1 1000",
            "cpu v=1 1000",
            "cpu,host=hH,dc=dH v=1 1000",
        ];
        // Each line's outcome and row key through an encoder of its own.
        type Alone = (Result<(), PointRefusal>, Option<Vec<u8>>);
        let alone: Vec<Alone> = lines
            .iter()
            .map(|l| {
                let mut enc = PointEncoder::new(&t, 64).expect("encoder");
                let outcome = enc.add(&parse_line(l).expect("parses"), Precision::Milliseconds, 0);
                let batch = enc.finish().into_batch();
                (outcome, batch.row_key(0).map(<[u8]>::to_vec))
            })
            .collect();
        let mut enc = PointEncoder::new(&t, 64).expect("encoder");
        let mut parser = LineParser::default();
        let together: Vec<Result<(), PointRefusal>> = lines
            .iter()
            .map(|l| {
                let point = parser.parse(l).expect("parses");
                enc.add(&point, Precision::Milliseconds, 0)
            })
            .collect();
        let batch = enc.finish().into_batch();
        let mut row = 0;
        for (i, ((outcome, key), shared)) in alone.iter().zip(&together).enumerate() {
            assert_eq!(outcome, shared, "line {i}: {}", lines[i]);
            if outcome.is_ok() {
                assert_eq!(batch.row_key(row), key.as_deref(), "line {i}: {}", lines[i]);
                row += 1;
            }
        }
        assert_eq!(row, batch.rows());
        // The cases meant: refusals among them, and two tags of one name
        // refused as InfluxDB refuses them (the first was the key's).
        let refused = together.iter().filter(|o| o.is_err()).count();
        assert_eq!(refused, 6, "{together:?}");
        assert_eq!(together[8], Err("duplicate tags".into()));
        assert_eq!(together[9], Err("duplicate tags".into()));
    }

    /// A series met again (in the same body, or in the thread's next
    /// encoder) takes its key from the keys kept by its text: the key its
    /// tags give, for keys that end in either kind of time, and never a key
    /// kept for another table of the same name or for a salt that reads
    /// the time.
    #[test]
    fn series_met_again_get_the_keys_their_tags_give() {
        let table = |time: &str, salt: serde_json::Value| {
            table_of(
                serde_json::json!([
                    {"name": "metric", "type": "string", "width": 8},
                    {"name": "host", "type": "string", "width": 4},
                    {"name": "dc", "type": "string", "width": 4},
                    {"name": "ts", "type": time}
                ]),
                salt,
            )
        };
        let reversed = table("reversed_timestamp", serde_json::json!({"buckets": 4}));
        // Of the same name, but other salt buckets: other series bytes.
        let forward = table("timestamp", serde_json::json!({"buckets": 7}));
        let by_time = table(
            "reversed_timestamp",
            serde_json::json!({"buckets": 4, "from": "timestamp"}),
        );
        assert!(reversed.key.is_series_then_time() && forward.key.is_series_then_time());
        assert!(!by_time.key.is_series_then_time());
        let body = "cpu,host=h1,dc=d1 v=1 1000\n\
                    cpu,host=h2,dc=d1 v=1 1000\n\
                    cpu,host=h1,dc=d1 v=2 2000\n\
                    cpu,dc=d1,host=h1 v=3 3000\n\
                    cpu,host=h1,dc=d1,x=1 v=4 4000\n\
                    cpu,host=h1,dc=d1 v=5 5000\n\
                    mem,host=h1,dc=d1 v=6 6000\n\
                    cpu,host=h1,dc=d1 v=7 7000\n\
                    cpu,host=h\\ 2,dc=d1 v=8 8000\n\
                    cpu,host=h1,dc=d1 v=oops 8500\n\
                    cpu,host=h\\ 2,dc=d1 v=9 9000\n";
        let expected = [
            ("cpu", "h1", 1000, 1.0),
            ("cpu", "h2", 1000, 1.0),
            ("cpu", "h1", 2000, 2.0),
            ("cpu", "h1", 3000, 3.0),
            ("cpu", "h1", 5000, 5.0),
            ("mem", "h1", 6000, 6.0),
            ("cpu", "h1", 7000, 7.0),
            ("cpu", "h 2", 8000, 8.0),
            ("cpu", "h 2", 9000, 9.0),
        ];
        for t in [&reversed, &forward, &by_time, &reversed] {
            // Two encoders one after the other: the second meets every
            // series again.
            for round in 0..2 {
                let mut enc = PointEncoder::new(t, 64).expect("encoder");
                let refused = enc
                    .add_body(
                        Format::Line,
                        body.as_bytes(),
                        Some(Precision::Milliseconds),
                        0,
                    )
                    .expect("body");
                assert_eq!(refused.len(), 2, "{refused:?}");
                let refused = refused.first(2);
                assert_eq!(refused[0].0, 5);
                assert!(
                    refused[0].1.reason.contains("not a key field"),
                    "{refused:?}"
                );
                // A bad value of a known series is refused as any other.
                assert_eq!(refused[1].0, 10);
                let alone = parse_line("cpu,host=h1,dc=d1 v=oops 8500").expect_err("refused");
                assert_eq!(refused[1].1.reason, alone);
                let batch = enc.finish().into_batch();
                assert_eq!(batch.rows(), expected.len());
                for (row, (metric, host, ts, v)) in expected.iter().enumerate() {
                    let cells: Vec<(Vec<u8>, u64, Value)> = batch
                        .row(row)
                        .map(|e| {
                            let k = KeyRef::from_parts(e.row, e.after_row).expect("key");
                            let value = Value::decode(e.value).expect("value");
                            (k.qualifier.to_vec(), k.timestamp, value)
                        })
                        .collect();
                    assert_eq!(cells, vec![(b"v".to_vec(), *ts, Value::Float(*v))]);
                    let key = t
                        .key
                        .encode_ordered(&[
                            FieldValue::Str((*metric).into()),
                            FieldValue::Str((*host).into()),
                            FieldValue::Str("d1".into()),
                            FieldValue::Uint(*ts),
                        ])
                        .expect("key");
                    assert_eq!(
                        batch.row_key(row),
                        Some(key.as_slice()),
                        "round {round}, row {row}, {:?}",
                        t.key.fields[3].encoding
                    );
                }
            }
        }
    }

    /// A point's cells go out sorted by name, and its row says so only
    /// when no two names are equal: a row claimed sorted is taken by the
    /// MemStore as it is, where equal keys must be resolved (the last
    /// written wins).
    #[test]
    fn rows_are_marked_sorted_only_when_their_names_differ() {
        let t = table();
        let mut enc = PointEncoder::new(&t, 16).expect("encoder");
        for line in [
            "cpu,host=h1 user=1.5,idle=2i 1000",
            "cpu,host=h2 user=1,user=2 1000",
            "cpu,host=h3 b=1,a=2,b=3 1000",
            "cpu,host=h4 user=1.5,idle=2i 1000",
        ] {
            let point = parse_line(line).expect("parses");
            enc.add(&point, Precision::Milliseconds, 0).expect("adds");
        }
        let batch = enc.finish().into_batch();
        let sorted: Vec<bool> = (0..batch.rows()).map(|i| batch.row_is_sorted(i)).collect();
        assert_eq!(sorted, vec![true, false, false, true]);
        // Through the MemStore: the last of equal names wins.
        let memstore = crate::region::memstore::MemStore::new();
        memstore.insert_batch(&batch, 1, 0);
        let row_cells = |i: usize| -> Vec<(String, Value)> {
            let (mut out, mut keys) = (Vec::new(), Vec::new());
            let row = batch.row_key(i).expect("row");
            memstore.load_rows(row, false, u64::MAX, 1, &mut out, &mut keys);
            out.iter()
                .map(|e| {
                    let k = KeyRef::parse(e.key(&keys)).expect("key");
                    assert_eq!(k.row, row);
                    let name = String::from_utf8(k.qualifier.to_vec()).expect("name");
                    (name, Value::decode(e.value()).expect("value"))
                })
                .collect()
        };
        let cells = |pairs: &[(&str, Value)]| -> Vec<(String, Value)> {
            pairs
                .iter()
                .map(|(q, v)| (q.to_string(), v.clone()))
                .collect()
        };
        let h1 = cells(&[("idle", Value::Int(2)), ("user", Value::Float(1.5))]);
        assert_eq!(row_cells(0), h1);
        assert_eq!(row_cells(1), cells(&[("user", Value::Float(2.0))]));
        assert_eq!(
            row_cells(2),
            cells(&[("a", Value::Float(2.0)), ("b", Value::Float(3.0))])
        );
        assert_eq!(row_cells(3), h1);
    }

    #[test]
    fn uniquifiers_number_points_again_the_same_for_a_message_read_twice() {
        let mut t = table();
        t.key.fields.push(crate::key::KeyField {
            name: "seq".into(),
            encoding: FieldEncoding::Uniquifier { width: 8 },
        });
        let keys = |partition: i32, offset: i64| {
            let mut enc = PointEncoder::new(&t, 1 << 10).expect("encoder");
            enc.set_uniquifiers(Uniquifiers::message("cpu", partition, offset));
            let errors = enc
                .add_body(
                    Format::Line,
                    b"cpu,host=h1 v=1 1000\ncpu,host=h1 v=2 1000\n",
                    None,
                    0,
                )
                .expect("body");
            assert!(errors.is_empty(), "{errors:?}");
            let batch = enc.finish().into_batch();
            (0..batch.rows())
                .map(|i| batch.row_key(i).expect("key").to_vec())
                .collect::<Vec<_>>()
        };
        let first = keys(3, 41);
        assert_eq!(first.len(), 2, "same-time points of one message stay apart");
        assert_ne!(first[0], first[1]);
        assert_eq!(keys(3, 41), first, "a replayed message rewrites its points");
        assert!(keys(3, 42).iter().all(|k| !first.contains(k)));
        assert!(keys(4, 41).iter().all(|k| !first.contains(k)));
        // HTTP writes draw from the sequence: never the same number twice.
        let mut enc = PointEncoder::new(&t, 1 << 10).expect("encoder");
        for _ in 0..2 {
            enc.add_body(Format::Line, b"cpu,host=h1 v=1 1000\n", None, 0)
                .expect("body");
        }
        let batch = enc.finish().into_batch();
        assert_eq!(batch.rows(), 2);
        assert_ne!(batch.row_key(0), batch.row_key(1));
    }
}
