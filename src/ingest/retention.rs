//! InfluxDB's retention policies over a database's tables: `CREATE`,
//! `ALTER` and `DROP RETENTION POLICY`, `CREATE DATABASE … WITH`, `DROP
//! DATABASE` and `DROP MEASUREMENT`, with InfluxDB 1.6's rules and words.
//!
//! A policy is kept in the catalog (`catalog::RetentionPolicies`); its
//! measurements are tables of their own (`catalog::PolicyTables`), each
//! with its duration as the family TTL: reads hide a point once it is
//! older, a TIME_WINDOW family's past windows expire as whole files, and
//! a write of an older point is refused as InfluxDB refuses it. So the
//! duration holds to the millisecond, where InfluxDB drops whole shard
//! groups once their end is older (and answers their older points until
//! then).

use crate::catalog::{
    AUTOGEN, PolicySpec, PolicyTables, RetentionPolicies, RetentionPolicy, TableName,
    check_policy_name,
};
use crate::error::Error;
use crate::ingest::databases::SAMPLES_TABLE;
use crate::schema::FamilySpec;
use crate::series::{TAGS_TABLE, TagSets};
use crate::store::Store;

const HOUR_NS: u64 = 3_600 * 1_000_000_000;
/// InfluxDB's shortest duration other than forever.
const MIN_DURATION_NS: u64 = HOUR_NS;

/// Why a statement about retention policies, databases or measurements
/// changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("retention policy duration must be at least 1h0m0s")]
    TooShort,
    #[error("retention policy duration must be greater than the shard duration")]
    ShardLonger,
    #[error("retention policy already exists")]
    Exists,
    #[error("retention policy conflicts with an existing policy")]
    Conflicts,
    #[error("retention policy not found: {0}")]
    NotFound(String),
    #[error("database not found: {0}")]
    NoDatabase(String),
    #[error("invalid name")]
    InvalidName,
    /// A name InfluxDB takes and halite cannot name tables after.
    #[error("{0}")]
    Unnameable(String),
    #[error(
        "database `{db}` holds tables InfluxQL does not drop (declared keys: {tables}): drop them \
         through the admin API first"
    )]
    DeclaredTables { db: String, tables: String },
    #[error(
        "measurement `{0}` is held by declared-key tables, whose points halite does not drop by \
         measurement"
    )]
    DeclaredMeasurement(String),
    #[error("{what} is not supported in cluster mode yet (docs/cluster.md)")]
    Cluster { what: &'static str },
    #[error("{0}")]
    Store(#[from] Error),
}

/// InfluxDB's shard group duration for a policy of `duration_ns`.
fn default_shard_ns(duration_ns: u64) -> u64 {
    const DAY_NS: u64 = 24 * HOUR_NS;
    if duration_ns == 0 || duration_ns >= 180 * DAY_NS {
        7 * DAY_NS
    } else if duration_ns >= 2 * DAY_NS {
        DAY_NS
    } else {
        HOUR_NS
    }
}

/// A given shard group duration as InfluxDB keeps it: 0 is the default
/// for the duration, and none is shorter than an hour.
fn normalised_shard_ns(shard_ns: u64, duration_ns: u64) -> u64 {
    match shard_ns {
        0 => default_shard_ns(duration_ns),
        s if s < MIN_DURATION_NS => MIN_DURATION_NS,
        s => s,
    }
}

/// The family TTL (seconds) that keeps a policy's points `duration_ns`.
pub fn ttl_secs(duration_ns: u64) -> Option<u64> {
    (duration_ns > 0).then(|| duration_ns.div_ceil(1_000_000_000))
}

fn check_name(name: &str) -> Result<(), PolicyError> {
    if name.is_empty() {
        return Err(PolicyError::InvalidName);
    }
    check_policy_name(name).map_err(PolicyError::Unnameable)
}

fn refuse_in_cluster(store: &Store, what: &'static str) -> Result<(), PolicyError> {
    if store.is_cluster() {
        return Err(PolicyError::Cluster { what });
    }
    Ok(())
}

/// The policy `spec` makes, checked as InfluxDB checks a new one.
fn new_policy(name: &str, spec: PolicySpec) -> Result<RetentionPolicy, PolicyError> {
    check_name(name)?;
    let duration_ns = spec.duration_ns.unwrap_or(0);
    if duration_ns != 0 && duration_ns < MIN_DURATION_NS {
        return Err(PolicyError::TooShort);
    }
    let shard_group_ns = normalised_shard_ns(spec.shard_duration_ns.unwrap_or(0), duration_ns);
    if duration_ns > 0 && duration_ns < shard_group_ns {
        return Err(PolicyError::ShardLonger);
    }
    Ok(RetentionPolicy {
        name: name.into(),
        duration_ns,
        shard_group_ns,
        replication: spec.replication.unwrap_or(1),
    })
}

fn same_settings(a: &RetentionPolicy, b: &RetentionPolicy) -> bool {
    a.duration_ns == b.duration_ns
        && a.shard_group_ns == b.shard_group_ns
        && a.replication == b.replication
}

fn no_database(db: &str) -> impl Fn(Error) -> PolicyError + '_ {
    move |e| match e {
        Error::NotFound(_) => PolicyError::NoDatabase(db.to_string()),
        e => PolicyError::Store(e),
    }
}

