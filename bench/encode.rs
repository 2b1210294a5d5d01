//! Decode-and-encode benchmark (`cargo bench --bench encode`): TSBS lines
//! of line protocol through `PointEncoder::add_body` into entry batches,
//! in-process, as the Kafka writers (one line per message) and the HTTP
//! write (5,000-line bodies) call it. Prints nanoseconds per row; the
//! steadier figure for a change to the parser or the encoder than a whole
//! service benchmark. Then the store side: a 64 KiB data block of TSBS rows
//! encoded as a TIME_SERIES block and decoded back (what a block read from
//! disk costs before it is cached), with the bytes per value. And the
//! MemStore insert of the HTTP path's batches into a table pre-split in 16
//! regions, as the writers do it. And TSBS's devops lines (4,000 hosts,
//! every tag a key field) one a Kafka message, as the Kafka writers decode
//! them.

use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use halite::catalog::TableDescriptor;
use halite::ingest::line_protocol::Precision;
use halite::ingest::{Format, PointEncoder};
use halite::tsbs;

const HOSTS: u64 = 100;

fn table() -> TableDescriptor {
    table_with_regions(serde_json::json!([{"id": 1, "start": "", "end": ""}]))
}

/// The table split at each salt bucket, as `make run` creates it.
fn split_table() -> TableDescriptor {
    let regions: Vec<_> = (0..16u8)
        .map(|b| {
            let start = if b == 0 {
                String::new()
            } else {
                format!("{b:02x}")
            };
            let end = if b == 15 {
                String::new()
            } else {
                format!("{:02x}", b + 1)
            };
            serde_json::json!({"id": b as u64 + 1, "start": start, "end": end})
        })
        .collect();
    table_with_regions(serde_json::Value::Array(regions))
}

/// `configs/tsbs-devops.toml`'s table (every one of TSBS's ten tags a key
/// field), split at each salt bucket.
fn devops_table() -> TableDescriptor {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/tsbs-devops.toml");
    // The file names no broker: `halite serve` is given one.
    let config =
        halite::config::Config::load(Some(&path), &["kafka.brokers=\"127.0.0.1:9\"".into()])
            .expect("configs/tsbs-devops.toml loads");
    let table = config.tables.into_iter().next().expect("a table");
    TableDescriptor {
        name: table.name,
        families: table.families,
        key: table.key,
        durability: table.durability,
        regions: split_table().regions,
        created_ms: 0,
    }
}

fn table_with_regions(regions: serde_json::Value) -> TableDescriptor {
    serde_json::from_value(serde_json::json!({
        "name": "metrics:cpu",
        "families": [{"name": "f"}],
        "key": {
            "fields": [
                {"name": "metric", "type": "string", "width": 16},
                {"name": "host", "type": "string", "width": 16},
                {"name": "ts", "type": "reversed_timestamp"}
            ],
            "salt": {"buckets": 16, "width": 1, "from": "series"}
        },
        "durability": "SYNC_WAL",
        "regions": regions,
        "created_ms": 0
    }))
    .expect("table descriptor")
}

