//! Prometheus remote write 1.0: a snappy-compressed (block format)
//! protobuf `WriteRequest`, read into series of samples. The messages
//! (from Prometheus' `prompb/types.proto` and `remote.proto`):
//!
//! ```text
//! WriteRequest { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
//! TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; (exemplars = 3, histograms = 4) }
//! Label        { string name = 1; string value = 2; }
//! Sample       { double value = 1; int64 timestamp = 2; }   // ms since the epoch
//! ```
//!
//! Fields this reader does not know (metadata, exemplars, native
//! histograms) are skipped, as protobuf readers do. Also the writer of the
//! same messages for remote read's answers ([`encode_series`]).

/// A decompressed request larger than this is refused (Prometheus sends
/// a few thousand samples per request; 64 MiB is far past that).
pub const MAX_DECOMPRESSED: usize = 64 << 20;

/// One series of a write: its labels as sent (`__name__` among them) and
/// its samples (value, timestamp in ms).
#[derive(Debug, Default, PartialEq)]
pub struct Series {
    pub labels: Vec<(String, String)>,
    pub samples: Vec<(f64, i64)>,
}

/// Why a body could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RemoteWriteError {
    #[error("the body is not snappy-compressed (block format, as Prometheus sends it): {0}")]
    Snappy(String),
    #[error("the body decompresses to {0} bytes, over the limit of {MAX_DECOMPRESSED}")]
    TooLarge(usize),
    #[error("the body is not a protobuf WriteRequest: {0}")]
    Protobuf(&'static str),
    #[error("a label name or value is not UTF-8")]
    NotUtf8,
    #[error("the request holds more than {MAX_SERIES} series: send fewer a request")]
    TooManySeries,
    #[error("a series holds more than {MAX_LABELS_PER_SERIES} labels")]
    TooManyLabels,
    #[error("the request holds more than {MAX_LABELS} labels: send fewer series a request")]
    TooManyLabelsInAll,
    /// More samples than the reader was allowed (its limit).
    #[error("the request holds more than {0} samples")]
    TooManySamples(usize),
}

/// Decompresses and reads a remote-write body of at most [`MAX_SAMPLES`]
/// samples.
pub fn decode_write_request(body: &[u8]) -> Result<Vec<Series>, RemoteWriteError> {
    decode_write_request_within(body, MAX_SAMPLES)
}

/// Decompresses and reads a remote-write body, refusing it as soon as it
/// holds more than `max_samples` samples: a sample is two bytes at the
/// least on the wire and sixteen read, so 64 MiB of empty ones (a 3 MB
/// snappy body) once took half a gigabyte before any limit was checked.
pub fn decode_write_request_within(
    body: &[u8],
    max_samples: usize,
) -> Result<Vec<Series>, RemoteWriteError> {
    let len =
        snap::raw::decompress_len(body).map_err(|e| RemoteWriteError::Snappy(e.to_string()))?;
    if len > MAX_DECOMPRESSED {
        return Err(RemoteWriteError::TooLarge(len));
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .map_err(|e| RemoteWriteError::Snappy(e.to_string()))?;
    series_list(&raw, max_samples)
}

/// Reads the `TimeSeries` of a `WriteRequest` (field 1), of at most
/// [`MAX_SAMPLES`] samples.
pub fn decode_series_list(raw: &[u8]) -> Result<Vec<Series>, RemoteWriteError> {
    series_list(raw, MAX_SAMPLES)
}

fn series_list(raw: &[u8], max_samples: usize) -> Result<Vec<Series>, RemoteWriteError> {
    let mut out = Vec::new();
    let mut counts = Counts {
        labels: 0,
        samples: 0,
        max_samples,
    };
    let mut r = Reader::new(raw);
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, LEN) => {
                if out.len() == MAX_SERIES {
                    return Err(RemoteWriteError::TooManySeries);
                }
                let one = series(r.bytes()?, &mut counts)?;
                out.push(one);
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(out)
}

/// What the series read so far hold, against the bounds.
struct Counts {
    labels: usize,
    samples: usize,
    max_samples: usize,
}

/// Most series, labels of a series, and labels in all, one request may
/// hold. Each is two bytes at the least on the wire and tens of bytes
/// read, so a body of empty ones would otherwise take gigabytes. A series
/// has at most 255 tags besides `__name__` in any table of halite's.
pub const MAX_SERIES: usize = 1_000_000;
pub const MAX_LABELS_PER_SERIES: usize = 256;
pub const MAX_LABELS: usize = 2_000_000;
/// Most samples a request may hold where no lower limit is set (a Kafka
/// message): 64 MiB of them read.
pub const MAX_SAMPLES: usize = 4_000_000;

fn series(raw: &[u8], counts: &mut Counts) -> Result<Series, RemoteWriteError> {
    let mut s = Series::default();
    let mut r = Reader::new(raw);
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, LEN) => {
                if s.labels.len() == MAX_LABELS_PER_SERIES {
                    return Err(RemoteWriteError::TooManyLabels);
                }
                counts.labels += 1;
                if counts.labels > MAX_LABELS {
                    return Err(RemoteWriteError::TooManyLabelsInAll);
                }
                s.labels.push(label(r.bytes()?)?)
            }
            (2, LEN) => {
                counts.samples += 1;
                if counts.samples > counts.max_samples {
                    return Err(RemoteWriteError::TooManySamples(counts.max_samples));
                }
                s.samples.push(sample(r.bytes()?)?)
            }
            _ => r.skip(wire)?,
        }
    }
    Ok(s)
}