/// `CREATE RETENTION POLICY name ON db …`: an identical policy is no
/// error, one of other settings is.
pub fn create_policy(
    store: &Store,
    tag_sets: &TagSets,
    db: &str,
    name: &str,
    spec: PolicySpec,
    make_default: bool,
) -> Result<(), PolicyError> {
    let policy = new_policy(name, spec)?;
    refuse_in_cluster(store, "creating a retention policy")?;
    // Tables a write made for a policy of this name after it was dropped
    // hold points of before: a new policy starts empty.
    if store.catalog().retention_policies(db).get(name).is_none() && name != AUTOGEN {
        drop_policy_tables(store, tag_sets, db, name)?;
    }
    let mut refused = None;
    store
        .catalog()
        .update_retention_policies(db, |policies| {
            if let Some(existing) = policies.get(name) {
                refused = if !same_settings(existing, &policy) {
                    Some(PolicyError::Exists)
                } else if make_default && policies.default != name {
                    Some(PolicyError::Conflicts)
                } else {
                    None
                };
                return Ok(None);
            }
            policies.policies.push(policy.clone());
            if make_default {
                policies.default = name.into();
            }
            Ok(Some(()))
        })
        .map_err(no_database(db))?;
    refused.map_or(Ok(()), Err)
}

/// `ALTER RETENTION POLICY name ON db …`: the given settings changed; a
/// new duration becomes the TTL of every table of the policy.
pub fn alter_policy(
    store: &Store,
    db: &str,
    name: &str,
    spec: PolicySpec,
    make_default: bool,
) -> Result<(), PolicyError> {
    refuse_in_cluster(store, "altering a retention policy")?;
    let before = store.catalog().retention_policies(db);
    let Some(old) = before.get(name).cloned() else {
        if !store.catalog().has_namespace(db) {
            return Err(PolicyError::NoDatabase(db.into()));
        }
        return Err(PolicyError::NotFound(name.into()));
    };
    if let Some(d) = spec.duration_ns
        && d != 0
        && d < MIN_DURATION_NS
    {
        return Err(PolicyError::TooShort);
    }
    let shard_ns = spec.shard_duration_ns;
    let incompatible = match spec.duration_ns {
        Some(d) if d > 0 => d < shard_ns.unwrap_or(old.shard_group_ns),
        Some(_) => false,
        None => old.duration_ns > 0 && shard_ns.is_some_and(|s| old.duration_ns < s),
    };
    if incompatible {
        return Err(PolicyError::ShardLonger);
    }
    let mut new = old.clone();
    if let Some(d) = spec.duration_ns {
        new.duration_ns = d;
    }
    if let Some(r) = spec.replication {
        new.replication = r;
    }
    if let Some(s) = shard_ns {
        new.shard_group_ns = normalised_shard_ns(s, new.duration_ns);
    }
    store
        .catalog()
        .update_retention_policies(db, |policies| {
            let Some(p) = policies.policies.iter_mut().find(|p| p.name == name) else {
                return Err(Error::NotFound(format!(
                    "retention policy not found: {name}"
                )));
            };
            *p = new.clone();
            if make_default {
                policies.default = name.into();
            }
            Ok(Some(()))
        })
        .map_err(no_database(db))?;
    // Every table of the policy whose TTL is not the duration's (all, for
    // a new duration; those a failed ALTER left, when sent again).
    let ttl = ttl_secs(new.duration_ns);
    for desc in policy_tables(store, &PolicyTables::new(db, name)) {
        if desc.families.iter().all(|f| f.ttl == ttl) {
            continue;
        }
        let families: Vec<FamilySpec> = desc
            .families
            .iter()
            .map(|f| FamilySpec { ttl, ..f.clone() })
            .collect();
        store.alter_families(&desc.name, &families)?;
    }
    Ok(())
}

