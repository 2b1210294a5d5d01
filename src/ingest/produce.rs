//! `halite produce`: deterministic TSBS-style cpu data into a Kafka topic,
//! for the demo, the tests and the benchmarks. Point `i` is host
//! `i % hosts` at step `i / hosts`; messages are keyed by host, so one
//! host's points stay in order in one partition. For a cluster
//! (`by_bucket`), a message goes to the partition that carries its
//! series' salt bucket in the table: `bucket % partitions`.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use super::line_protocol::Precision;
use super::{Format, PointEncoder};
use crate::catalog::TableDescriptor;
use crate::tsbs;

/// Which points `halite produce` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dataset {
    /// `cpu,host=host_0042 usage_user=…,…` (one tag, ten fields): the
    /// demo's and the Kafka tests'.
    #[default]
    Cpu,
    /// TSBS's devops cpu-only points with its ten tags (hostname, region,
    /// datacenter, …), the bytes `make bench-scale` sends; line protocol.
    Devops,
}

/// What to produce.
#[derive(Debug, Clone)]
pub struct ProduceSpec {
    pub brokers: String,
    pub topic: String,
    pub dataset: Dataset,
    pub hosts: u64,
    /// Points in all (one row each).
    pub points: u64,
    /// Points per message (line protocol lines, or a JSON array).
    pub points_per_message: usize,
    pub format: Format,
    /// Points per second; 0 is as fast as the broker takes them.
    pub rate: u64,
    /// Send each message to the partition of its bucket in this table
    /// (cluster mode), instead of by the hash of its key.
    pub by_bucket: Option<TableDescriptor>,
    /// Stamp each host's newest point now (the cpu data set), so a
    /// dashboard's default time range shows them; otherwise step 0 is
    /// [`tsbs::T0_MS`], the same points every run.
    pub ending_now: bool,
}

/// The salt bucket the points of `payload` (timestamps in `precision`)
/// fall in under `table`'s key schema (the first point's: a message
/// holds one series' points).
pub fn bucket_of_message(
    table: &TableDescriptor,
    format: Format,
    payload: &[u8],
    precision: Precision,
) -> Result<u32, String> {
    let mut encoder = PointEncoder::new(table, usize::MAX)?;
    let errors = encoder.add_body(format, payload, Some(precision), 0)?;
    if let Some((line, why)) = errors.first(1).first() {
        return Err(format!("point {line}: {why}"));
    }
    let rows = encoder.finish();
    let key = rows
        .batches
        .iter()
        .find_map(|b| b.row_key(0).map(<[u8]>::to_vec))
        .ok_or("the message holds no point")?;
    Ok(table.key.salt_bucket(&key).unwrap_or(0))
}

