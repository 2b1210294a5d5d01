//! `halite produce`: deterministic TSBS-style cpu data into a Kafka topic,
//! for the demo, the tests and the benchmarks. Point `i` is host
//! `i % hosts` at step `i / hosts`; messages are keyed by host, so one
//! host's points stay in order in one partition.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use super::Format;
use crate::tsbs;

/// What to produce.
#[derive(Debug, Clone)]
pub struct ProduceSpec {
    pub brokers: String,
    pub topic: String,
    pub hosts: u64,
    /// Points in all (one row each).
    pub points: u64,
    /// Points per message (line protocol lines, or a JSON array).
    pub points_per_message: usize,
    pub format: Format,
    /// Points per second; 0 is as fast as the broker takes them.
    pub rate: u64,
}

/// Produces every point and waits until the broker has them all; returns
/// the number of messages.
pub fn produce(spec: &ProduceSpec) -> Result<u64, KafkaError> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &spec.brokers)
        .set("linger.ms", "5")
        .set("acks", "all")
        .create()?;
    let started = Instant::now();
    let hosts = spec.hosts.max(1);
    let per_message = spec.points_per_message.max(1) as u64;
    let mut messages = 0u64;
    // One message holds consecutive steps of one host.
    let steps = spec.points.div_ceil(hosts);
    let mut produced = 0u64;
    for first_step in (0..steps).step_by(per_message as usize) {
        for host in 0..hosts {
            let last_step = (first_step + per_message).min(steps);
            let mut payload = String::new();
            let mut json = Vec::new();
            for step in first_step..last_step {
                if step * hosts + host >= spec.points {
                    break;
                }
                match spec.format {
                    Format::Line => tsbs::cpu_line(host, step, &mut payload),
                    Format::Json => json.push(tsbs::cpu_json(host, step)),
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
            let key = tsbs::host_name(host);
            let mut record = BaseRecord::<'_, str, str>::to(&spec.topic)
                .key(&key)
                .payload(&payload);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err((e, _)) => return Err(e),
                }
            }
            messages += 1;
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