/// The open-tag tables of one policy of a database (not the Prometheus
/// samples', which no policy governs).
fn policy_tables(store: &Store, tables: &PolicyTables) -> Vec<crate::catalog::TableDescriptor> {
    store
        .catalog()
        .tables(Some(&tables.db))
        .into_iter()
        .filter(|d| {
            d.key.is_open_tags()
                && d.name.table != SAMPLES_TABLE
                && tables.measurement_of(&d.name.table).is_some()
        })
        .collect()
}

/// Drops a measurement's table: its series out of the dictionary first,
/// so a crash between the two leaves a table the same statement drops
/// again, never series naming a table that is gone.
fn drop_measurement_table(
    store: &Store,
    tag_sets: &TagSets,
    name: &TableName,
) -> Result<(), PolicyError> {
    let dictionary = tag_sets.dictionary(store, &name.namespace)?;
    dictionary.forget_table(store, &name.table)?;
    match store.drop_table(name) {
        Ok(()) | Err(Error::NotFound(_)) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `DROP RETENTION POLICY name ON db`: the policy, then its tables (a
/// write meanwhile finds no policy; a table one made from a target taken
/// before goes when the policy is made again). A missing policy (or
/// database) is no error, as in InfluxDB; the default keeps naming a
/// dropped default policy.
pub fn drop_policy(
    store: &Store,
    tag_sets: &TagSets,
    db: &str,
    name: &str,
) -> Result<(), PolicyError> {
    if store.catalog().retention_policies(db).get(name).is_none() {
        return Ok(());
    }
    refuse_in_cluster(store, "dropping a retention policy")?;
    match store.catalog().update_retention_policies(db, |policies| {
        let before = policies.policies.len();
        policies.policies.retain(|p| p.name != name);
        Ok((policies.policies.len() != before).then_some(()))
    }) {
        Ok(_) | Err(Error::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    drop_policy_tables(store, tag_sets, db, name)
}

/// Drops every table of policy `name` of `db`.
fn drop_policy_tables(
    store: &Store,
    tag_sets: &TagSets,
    db: &str,
    name: &str,
) -> Result<(), PolicyError> {
    for desc in policy_tables(store, &PolicyTables::new(db, name)) {
        drop_measurement_table(store, tag_sets, &desc.name)?;
    }
    Ok(())
}

/// `CREATE DATABASE db [WITH …]`: an existing database is no error unless
/// `WITH` names a policy it lacks or has otherwise.
pub fn create_database(
    store: &Store,
    db: &str,
    with: Option<(Option<&str>, PolicySpec)>,
) -> Result<(), PolicyError> {
    let catalog = store.catalog();
    let policy = with
        .map(|(name, spec)| new_policy(name.unwrap_or(AUTOGEN), spec))
        .transpose()?;
    if catalog.has_namespace(db) {
        let Some(policy) = policy else {
            return Ok(());
        };
        let held = catalog.retention_policies(db);
        return match held.get(&policy.name) {
            Some(p) if same_settings(p, &policy) && held.default == policy.name => Ok(()),
            _ => Err(PolicyError::Conflicts),
        };
    }
    if policy.is_some() {
        refuse_in_cluster(store, "a database's own retention policy")?;
    }
    let policies = policy.map(|p| RetentionPolicies {
        default: p.name.clone(),
        policies: vec![p],
    });
    match catalog.create_namespace_with(db, policies) {
        Ok(()) | Err(Error::Conflict(_)) => Ok(()),
        Err(Error::InvalidInput(why)) => Err(PolicyError::Unnameable(why)),
        Err(e) => Err(e.into()),
    }
}

/// `DROP DATABASE db`: every measurement of every policy, the Prometheus
/// samples, the dictionary and the database, out of the catalog in one
/// change (a write meanwhile finds no database). A database holding
/// declared-key tables is refused whole, before anything goes.
pub fn drop_database(store: &Store, tag_sets: &TagSets, db: &str) -> Result<(), PolicyError> {
    let catalog = store.catalog();
    if !catalog.has_namespace(db) {
        return Ok(());
    }
    let declared: Vec<String> = catalog
        .tables(Some(db))
        .iter()
        .filter(|t| !t.key.is_open_tags() && t.name.table != TAGS_TABLE)
        .map(|t| t.name.table.clone())
        .collect();
    if !declared.is_empty() {
        return Err(PolicyError::DeclaredTables {
            db: db.into(),
            tables: declared.join(", "),
        });
    }
    refuse_in_cluster(store, "dropping a database")?;
    match store.drop_namespace(db) {
        Ok(()) | Err(Error::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    // Its dictionary went with its `__tags` table: a writer asks anew.
    tag_sets.forget(db);
    Ok(())
}

/// `DROP MEASUREMENT m`: its table in every policy of `db`. A measurement
/// nowhere is no error; one only declared-key tables hold is refused.
pub fn drop_measurement(
    store: &Store,
    tag_sets: &TagSets,
    db: &str,
    measurement: &str,
    held_by_declared: bool,
) -> Result<(), PolicyError> {
    let catalog = store.catalog();
    let named: Vec<TableName> = catalog
        .retention_policies(db)
        .policies
        .iter()
        .filter_map(|p| PolicyTables::new(db, &p.name).table(measurement).ok())
        .filter(|name| catalog.table(name).is_ok_and(|d| d.key.is_open_tags()))
        .collect();
    if named.is_empty() && held_by_declared {
        return Err(PolicyError::DeclaredMeasurement(measurement.into()));
    }
    if !named.is_empty() {
        refuse_in_cluster(store, "dropping a measurement")?;
    }
    for name in &named {
        drop_measurement_table(store, tag_sets, name)?;
    }
    Ok(())
}

/// Where a write to a database goes: the policy's tables and what they
/// keep.
#[derive(Debug, Clone)]
pub struct WriteTarget {
    pub tables: PolicyTables,
    /// The family TTL of a table made for it.
    pub ttl_secs: Option<u64>,
    /// Points older than this (a cell version, ms) are beyond the policy.
    pub oldest_ms: Option<u64>,
}

/// The policy a write to `db` names (`rp`; the default one when `None`
/// or empty).
pub fn write_target(
    store: &Store,
    db: &str,
    rp: Option<&str>,
    now_ms: u64,
) -> Result<WriteTarget, PolicyError> {
    let policies = store.catalog().retention_policies(db);
    let policy = policies.resolve(rp).map_err(PolicyError::NotFound)?;
    let duration_ms = policy.duration_ns / 1_000_000;
    Ok(WriteTarget {
        tables: PolicyTables::new(db, &policy.name),
        ttl_secs: ttl_secs(policy.duration_ns),
        oldest_ms: (policy.duration_ns > 0).then(|| now_ms.saturating_sub(duration_ms)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_durations_are_influxdbs() {
        let day = 24 * HOUR_NS;
        assert_eq!(default_shard_ns(0), 7 * day);
        assert_eq!(default_shard_ns(2 * HOUR_NS), HOUR_NS);
        assert_eq!(default_shard_ns(3 * day), day);
        assert_eq!(default_shard_ns(400 * day), 7 * day);
        assert_eq!(normalised_shard_ns(600 * 1_000_000_000, 3 * day), HOUR_NS);
        assert!(matches!(
            new_policy(
                "a",
                PolicySpec {
                    duration_ns: Some(day),
                    shard_duration_ns: Some(7 * day),
                    ..PolicySpec::default()
                }
            ),
            Err(PolicyError::ShardLonger)
        ));
        assert!(matches!(
            new_policy(
                "a",
                PolicySpec {
                    duration_ns: Some(HOUR_NS / 2),
                    ..PolicySpec::default()
                }
            ),
            Err(PolicyError::TooShort)
        ));
        assert!(matches!(
            new_policy("a.b", PolicySpec::default()),
            Err(PolicyError::Unnameable(_))
        ));
        assert_eq!(ttl_secs(HOUR_NS), Some(3_600));
        assert_eq!(ttl_secs(0), None);
    }
}
