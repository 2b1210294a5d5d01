//! InfluxDB 1.x's MessagePack answers (`Accept: application/x-msgpack`),
//! which Python's `influxdb` client asks for on every request: the same
//! tree as the JSON answer, written the way InfluxDB's encoder writes it,
//! so a client gets the same types from halite as from InfluxDB (a float
//! stays a float where JSON prints `4`, and a time without `epoch` is a
//! timestamp extension, not a string).
//!
//! The answer is built as JSON values first; two conventions carry what
//! JSON cannot say (docs/api.md, "MessagePack answers"):
//! - a time is [`time`]: an object whose only key is [`TIME_KEY`], holding
//!   nanoseconds since the epoch, written as extension type 5;
//! - map keys keep InfluxDB's order (`statement_id`, `messages`, `series`,
//!   `partial`; `name`, `tags`, `columns`, `values`, `partial`), and a
//!   statement's result always has `series` (an empty array when none),
//!   while a failed statement's is `{"error": …}` alone, as InfluxDB 1.6
//!   writes them.

use serde_json::{Map, Value as Json};

/// The key of the object standing for a timestamp (NUL-led: no InfluxQL
/// name or JSON answer key can collide with it).
pub const TIME_KEY: &str = "\u{0}time_ns";

/// A timestamp (nanoseconds since the epoch) for [`encode`].
pub fn time(ns: i64) -> Json {
    let mut m = Map::new();
    m.insert(TIME_KEY.to_string(), Json::from(ns));
    Json::Object(m)
}

/// The MessagePack bytes of an answer.
pub fn encode(answer: &Json) -> Vec<u8> {
    let mut out = Vec::new();
    write(answer, &mut out);
    out
}

/// InfluxDB's place for a key; unknown keys follow in their own order.
fn rank(key: &str) -> usize {
    const ORDER: [&str; 11] = [
        "results",
        "statement_id",
        "messages",
        "level",
        "text",
        "series",
        "name",
        "tags",
        "columns",
        "values",
        "partial",
    ];
    ORDER.iter().position(|k| *k == key).unwrap_or(ORDER.len())
}

fn write(v: &Json, out: &mut Vec<u8>) {
    match v {
        Json::Null => out.push(0xc0),
        Json::Bool(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                int(i, out);
            } else if let Some(u) = n.as_u64() {
                out.push(0xcf);
                out.extend_from_slice(&u.to_be_bytes());
            } else {
                out.push(0xcb);
                out.extend_from_slice(&n.as_f64().unwrap_or(f64::NAN).to_be_bytes());
            }
        }
        Json::String(s) => string(s, out),
        Json::Array(items) => {
            header(items.len(), [0x90, 0xdc, 0xdd], 15, out);
            for item in items {
                write(item, out);
            }
        }
        Json::Object(m) => object(m, out),
    }
}

fn object(m: &Map<String, Json>, out: &mut Vec<u8>) {
    if m.len() == 1
        && let Some(ns) = m.get(TIME_KEY).and_then(Json::as_i64)
    {
        // msgp's time extension: seconds (8 bytes) then nanoseconds (4).
        out.extend_from_slice(&[0xc7, 12, 5]);
        out.extend_from_slice(&ns.div_euclid(1_000_000_000).to_be_bytes());
        out.extend_from_slice(&(ns.rem_euclid(1_000_000_000) as u32).to_be_bytes());
        return;
    }
    let failed = m.get("error");
    let statement = m.contains_key("statement_id");
    let mut entries: Vec<(&str, &Json)> = match failed {
        Some(e) if statement => vec![("error", e)],
        _ => m.iter().map(|(k, v)| (k.as_str(), v)).collect(),
    };
    let no_series = Json::Array(Vec::new());
    if statement && failed.is_none() && !m.contains_key("series") {
        entries.push(("series", &no_series));
    }
    entries.sort_by_key(|(k, _)| rank(k));
    header(entries.len(), [0x80, 0xde, 0xdf], 15, out);
    for (k, v) in entries {
        string(k, out);
        write(v, out);
    }
}

/// msgp's integers: the smallest signed form that holds the value.
fn int(i: i64, out: &mut Vec<u8>) {
    if (0..=127).contains(&i) || (-32..0).contains(&i) {
        out.push(i as u8);
    } else if let Ok(x) = i8::try_from(i) {
        out.push(0xd0);
        out.extend_from_slice(&x.to_be_bytes());
    } else if let Ok(x) = i16::try_from(i) {
        out.push(0xd1);
        out.extend_from_slice(&x.to_be_bytes());
    } else if let Ok(x) = i32::try_from(i) {
        out.push(0xd2);
        out.extend_from_slice(&x.to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&i.to_be_bytes());
    }
}

fn string(s: &str, out: &mut Vec<u8>) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n < 256 {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n < 65536 {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

/// An array's or map's header: the fix form up to `fix_max` items, then
/// the 16- and 32-bit forms.
fn header(n: usize, [fix, wide16, wide32]: [u8; 3], fix_max: usize, out: &mut Vec<u8>) {
    if n <= fix_max {
        out.push(fix | n as u8);
    } else if n < 65536 {
        out.push(wide16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(wide32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Bytes InfluxDB 1.6 answered to the same statements (captured with
    /// `curl -H 'Accept: application/x-msgpack'`).
    #[test]
    fn answers_are_the_bytes_influxdb_writes() {
        // SELECT value, reading FROM sensor ORDER BY time DESC LIMIT 1, epoch=ms
        let mut series = Map::new();
        series.insert("name".into(), json!("sensor"));
        series.insert("columns".into(), json!(["time", "value", "reading"]));
        series.insert("values".into(), json!([[1700003570000i64, 4.0f64, 48]]));
        let answer = json!({"results": [{"statement_id": 0, "series": [Json::Object(series)]}]});
        assert_eq!(
            hex(&encode(&answer)),
            "81a7726573756c74739182ac73746174656d656e745f696400a67365726965739183a46e616d65a6\
             73656e736f72a7636f6c756d6e7393a474696d65a576616c7565a772656164696e67a676616c7565\
             739193d30000018bd01be150cb401000000000000030"
        );
        // No series; then a failed statement; then a time without epoch.
        assert_eq!(
            hex(&encode(&json!({"results": [{"statement_id": 0}]}))),
            "81a7726573756c74739182ac73746174656d656e745f696400a673657269657390"
        );
        assert_eq!(
            hex(&encode(
                &json!({"results": [{"statement_id": 0, "error": "database not found: nope"}]})
            )),
            "81a7726573756c74739181a56572726f72b86461746162617365206e6f7420666f756e643a206e6f7065"
        );
        assert_eq!(
            hex(&encode(&time(1_700_000_000_000_000_000))),
            "c70c05000000006553f10000000000"
        );
        // The negative forms and wide headers decode as msgpack says.
        assert_eq!(
            hex(&encode(&json!([-1, -33, -200, 200, 70000]))),
            "95ffd0dfd1ff38d100c8d200011170"
        );
        assert_eq!(hex(&encode(&time(-1))), "c70c05ffffffffffffffff3b9ac9ff");
        let long: Vec<Json> = (0..16).map(|_| Json::Null).collect();
        assert_eq!(&hex(&encode(&Json::Array(long)))[..6], "dc0010");
    }
}