#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    #[error("producing failed: {0}; check the brokers and the topic")]
    Kafka(#[from] KafkaError),
    #[error("a point does not fit table `{table}`'s key schema: {reason}")]
    Point { table: String, reason: String },
    #[error("{0}")]
    Spec(&'static str),
}

/// Produces every point and waits until the broker has them all; returns
/// the number of messages.
pub fn produce(spec: &ProduceSpec) -> Result<u64, ProduceError> {
    produce_with_progress(spec, &mut |_| {})
}

/// [`produce`], telling `progress(points)` the points handed to the
/// producer so far after each message (all of them before the final
/// flush waits for the broker's acknowledgements).
pub fn produce_with_progress(
    spec: &ProduceSpec,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, ProduceError> {
    if spec.format == Format::RemoteWrite {
        return Err(ProduceError::Spec(
            "halite produce writes line protocol or JSON points: use --format line or json",
        ));
    }
    if spec.dataset == Dataset::Devops && spec.format != Format::Line {
        return Err(ProduceError::Spec(
            "the devops data set is line protocol: use --format line",
        ));
    }
    if spec.dataset == Dataset::Devops && spec.ending_now {
        return Err(ProduceError::Spec(
            "the devops data set keeps TSBS's times: --ending-now is for --data cpu",
        ));
    }
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &spec.brokers)
        .set("linger.ms", "5")
        .set("acks", "all")
        .create()?;
    let started = Instant::now();
    let partitions = match &spec.by_bucket {
        Some(_) => {
            let md = producer
                .client()
                .fetch_metadata(Some(&spec.topic), Duration::from_secs(10))?;
            md.topics()
                .iter()
                .find(|t| t.name() == spec.topic)
                .map_or(0, |t| t.partitions().len() as u32)
                .max(1)
        }
        None => 1,
    };
    // A host's points are one series: one bucket, computed once.
    let mut bucket_of_host: std::collections::HashMap<u64, u32> = Default::default();
    let hosts = spec.hosts.max(1);
    let per_message = spec.points_per_message.max(1) as u64;
    let mut messages = 0u64;
    // One message holds consecutive steps of one host.
    let steps = spec.points.div_ceil(hosts);
    let first_ms = if spec.ending_now {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(tsbs::T0_MS, |d| d.as_millis() as u64);
        now_ms.saturating_sub(steps.saturating_sub(1) * tsbs::INTERVAL_MS)
    } else {
        tsbs::T0_MS
    };
    let time_of = |step: u64| first_ms + step * tsbs::INTERVAL_MS;
    let mut produced = 0u64;
    // A devops host's tags, made once: every line of it starts with them.
    let devops_prefixes: Vec<String> = match spec.dataset {
        Dataset::Devops => (0..hosts).map(tsbs::devops::series_prefix).collect(),
        Dataset::Cpu => Vec::new(),
    };
    for first_step in (0..steps).step_by(per_message as usize) {
        for host in 0..hosts {
            let last_step = (first_step + per_message).min(steps);
            let mut payload = String::new();
            let mut json = Vec::new();
            for step in first_step..last_step {
                if step * hosts + host >= spec.points {
                    break;
                }
                match (spec.dataset, spec.format) {
                    (Dataset::Devops, _) => tsbs::devops::line(
                        &devops_prefixes[host as usize],
                        host,
                        step,
                        &mut payload,
                    ),
                    (Dataset::Cpu, Format::Line) => {
                        tsbs::cpu_line_at(host, step, time_of(step), &mut payload)
                    }
                    (Dataset::Cpu, Format::Json) => {
                        json.push(tsbs::cpu_json_at(host, step, time_of(step)))
                    }
                    // Refused above.
                    (Dataset::Cpu, Format::RemoteWrite) => {}
                }
                produced += 1;
            }
            if spec.format == Format::Json {
                if json.is_empty() {
                    continue;
                }
                payload = serde_json::Value::Array(json).to_string();
            }
            if payload.is_empty() {
                continue;
            }
            let key = match spec.dataset {
                Dataset::Cpu => tsbs::host_name(host),
                Dataset::Devops => tsbs::devops::hostname(host),
            };
            let mut record = BaseRecord::<'_, str, str>::to(&spec.topic)
                .key(&key)
                .payload(&payload);
            if let Some(table) = &spec.by_bucket {
                let bucket = match bucket_of_host.get(&host) {
                    Some(b) => *b,
                    None => {
                        // TSBS points carry millisecond timestamps.
                        let b = bucket_of_message(
                            table,
                            spec.format,
                            payload.as_bytes(),
                            Precision::Milliseconds,
                        )
                        .map_err(|reason| ProduceError::Point {
                            table: table.name.to_string(),
                            reason,
                        })?;
                        bucket_of_host.insert(host, b);
                        b
                    }
                };
                record = record.partition((bucket % partitions) as i32);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => return Err(e.into()),
                }
            }
            messages += 1;
            progress(produced);
            if spec.rate > 0 {
                let due = Duration::from_secs_f64(produced as f64 / spec.rate as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60))?;
    Ok(messages)
}
