//! A producer whose events (delivery reports) are served by a thread of
//! its own that polls rarely.
//!
//! rdkafka's `ThreadedProducer` polls every 100 ms, and every poll ends in
//! a busy wait: librdkafka's timed wait returns up to a millisecond early,
//! and rdkafka's deadline loop polls the sub-millisecond rest as a 0 ms
//! timeout until it is gone. That is about 1 % of a core per idle producer,
//! on every node of a cluster. A delivery report wakes a poll at once
//! however long its timeout, so the only price of a long one is the wait
//! for the thread when the producer is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::KafkaResult;
use rdkafka::producer::{BaseProducer, ProducerContext};

/// How long one poll waits for events: the busy tail is at most a
/// millisecond per poll, and a drop waits up to this long.
const POLL: Duration = Duration::from_millis(500);

pub struct PolledProducer<C: ProducerContext + 'static> {
    producer: Arc<BaseProducer<C>>,
    stop: Arc<AtomicBool>,
    poller: Option<JoinHandle<()>>,
}

impl<C: ProducerContext + 'static> PolledProducer<C> {
    pub fn create(config: &ClientConfig, context: C) -> KafkaResult<Self> {
        let producer = Arc::new(BaseProducer::from_config_and_context(config, context)?);
        let stop = Arc::new(AtomicBool::new(false));
        let poller = {
            let (producer, stop) = (producer.clone(), stop.clone());
            std::thread::Builder::new()
                .name("halite-produce".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        producer.poll(POLL);
                    }
                })
                .map_err(|e| {
                    rdkafka::error::KafkaError::ClientCreation(format!(
                        "starting the producer's polling thread: {e}"
                    ))
                })?
        };
        Ok(PolledProducer {
            producer,
            stop,
            poller: Some(poller),
        })
    }
}

/// Sends, flushes and metadata go to the producer itself.
impl<C: ProducerContext + 'static> std::ops::Deref for PolledProducer<C> {
    type Target = BaseProducer<C>;

    fn deref(&self) -> &BaseProducer<C> {
        &self.producer
    }
}

impl<C: ProducerContext + 'static> Drop for PolledProducer<C> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(poller) = self.poller.take() {
            let _ = poller.join();
        }
    }
}