fn main() {
    let rows: u64 = std::env::var("HALITE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let lines: Vec<String> = (0..rows)
        .map(|i| {
            let mut s = String::new();
            tsbs::cpu_line(i % HOSTS, i / HOSTS, &mut s);
            s
        })
        .collect();
    let table = table();
    for pass in 0..3 {
        // Kafka: one line per message, 2,000 messages per batch.
        let t = Instant::now();
        let cells = as_kafka_batches(&table, &lines);
        let per_message = t.elapsed().as_nanos() as f64 / rows as f64;
        assert_eq!(cells as u64, rows * 10);
        // HTTP: 5,000-line bodies.
        let bodies: Vec<String> = lines.chunks(5000).map(|c| c.concat()).collect();
        let t = Instant::now();
        for body in &bodies {
            let mut enc = PointEncoder::new(&table, 1 << 20).expect("encoder");
            let bad = enc
                .add_body(
                    Format::Line,
                    body.as_bytes(),
                    Some(Precision::Milliseconds),
                    0,
                )
                .expect("body");
            assert!(bad.is_empty());
            std::hint::black_box(enc.finish());
        }
        let per_body_line = t.elapsed().as_nanos() as f64 / rows as f64;
        println!(
            "encode pass={pass} kafka_ns_per_row={per_message:.0} http_ns_per_row={per_body_line:.0}"
        );
    }
    memstore_insert(&lines);
    devops(rows);
    time_series_block();
}

/// TSBS's devops lines (4,000 hosts, ten tags, every tag a key field of a
/// table split in 16 regions), one line a Kafka message, as the Kafka leg
/// of `make bench-scale` sends them. Not inlined, so callgrind can count
/// it alone (`--toggle-collect=encode::devops`).
#[inline(never)]
fn devops(rows: u64) {
    use halite::tsbs::devops;
    let hosts = 4_000;
    let prefixes: Vec<String> = (0..hosts).map(devops::series_prefix).collect();
    let lines: Vec<String> = (0..rows)
        .map(|i| {
            let mut s = String::new();
            devops::line(
                &prefixes[(i % hosts) as usize],
                i % hosts,
                i / hosts,
                &mut s,
            );
            s
        })
        .collect();
    let table = devops_table();
    for pass in 0..3 {
        let t = Instant::now();
        let cells = as_kafka_batches(&table, &lines);
        let per_message = t.elapsed().as_nanos() as f64 / rows as f64;
        assert_eq!(cells as u64, rows * 10);
        println!("devops pass={pass} kafka_ns_per_row={per_message:.0}");
    }
}

/// `lines` encoded as the Kafka writers do: one line a message, 2,000
/// messages a batch; the cells made.
fn as_kafka_batches(table: &TableDescriptor, lines: &[String]) -> usize {
    let mut cells = 0;
    for chunk in lines.chunks(2000) {
        let mut enc = PointEncoder::new(table, 1 << 20).expect("encoder");
        enc.reserve_for_bytes(chunk.iter().map(String::len).sum());
        for l in chunk {
            let bad = enc
                .add_body(Format::Line, l.as_bytes(), Some(Precision::Milliseconds), 0)
                .expect("body");
            assert!(bad.is_empty(), "{bad:?}");
        }
        cells += enc.finish().cells();
    }
    cells
}

/// 5,000-line bodies encoded for 16 regions, each region's rows inserted
/// into its own MemStore batch by batch, as a writer does.
fn memstore_insert(lines: &[String]) {
    use halite::region::memstore::MemStore;
    let table = split_table();
    let encoded: Vec<_> = lines
        .chunks(5000)
        .map(|c| {
            let mut enc = PointEncoder::new(&table, 1 << 20).expect("encoder");
            let bad = enc
                .add_body(
                    Format::Line,
                    c.concat().as_bytes(),
                    Some(Precision::Milliseconds),
                    0,
                )
                .expect("body");
            assert!(bad.is_empty());
            enc.finish()
        })
        .collect();
    for pass in 0..3 {
        let memstores: Vec<MemStore> = (0..16).map(|_| MemStore::new()).collect();
        let mut seq = 1;
        let t = Instant::now();
        for rows in &encoded {
            for (batch, mem) in rows.batches.iter().zip(&memstores) {
                mem.insert_batch(batch, seq, 0);
                seq += batch.rows() as u64;
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / lines.len() as f64;
        let cells: usize = memstores.iter().map(MemStore::cells).sum();
        assert_eq!(cells, lines.len() * 10);
        println!("memstore pass={pass} regions=16 insert_ns_per_row={ns:.0}");
    }
}

/// One 64 KiB block of one host's rows, newest first, as a flush writes it.
fn time_series_block() {
    use halite::cell::{CellKind, encode_key};
    use halite::region::sst::block::BlockBuilder;
    use halite::region::sst::ts_block;
    use halite::value::Value;
    let mut builder = BlockBuilder::new(true);
    let mut entries = 0;
    'rows: for step in (0..100_000u64).rev() {
        let ts = tsbs::T0_MS + step * tsbs::INTERVAL_MS;
        let row = tsbs::cpu_row_key(7, ts);
        let mut fields: Vec<(usize, &str)> = tsbs::CPU_FIELDS.iter().copied().enumerate().collect();
        fields.sort_by_key(|f| f.1);
        for (i, f) in fields {
            let key = encode_key(&row, b"f", f.as_bytes(), ts, CellKind::Put, false);
            builder.add(
                &key,
                None,
                &Value::Float(tsbs::cpu_value(7, step, i)).encode(),
            );
            entries += 1;
            if builder.size() >= 64 * 1024 {
                break 'rows;
            }
        }
    }
    let body = builder.finish();
    let rounds = 200;
    let t = Instant::now();
    let mut encoded = Vec::new();
    for _ in 0..rounds {
        encoded = ts_block::encode(body.clone()).expect("encodes");
    }
    let encode_ns = t.elapsed().as_nanos() as f64 / (rounds * entries) as f64;
    let t = Instant::now();
    for _ in 0..rounds {
        let decoded = ts_block::decode(&encoded, 1 << 20).expect("decodes");
        assert_eq!(decoded.len(), body.len());
    }
    let decode_ns = t.elapsed().as_nanos() as f64 / (rounds * entries) as f64;
    println!(
        "time_series_block entries={entries} plain_bytes={} encoded_bytes={} bytes_per_value={:.2} \
         encode_ns_per_value={encode_ns:.0} decode_ns_per_value={decode_ns:.0}",
        body.len(),
        encoded.len(),
        encoded.len() as f64 / entries as f64
    );
}
