//! Property tests of the row-key codec: for random field values, the byte
//! order of encoded keys within one salt bucket equals the logical order of
//! their fields (padding, integers, timestamps, reversed timestamps), and
//! decode(encode(x)) == x.

use std::cmp::Ordering;

use halite::key::{FieldEncoding, FieldValue, KeyField, KeySchema, Salt, SaltFrom, TimeUnit};
use proptest::prelude::*;

fn field(name: &str, encoding: FieldEncoding) -> KeyField {
    KeyField {
        name: name.into(),
        encoding,
    }
}

fn schemas() -> Vec<KeySchema> {
    let base = vec![
        field("metric", FieldEncoding::String { width: 6 }),
        field("host", FieldEncoding::String { width: 4 }),
        field("ts", FieldEncoding::ReversedTimestamp),
        field("seq", FieldEncoding::Uniquifier { width: 2 }),
    ];
    let ints = vec![
        field("region", FieldEncoding::Uint { width: 1 }),
        field("sensor", FieldEncoding::Uint { width: 4 }),
        field("ts", FieldEncoding::Timestamp),
    ];
    vec![
        KeySchema {
            fields: base.clone(),
            salt: None,
            md5_prefix: 0,
            time_unit: TimeUnit::default(),
            tags: None,
        },
        KeySchema {
            fields: base.clone(),
            salt: Some(Salt {
                buckets: 16,
                width: 1,
                from: SaltFrom::Series,
                epochs: Vec::new(),
            }),
            md5_prefix: 0,
            time_unit: TimeUnit::default(),
            tags: None,
        },
        KeySchema {
            fields: ints.clone(),
            salt: Some(Salt {
                buckets: 1000,
                width: 2,
                from: SaltFrom::Timestamp,
                epochs: Vec::new(),
            }),
            md5_prefix: 0,
            time_unit: TimeUnit::default(),
            tags: None,
        },
        KeySchema {
            fields: ints,
            salt: None,
            md5_prefix: 0,
            time_unit: TimeUnit::default(),
            tags: None,
        },
    ]
}

fn value_for(encoding: &FieldEncoding) -> BoxedStrategy<FieldValue> {
    match encoding {
        FieldEncoding::String { width } => {
            proptest::string::string_regex(&format!("[0-9a-c]{{0,{width}}}"))
                .expect("regex")
                .prop_map(FieldValue::Str)
                .boxed()
        }
        FieldEncoding::Uint { width } | FieldEncoding::Uniquifier { width } => {
            let max = if *width == 8 {
                u64::MAX
            } else {
                (1u64 << (8 * width)) - 1
            };
            prop_oneof![Just(0u64), Just(max), 0..=max]
                .prop_map(FieldValue::Uint)
                .boxed()
        }
        FieldEncoding::Timestamp | FieldEncoding::ReversedTimestamp => {
            prop_oneof![Just(0u64), Just(u64::MAX), 0u64..4_000_000_000_000]
                .prop_map(FieldValue::Uint)
                .boxed()
        }
    }
}

fn tuple(schema: &KeySchema) -> BoxedStrategy<Vec<FieldValue>> {
    schema
        .fields
        .iter()
        .map(|f| value_for(&f.encoding))
        .collect::<Vec<_>>()
        .boxed()
}

fn case() -> impl Strategy<Value = (KeySchema, Vec<Vec<FieldValue>>)> {
    (0..schemas().len()).prop_flat_map(|i| {
        let s = schemas()[i].clone();
        let t = tuple(&s);
        (Just(s), proptest::collection::vec(t, 2..40))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn byte_order_equals_logical_order_within_a_bucket((schema, tuples) in case()) {
        schema.validate().expect("valid schema");
        let keys: Vec<Vec<u8>> = tuples
            .iter()
            .map(|t| schema.encode_ordered(t).expect("encodes"))
            .collect();
        for (t, k) in tuples.iter().zip(&keys) {
            prop_assert_eq!(k.len(), schema.key_len());
            let d = schema.decode(k).expect("decodes");
            let back: Vec<FieldValue> = d.fields.into_iter().map(|(_, v)| v).collect();
            prop_assert_eq!(&back, t);
            // Leading values encode to a prefix of the key (after the salt).
            for n in 0..=t.len() {
                let lead = schema.encode_leading(&t[..n]).expect("leading");
                prop_assert!(k[schema.prefix_len()..].starts_with(&lead));
            }
            if let Some(b) = schema.buckets_for_leading(t, 0, u64::MAX).expect("bucket") {
                prop_assert_eq!(b.first().copied(), d.bucket);
                prop_assert_eq!(b.len(), 1);
            }
        }
        for i in 0..keys.len() {
            for j in 0..keys.len() {
                if keys[i][..schema.prefix_len()] != keys[j][..schema.prefix_len()] {
                    continue; // different buckets: no order promised
                }
                let bytes = keys[i].cmp(&keys[j]);
                let logical = schema.logical_cmp(&tuples[i], &tuples[j]);
                prop_assert_eq!(bytes, logical, "{:?} vs {:?}", tuples[i], tuples[j]);
            }
        }
    }
}

#[test]
fn padding_orders_like_the_seed_articles_say() {
    let s = KeySchema {
        fields: vec![field("id", FieldEncoding::String { width: 4 })],
        salt: None,
        md5_prefix: 0,
        time_unit: TimeUnit::default(),
        tags: None,
    };
    let enc = |v: &str| {
        s.encode_ordered(&[FieldValue::Str(v.into())])
            .expect("encodes")
    };
    assert_eq!(enc("02").cmp(&enc("10")), Ordering::Less);
    assert_eq!(enc("a").cmp(&enc("ab")), Ordering::Less);
    assert_eq!(enc("ab").cmp(&enc("b")), Ordering::Less);
}

#[test]
fn series_salt_spreads_series_over_every_bucket() {
    let s = &schemas()[1];
    let mut seen = std::collections::BTreeSet::new();
    for h in 0..400 {
        let k = s
            .encode_ordered(&[
                FieldValue::Str("cpu".into()),
                FieldValue::Str(format!("{h:04}")),
                FieldValue::Uint(1),
                FieldValue::Uint(0),
            ])
            .expect("encodes");
        seen.insert(k[0]);
    }
    assert_eq!(seen.len(), 16, "400 series should reach all 16 buckets");
}
