//! The catalog: namespaces and tables survive restarts and crashes; tables
//! are pre-split by salt bucket; mistakes get typed errors.

use halite::ErrorKind;
use halite::catalog::{CATALOG_FILE, Catalog, CreateTable, TableLimit, TableName};
use halite::schema::{BloomType, Compression, Durability};

fn cpu_table(name: &str) -> CreateTable {
    serde_json::from_str(&format!(
        r#"{{
          "name": "{name}",
          "families": [{{ "name": "f", "compression": "SNAPPY", "ttl": 86400 }}],
          "key": {{
            "fields": [
              {{ "name": "metric", "type": "string", "width": 8 }},
              {{ "name": "host", "type": "string", "width": 12 }},
              {{ "name": "ts", "type": "reversed_timestamp" }}
            ],
            "salt": {{ "buckets": 16 }}
          }},
          "split_points": ["0880"]
        }}"#
    ))
    .expect("valid request")
}

#[test]
fn tables_are_pre_split_by_bucket_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = Catalog::open(dir.path()).expect("open");
    c.create_namespace("metrics").expect("namespace");
    let t = c
        .create_table(&cpu_table("metrics:cpu"), 1)
        .expect("create");
    // 16 buckets + one extra split inside bucket 8.
    assert_eq!(t.regions.len(), 17);
    assert!(t.regions[0].start.is_empty());
    assert!(t.regions.last().expect("regions").end.is_empty());
    for w in t.regions.windows(2) {
        assert_eq!(w[0].end, w[1].start, "regions must tile the key space");
    }
    assert_eq!(t.region_for(&[3, b'x']).start, vec![3]);
    assert_eq!(t.region_for(&[8, 0x90]).start, vec![8, 0x80]);
    assert_eq!(t.families[0].compression, Compression::Snappy);
    assert_eq!(t.families[0].bloomfilter, BloomType::Row, "HBase's default");
    assert_eq!(t.durability, Durability::SyncWal);
    drop(c);

    let c = Catalog::open(dir.path()).expect("reopen");
    assert_eq!(
        c.namespaces(),
        vec!["default".to_string(), "metrics".to_string()]
    );
    assert_eq!(
        c.table(&TableName::parse("metrics:cpu").expect("name"))
            .expect("table"),
        t
    );
    assert_eq!(c.tables(Some("metrics")).len(), 1);
    assert_eq!(c.region_ids().len(), 17);
}

#[test]
fn mistakes_get_typed_errors() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = Catalog::open(dir.path()).expect("open");
    // A table's namespace comes with it (as for tables of the config).
    c.create_table(&cpu_table("plant:cpu"), 1)
        .expect("create in a new namespace");
    assert!(c.namespaces().contains(&"plant".to_string()));
    c.create_table(&cpu_table("cpu"), 1)
        .expect("create in default");
    assert_eq!(
        c.create_table(&cpu_table("cpu"), 1).unwrap_err().kind(),
        ErrorKind::Conflict
    );
    assert_eq!(
        c.create_namespace("default").unwrap_err().kind(),
        ErrorKind::Conflict
    );
    assert_eq!(
        c.drop_namespace("default").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    c.create_namespace("ns").expect("namespace");
    c.create_table(&cpu_table("ns:t"), 1).expect("create");
    assert_eq!(
        c.drop_namespace("ns").unwrap_err().kind(),
        ErrorKind::Conflict
    );
    c.drop_table(&TableName::parse("ns:t").expect("name"))
        .expect("drop");
    c.drop_namespace("ns").expect("empty namespace drops");
    assert!(TableName::parse("bad name").is_err());
    let mut bad = cpu_table("x");
    bad.key.fields.clear();
    assert_eq!(
        c.create_table(&bad, 1).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let mut bad = cpu_table("y");
    bad.families[0].versions = 0;
    assert!(
        c.create_table(&bad, 1)
            .unwrap_err()
            .to_string()
            .contains("VERSIONS")
    );
    let unknown: Result<CreateTable, _> = serde_json::from_str(
        r#"{"name":"z","families":[{"name":"f","colour":"red"}],"key":{"fields":[]}}"#,
    );
    assert!(unknown.unwrap_err().to_string().contains("colour"));
}

#[test]
fn alter_changes_attributes_and_adds_families() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = Catalog::open(dir.path()).expect("open");
    let name = TableName::parse("cpu").expect("name");
    c.create_table(&cpu_table("cpu"), 1).expect("create");
    let mut f = c.table(&name).expect("table").families[0].clone();
    f.versions = 5;
    let mut g = f.clone();
    g.name = "g".into();
    c.alter_families(&name, &[f, g]).expect("alter");
    drop(c);
    let t = Catalog::open(dir.path())
        .expect("reopen")
        .table(&name)
        .expect("table");
    assert_eq!(t.families.len(), 2);
    assert_eq!(t.families[0].versions, 5);
}

