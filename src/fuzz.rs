//! Entry points of the fuzz targets (`tests/fuzz`, run with `cargo fuzz`)
//! and of their regression test (`tests/fuzz_regressions.rs`), which feeds
//! every saved input through the same functions. Each takes arbitrary bytes
//! and must neither panic nor hang: bad input is an error value.

use std::sync::OnceLock;

use crate::catalog::TableDescriptor;
use crate::ingest::line_protocol::{LineParser, Precision};
use crate::ingest::{Format, PointEncoder};

/// A salted table of two string key fields and a reversed timestamp, as
/// the decoders meet it in production.
fn table() -> &'static TableDescriptor {
    static TABLE: OnceLock<TableDescriptor> = OnceLock::new();
    TABLE.get_or_init(|| {
        serde_json::from_value(serde_json::json!({
            "name": "metrics:cpu",
            "families": [{"name": "f", "data_block_encoding": "TIME_SERIES"}],
            "key": {
                "fields": [
                    {"name": "metric", "type": "string", "width": 8},
                    {"name": "host", "type": "string", "width": 8},
                    {"name": "ts", "type": "reversed_timestamp"}
                ],
                "salt": {"buckets": 4}
            },
            "durability": "SYNC_WAL",
            "regions": [
                {"id": 1, "start": "", "end": "02"},
                {"id": 2, "start": "02", "end": ""}
            ],
            "created_ms": 0
        }))
        .expect("a valid table descriptor")
    })
}

/// Line protocol: the line parser on every line, then the whole body
/// through the point encoder (as an HTTP write or a Kafka message).
pub fn line_protocol(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let mut parser = LineParser::default();
        for (_, line) in crate::ingest::line_protocol::lines(text) {
            let _ = parser.parse(line).map(|p| p.to_point());
        }
    }
    if let Ok(mut enc) = PointEncoder::new(table(), 1 << 16) {
        let _ = enc.add_body(Format::Line, data, Some(Precision::Nanoseconds), 1);
        let rows = enc.finish();
        assert!(rows.cells() >= rows.rows());
    }
}

/// JSON points through the point encoder.
pub fn json_points(data: &[u8]) {
    if let Ok(mut enc) = PointEncoder::new(table(), 1 << 16) {
        let _ = enc.add_body(Format::Json, data, Some(Precision::Milliseconds), 1);
    }
}

/// Row key decoding: a key that decodes encodes back to the same fields
/// (the salt is recomputed from them, so it may differ in junk input).
pub fn key_codec(data: &[u8]) {
    let schema = &table().key;
    if let Ok(decoded) = schema.decode(data) {
        let values: Vec<crate::key::FieldValue> =
            decoded.fields.into_iter().map(|(_, v)| v).collect();
        let again = schema
            .encode_ordered(&values)
            .expect("decoded fields encode again");
        let salt = schema.prefix_len();
        assert_eq!(again[salt..], data[salt..], "a decoded key encodes back");
    }
    let _ = crate::cell::KeyRef::parse(data);
}

/// A WAL segment: the recovery's reading of it (frames, checksums, edits,
/// sync points) as the live segment and as a closed one.
pub fn wal_segment(data: &[u8]) {
    for is_last in [true, false] {
        let _ = crate::region::wal::check_segment(data, 1, is_last);
    }
    let mut pos = 0;
    while pos < data.len() {
        match crate::region::wal::record::read_frame(data, pos, 1) {
            crate::region::wal::record::Frame::Record { payload, next, .. } => {
                let _ = crate::region::wal::record::decode_edits(payload);
                pos = next;
            }
            _ => break,
        }
    }
}

/// A store file: opened, checked and read from start to end; its blocks
/// also as a frame and as a time-series block on their own.
pub fn store_file(data: &[u8]) {
    let _ = crate::region::sst::frame::unframe(data, 1 << 20);
    let _ = crate::region::sst::ts_block::decode(data, 1 << 20);
    let Ok(dir) = tempfile::tempdir() else { return };
    let path = dir.path().join("00000000000000000001.sst");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let cache = crate::region::sst::cache::BlockCache::new(1 << 20);
    if let Ok(reader) = crate::region::sst::SstReader::open(&path, 1, cache, true, false) {
        let _ = reader.check_all();
        let mut it = reader.iter();
        if it.seek_to_first().is_ok() {
            let mut n = 0;
            while it.valid() && n < 100_000 {
                if it.advance().is_err() {
                    break;
                }
                n += 1;
            }
        }
        let _ = reader.last_row_before(None);
        let _ = reader.middle_row();
    }
}

/// The body of `POST /api/v1/tables/{t}/scan`.
pub fn scan_request(data: &[u8]) {
    let _ = crate::api::parse_scan_request(data);
}

/// An InfluxQL `/query` text: parsed, or refused with InfluxDB's words;
/// and the same bytes as an open-tag row key, which decodes only when its
/// tag count and length agree.
pub fn influxql(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        match crate::query::influxql::parse(text) {
            Ok(statements) => {
                assert!(!statements.is_empty());
                // Every walk of a condition, however deep or long.
                for st in &statements {
                    if let crate::query::influxql::Statement::Select(s) = st
                        && let Some(condition) = &s.condition
                    {
                        crate::query::influx_select::walk_condition(condition);
                    }
                }
            }
            Err(e) => assert!(!e.is_empty(), "an error says what is wrong"),
        }
    }
    let schema = crate::key::KeySchema {
        fields: Vec::new(),
        salt: Some(crate::key::Salt {
            buckets: 4,
            width: 1,
            from: crate::key::SaltFrom::Series,
            epochs: Vec::new(),
        }),
        md5_prefix: 0,
        time_unit: crate::key::TimeUnit::Nanoseconds,
        tags: Some(crate::key::OpenTags::default()),
    };
    // Only keys halite writes (tags sorted by tag key) encode back.
    if let Some(k) = schema.decode_tag_key(data)
        && k.tags.windows(2).all(|w| w[0].0 < w[1].0)
    {
        let mut again = Vec::new();
        schema.encode_tag_key(k.metric, &k.tags, k.time, &mut again);
        assert_eq!(again[1..], data[1..], "a decoded open-tag key encodes back");
    }
}

/// A Prometheus remote-write body (snappy, then protobuf), and the same
/// bytes as the protobuf alone, and as a message read field by field (as
/// remote read's requests are).
pub fn remote_write(data: &[u8]) {
    use crate::ingest::remote_write;
    let _ = remote_write::decode_write_request(data);
    if let Ok(series) = remote_write::decode_series_list(data) {
        // What reads back encodes again and reads back the same.
        let again = remote_write::encode_write_request(&series);
        let read_again = remote_write::decode_write_request(&again)
            .expect("a write request halite encoded reads back");
        assert_eq!(
            read_again.len(),
            series.len(),
            "a read write request encodes back"
        );
        for (a, b) in read_again.iter().zip(&series) {
            assert_eq!(a.labels, b.labels);
            // Bits, not values: NaN (a staleness marker) is not equal to itself.
            let bits = |s: &remote_write::Series| -> Vec<(u64, i64)> {
                s.samples.iter().map(|(v, t)| (v.to_bits(), *t)).collect()
            };
            assert_eq!(bits(a), bits(b));
        }
    }
    let _ = remote_write::fields(data);
}
