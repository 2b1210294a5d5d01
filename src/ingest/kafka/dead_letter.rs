//! Bad messages, sent on to a dead-letter topic with the reason.

use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer};

use super::polled_producer::PolledProducer;

pub(super) struct DeadLetters {
    pub(super) topic: String,
    pub(super) producer: PolledProducer<DefaultProducerContext>,
}

impl DeadLetters {
    /// Sends the original payload with the reason and its source position
    /// in headers; waits until the broker has it.
    pub(super) fn send(
        &self,
        source: &str,
        partition: i32,
        offset: i64,
        payload: &[u8],
        reason: &str,
    ) -> bool {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "halite-error",
                value: Some(reason),
            })
            .insert(Header {
                key: "halite-source-topic",
                value: Some(source),
            })
            .insert(Header {
                key: "halite-source-partition",
                value: Some(&partition.to_string()),
            })
            .insert(Header {
                key: "halite-source-offset",
                value: Some(&offset.to_string()),
            });
        let record: BaseRecord<'_, (), [u8]> = BaseRecord::to(&self.topic)
            .payload(payload)
            .headers(headers.clone());
        match self.producer.send(record) {
            Ok(()) => true,
            // The payload with the headers passes the size limit: the
            // dead letter goes without it, saying where the original is.
            Err((
                rdkafka::error::KafkaError::MessageProduction(
                    rdkafka::types::RDKafkaErrorCode::MessageSizeTooLarge,
                ),
                _,
            )) => {
                let headers = headers.insert(Header {
                    key: "halite-payload-omitted",
                    value: Some(&payload.len().to_string()),
                });
                let record: BaseRecord<'_, (), [u8]> = BaseRecord::to(&self.topic).headers(headers);
                match self.producer.send(record) {
                    Ok(()) => true,
                    Err((e, _)) => {
                        tracing::error!(error = %e, "dead-letter produce failed");
                        false
                    }
                }
            }
            Err((e, _)) => {
                tracing::error!(error = %e, "dead-letter produce failed");
                false
            }
        }
    }

    pub(super) fn flush(&self) -> bool {
        match self.producer.flush(Duration::from_secs(30)) {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "dead-letter flush failed");
                false
            }
        }
    }
}