#[test]
fn a_crash_mid_update_leaves_the_old_catalog_and_damage_is_named() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = Catalog::open(dir.path()).expect("open");
    c.create_table(&cpu_table("cpu"), 1).expect("create");
    drop(c);
    // A crash while writing the next version leaves only a partial temp file.
    std::fs::write(
        dir.path().join(format!("{CATALOG_FILE}.tmp")),
        b"HALCAT\0\x01garbage",
    )
    .expect("tmp");
    let c = Catalog::open(dir.path()).expect("old catalog still opens");
    assert_eq!(c.tables(None).len(), 1);
    drop(c);
    let path = dir.path().join(CATALOG_FILE);
    let mut bytes = std::fs::read(&path).expect("read");
    let n = bytes.len();
    bytes[n / 2] ^= 0x20;
    std::fs::write(&path, &bytes).expect("write");
    let err = Catalog::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corruption);
    assert!(err.to_string().contains("CATALOG"), "{err}");
}

#[test]
fn rowprefix_blooms_default_to_the_salt_and_series_identity() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = Catalog::open(dir.path()).expect("open");
    let mut req = cpu_table("cpu");
    req.families[0].bloomfilter = BloomType::RowPrefix;
    let t = c.create_table(&req, 1).expect("create");
    // 1 salt byte + metric (8) + host (12); the timestamp is not part of it.
    assert_eq!(t.families[0].prefix_length, Some(21));
    assert_eq!(t.families[0].descriptor().bloom_prefix_len, 21);

    let mut explicit = cpu_table("cpu2");
    explicit.families[0].bloomfilter = BloomType::RowPrefix;
    explicit.families[0].prefix_length = Some(9);
    let t = c.create_table(&explicit, 1).expect("create");
    assert_eq!(t.families[0].prefix_length, Some(9));

    let mut wrong = cpu_table("cpu3");
    wrong.families[0].prefix_length = Some(9);
    let e = c
        .create_table(&wrong, 1)
        .expect_err("prefix_length on a ROW bloom");
    assert!(e.to_string().contains("ROWPREFIX"), "{e}");

    // Alter to ROWPREFIX also fills the length in.
    let mut f = cpu_table("x").families[0].clone();
    f.bloomfilter = BloomType::RowPrefix;
    let t = c
        .alter_families(&TableName::parse("cpu3").expect("name"), &[f])
        .err()
        .map(|e| e.to_string());
    assert!(t.is_some_and(|e| e.contains("no such table")));
    let t = c
        .alter_families(
            &TableName::parse("cpu").expect("name"),
            &[{
                let mut f = cpu_table("x").families[0].clone();
                f.bloomfilter = BloomType::RowPrefix;
                f
            }],
        )
        .expect("alter");
    assert_eq!(t.families[0].prefix_length, Some(21));
}

#[test]
fn tables_made_together_are_one_change_and_skip_those_there() {
    let dir = tempfile::tempdir().expect("tmp");
    let c = Catalog::open(dir.path()).expect("open");
    c.create_table(&cpu_table("m:a"), 1).expect("create");
    let mut prepared = Vec::new();
    let made = c
        .create_tables_with(
            &[
                cpu_table("m:a"),
                cpu_table("m:b"),
                cpu_table("m:c"),
                cpu_table("m:b"),
            ],
            2,
            None,
            |made| {
                prepared.push(made.iter().map(|t| t.name.to_string()).collect::<Vec<_>>());
                Ok(())
            },
        )
        .expect("create");
    let names: Vec<String> = made.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["m:b", "m:c"]);
    assert_eq!(prepared, [names], "prepared once, with every new table");
    assert_eq!(c.region_ids().len(), 3 * 17, "each region its own id");
    // Nothing new: nothing prepared, nothing changed.
    let again = c
        .create_tables_with(&[cpu_table("m:c")], 3, None, |_| {
            panic!("nothing to prepare")
        })
        .expect("create");
    assert!(again.is_empty());
    assert_eq!(
        c.create_table(&cpu_table("m:c"), 3).unwrap_err().kind(),
        ErrorKind::Conflict
    );
    // A namespace's limit counts the tables it is told to: `a` is not
    // counted, so of four new ones two more fit under four.
    let not_a = |t: &str| t != "a";
    let limit = TableLimit {
        most: 4,
        counted: &not_a,
    };
    let made = c
        .create_tables_with(
            &[
                cpu_table("m:d"),
                cpu_table("other:x"),
                cpu_table("m:e"),
                cpu_table("m:f"),
            ],
            4,
            Some(limit),
            |_| Ok(()),
        )
        .expect("create");
    let names: Vec<String> = made.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["m:d", "other:x", "m:e"]);
    assert!(!c.holds(&TableName::parse("m:f").expect("name")));
    drop(c);
    let c = Catalog::open(dir.path()).expect("reopen");
    assert_eq!(c.tables(Some("m")).len(), 5);
}