fn label(raw: &[u8]) -> Result<(String, String), RemoteWriteError> {
    let (mut name, mut value) = (String::new(), String::new());
    let mut r = Reader::new(raw);
    while let Some((field, wire)) = r.key()? {
        let text = |b: &[u8]| {
            std::str::from_utf8(b)
                .map(str::to_string)
                .map_err(|_| RemoteWriteError::NotUtf8)
        };
        match (field, wire) {
            (1, LEN) => name = text(r.bytes()?)?,
            (2, LEN) => value = text(r.bytes()?)?,
            _ => r.skip(wire)?,
        }
    }
    Ok((name, value))
}

fn sample(raw: &[u8]) -> Result<(f64, i64), RemoteWriteError> {
    let (mut value, mut timestamp) = (0.0, 0);
    let mut r = Reader::new(raw);
    while let Some((field, wire)) = r.key()? {
        match (field, wire) {
            (1, I64) => value = f64::from_bits(r.fixed64()?),
            (2, VARINT) => timestamp = r.varint()? as i64,
            _ => r.skip(wire)?,
        }
    }
    Ok((value, timestamp))
}

const MAX_FIELD_NUMBER: u64 = (1 << 29) - 1;
const VARINT: u8 = 0;
const I64: u8 = 1;
const LEN: u8 = 2;
const I32: u8 = 5;

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn varint(&mut self) -> Result<u64, RemoteWriteError> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or(RemoteWriteError::Protobuf("a varint runs past the end"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(RemoteWriteError::Protobuf(
            "a varint is longer than 10 bytes",
        ))
    }

    /// The next field's number and wire type; `None` at the end.
    fn key(&mut self) -> Result<Option<(u64, u8)>, RemoteWriteError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let k = self.varint()?;
        let field = k >> 3;
        // Protobuf's field numbers are 1 to 2^29 - 1: zero bytes (field
        // 0) are no message, and were read as an empty request.
        if field == 0 || field > MAX_FIELD_NUMBER {
            return Err(RemoteWriteError::Protobuf(
                "a field number outside 1..=536870911",
            ));
        }
        Ok(Some((field, (k & 7) as u8)))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RemoteWriteError> {
        if n > self.buf.len() {
            return Err(RemoteWriteError::Protobuf("a field runs past the end"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn bytes(&mut self) -> Result<&'a [u8], RemoteWriteError> {
        let n = self.varint()?;
        self.take(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn fixed64(&mut self) -> Result<u64, RemoteWriteError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    fn skip(&mut self, wire: u8) -> Result<(), RemoteWriteError> {
        match wire {
            VARINT => self.varint().map(drop),
            I64 => self.take(8).map(drop),
            LEN => self.bytes().map(drop),
            I32 => self.take(4).map(drop),
            _ => Err(RemoteWriteError::Protobuf("an unknown wire type")),
        }
    }
}

/// A field's value as read: a number (varint or fixed bytes) or bytes.
pub enum Wire<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

impl<'a> Wire<'a> {
    pub fn int(&self) -> u64 {
        match self {
            Wire::Int(v) => *v,
            Wire::Bytes(_) => 0,
        }
    }

    pub fn bytes(&self) -> &'a [u8] {
        match self {
            Wire::Bytes(b) => b,
            Wire::Int(_) => &[],
        }
    }
}

/// The fields of a message, in order (for messages read field by field,
/// such as remote read's `ReadRequest`).
pub fn fields(raw: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, String> {
    field_iter(raw).collect()
}

/// [`fields`] one at a time, for a reader that bounds how many it takes.
pub fn field_iter(raw: &[u8]) -> impl Iterator<Item = Result<(u64, Wire<'_>), String>> {
    let mut r = Reader::new(raw);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let next = (|| {
            let Some((field, wire)) = r.key().map_err(|e| e.to_string())? else {
                return Ok(None);
            };
            let value = match wire {
                VARINT => Wire::Int(r.varint().map_err(|e| e.to_string())?),
                I64 => Wire::Int(r.fixed64().map_err(|e| e.to_string())?),
                LEN => Wire::Bytes(r.bytes().map_err(|e| e.to_string())?),
                I32 => {
                    let b = r.take(4).map_err(|e| e.to_string())?;
                    Wire::Int(u64::from(u32::from_le_bytes(
                        b.try_into().unwrap_or_default(),
                    )))
                }
                _ => return Err("the body is not protobuf: an unknown wire type".to_string()),
            };
            Ok(Some((field, value)))
        })();
        failed = next.is_err();
        next.transpose()
    })
}

fn put_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_len(field: u64, body: &[u8], out: &mut Vec<u8>) {
    put_varint(field << 3 | u64::from(LEN), out);
    put_varint(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// A `TimeSeries` message of `series` (labels in the order given).
pub fn encode_series(series: &Series, out: &mut Vec<u8>) {
    let mut ts = Vec::new();
    let mut part = Vec::new();
    for (name, value) in &series.labels {
        part.clear();
        put_len(1, name.as_bytes(), &mut part);
        put_len(2, value.as_bytes(), &mut part);
        put_len(1, &part, &mut ts);
    }
    for (value, timestamp) in &series.samples {
        part.clear();
        put_varint(1 << 3 | u64::from(I64), &mut part);
        part.extend_from_slice(&value.to_bits().to_le_bytes());
        put_varint(2 << 3 | u64::from(VARINT), &mut part);
        put_varint(*timestamp as u64, &mut part);
        put_len(2, &part, &mut ts);
    }
    out.extend_from_slice(&ts);
}

/// A field holding a message: `field` as length-delimited `body`.
pub fn encode_message(field: u64, body: &[u8], out: &mut Vec<u8>) {
    put_len(field, body, out);
}

/// A remote-write body of `series`, as Prometheus sends one (for tests
/// and tools that write to halite as Prometheus does).
pub fn encode_write_request(series: &[Series]) -> Vec<u8> {
    let mut raw = Vec::new();
    for s in series {
        let mut ts = Vec::new();
        encode_series(s, &mut ts);
        encode_message(1, &ts, &mut raw);
    }
    // Compressing a Vec in memory cannot fail but for a body past snappy's
    // 4 GiB limit; an empty body then tells the server nothing.
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_request(series: &[Series]) -> Vec<u8> {
        encode_write_request(series)
    }

    #[test]
    fn a_write_request_reads_back_with_staleness_markers_and_negative_times() {
        let stale = f64::from_bits(0x7ff0_0000_0000_0002);
        let series = vec![
            Series {
                labels: vec![("__name__".into(), "up".into()), ("job".into(), "é".into())],
                samples: vec![(1.0, 1_700_000_000_000), (stale, 1_700_000_015_000)],
            },
            Series {
                labels: vec![("__name__".into(), "x".into())],
                samples: vec![(-2.5, -1)],
            },
        ];
        let got = decode_write_request(&write_request(&series)).expect("decode");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].labels, series[0].labels);
        assert_eq!(got[0].samples[1].0.to_bits(), stale.to_bits());
        assert_eq!(got[1].samples, vec![(-2.5, -1)]);
    }

    #[test]
    fn damaged_bodies_are_refused_not_panicked_on() {
        assert!(matches!(
            decode_write_request(b"not snappy at all"),
            Err(RemoteWriteError::Snappy(_) | RemoteWriteError::Protobuf(_))
        ));
        let body = write_request(&[Series {
            labels: vec![("__name__".into(), "up".into())],
            samples: vec![(1.0, 5)],
        }]);
        let raw = snap::raw::Decoder::new()
            .decompress_vec(&body)
            .expect("decompress");
        for cut in 0..raw.len() {
            // Every prefix either reads or is refused.
            let _ = decode_series_list(&raw[..cut]);
        }
        assert_eq!(
            decode_series_list(&[0x0f]),
            Err(RemoteWriteError::Protobuf("an unknown wire type"))
        );
    }

    #[test]
    fn zero_bytes_are_no_write_request() {
        // 64 MiB of them was taken as an empty request (204).
        let zeros = snap::raw::Encoder::new()
            .compress_vec(&vec![0u8; 1 << 20])
            .expect("compress");
        assert_eq!(
            decode_write_request(&zeros),
            Err(RemoteWriteError::Protobuf(
                "a field number outside 1..=536870911"
            ))
        );
        // Field 0 inside a series, and a field number past 2^29 - 1.
        assert!(decode_series_list(&[0x0a, 0x02, 0x00, 0x00]).is_err());
        assert!(decode_series_list(&[0x80, 0x80, 0x80, 0x80, 0x10, 0x00]).is_err());
        assert_eq!(decode_series_list(&[]), Ok(Vec::new()));
    }
}
