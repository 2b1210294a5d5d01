//! TSBS's devops data set, cpu-only (`tsbs_generate_data
//! --use-case=cpu-only`), and its 15 query types in the InfluxQL that
//! `tsbs_generate_queries` writes for InfluxDB. Hosts carry TSBS's ten tags
//! (hostname, region, datacenter, rack, os, arch, team, service,
//! service_version, service_environment) drawn from TSBS's choices by a
//! hash of the host, and the ten cpu fields of [`super::cpu_value`]; a
//! point is a pure function of (host, step), so the data streams in any
//! amount without being stored, the same bytes for every system.

use std::fmt::Write;

use super::{CPU_FIELDS, cpu_value};

/// TSBS's default start of data: 2016-01-01T00:00:00Z, in ms.
pub const START_MS: u64 = 1_451_606_400_000;
/// TSBS's default interval between a host's points.
pub const INTERVAL_MS: u64 = 10_000;

const REGIONS: [(&str, &[&str]); 9] = [
    (
        "us-east-1",
        &["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1e"],
    ),
    ("us-west-1", &["us-west-1a", "us-west-1b"]),
    ("us-west-2", &["us-west-2a", "us-west-2b", "us-west-2c"]),
    ("eu-west-1", &["eu-west-1a", "eu-west-1b", "eu-west-1c"]),
    ("eu-central-1", &["eu-central-1a", "eu-central-1b"]),
    ("ap-southeast-1", &["ap-southeast-1a", "ap-southeast-1b"]),
    ("ap-southeast-2", &["ap-southeast-2a", "ap-southeast-2b"]),
    ("ap-northeast-1", &["ap-northeast-1a", "ap-northeast-1c"]),
    ("sa-east-1", &["sa-east-1a", "sa-east-1b", "sa-east-1c"]),
];
const OS: [&str; 3] = ["Ubuntu16.10", "Ubuntu16.04LTS", "Ubuntu15.10"];
const ARCH: [&str; 2] = ["x64", "x86"];
const TEAM: [&str; 4] = ["SF", "NYC", "LON", "CHI"];
const ENVIRONMENT: [&str; 3] = ["production", "staging", "test"];

/// TSBS's host name: `host_<n>`, unpadded.
pub fn hostname(host: u64) -> String {
    format!("host_{host}")
}

/// A host's ten tags, in TSBS's order (hostname first).
pub fn host_tags(host: u64) -> [(&'static str, String); 10] {
    let pick = |salt: u64, n: usize| {
        (super::mix(host ^ salt.wrapping_mul(0x9E37_79B9)) % n as u64) as usize
    };
    let (region, datacenters) = REGIONS[pick(1, REGIONS.len())];
    [
        ("hostname", hostname(host)),
        ("region", region.to_string()),
        (
            "datacenter",
            datacenters[pick(2, datacenters.len())].to_string(),
        ),
        ("rack", pick(3, 100).to_string()),
        ("os", OS[pick(4, OS.len())].to_string()),
        ("arch", ARCH[pick(5, ARCH.len())].to_string()),
        ("team", TEAM[pick(6, TEAM.len())].to_string()),
        ("service", pick(7, 20).to_string()),
        ("service_version", pick(8, 2).to_string()),
        (
            "service_environment",
            ENVIRONMENT[pick(9, ENVIRONMENT.len())].to_string(),
        ),
    ]
}

/// The series key part of a host's lines (`cpu,hostname=…,…`), made once
/// per host: it is most of a line's bytes.
pub fn series_prefix(host: u64) -> String {
    let mut out = String::from("cpu");
    for (k, v) in host_tags(host) {
        let _ = write!(out, ",{k}={v}");
    }
    out
}

/// Appends host `host`'s point at `step` (time `START_MS + step ×
/// INTERVAL_MS`, in ms) as a line of line protocol after `prefix`
/// ([`series_prefix`] of the host).
pub fn line(prefix: &str, host: u64, step: u64, out: &mut String) {
    out.push_str(prefix);
    for (i, f) in CPU_FIELDS.iter().enumerate() {
        out.push(if i == 0 { ' ' } else { ',' });
        let _ = write!(out, "{f}={}", cpu_value(host, step, i));
    }
    let _ = writeln!(out, " {}", START_MS + step * INTERVAL_MS);
}

/// The data set as line-protocol bodies of `lines_per_body` lines, every
/// host at step 0, then step 1, …, as TSBS orders it; made as they are
/// taken, so a day of 4,000 hosts (34.56M lines) never sits in memory.
pub struct Bodies {
    prefixes: Vec<String>,
    steps: u64,
    lines_per_body: usize,
    next: u64,
}

impl Bodies {
    pub fn new(hosts: u64, steps: u64, lines_per_body: usize) -> Self {
        Bodies {
            prefixes: (0..hosts).map(series_prefix).collect(),
            steps,
            lines_per_body: lines_per_body.max(1),
            next: 0,
        }
    }

    /// Lines in all.
    pub fn total(&self) -> u64 {
        self.prefixes.len() as u64 * self.steps
    }
}

impl Iterator for Bodies {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let hosts = self.prefixes.len() as u64;
        let total = hosts * self.steps;
        if self.next >= total {
            return None;
        }
        let mut body = String::with_capacity(self.lines_per_body * 320);
        let end = (self.next + self.lines_per_body as u64).min(total);
        for i in self.next..end {
            let (step, host) = (i / hosts, i % hosts);
            line(&self.prefixes[host as usize], host, step, &mut body);
        }
        self.next = end;
        Some(body)
    }
}

/// The 15 query types of TSBS's devops use case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryType {
    /// single-groupby-M-H-T: max of M metrics of H hosts over T hours, per
    /// minute.
    SingleGroupby {
        metrics: usize,
        hosts: usize,
        hours: u64,
    },
    /// cpu-max-all-H: max of every metric of H hosts over 8 hours, per hour.
    CpuMaxAll { hosts: usize },
    /// double-groupby-M: mean of M metrics per host and hour over 12 hours.
    DoubleGroupby { metrics: usize },
    /// high-cpu-H: points with usage_user > 90 of H hosts (0: all) over
    /// 12 hours.
    HighCpu { hosts: usize },
    /// lastpoint: every host's newest point.
    Lastpoint,
    /// groupby-orderby-limit: the per-minute max of usage_user before a
    /// random end, 5 minutes of it (TSBS's InfluxQL has no ORDER BY here).
    GroupbyOrderbyLimit,
}

impl QueryType {
    /// All 15, in TSBS's order.
    pub const ALL: [QueryType; 15] = [
        QueryType::SingleGroupby {
            metrics: 1,
            hosts: 1,
            hours: 1,
        },
        QueryType::SingleGroupby {
            metrics: 1,
            hosts: 1,
            hours: 12,
        },
        QueryType::SingleGroupby {
            metrics: 1,
            hosts: 8,
            hours: 1,
        },
        QueryType::SingleGroupby {
            metrics: 5,
            hosts: 1,
            hours: 1,
        },
        QueryType::SingleGroupby {
            metrics: 5,
            hosts: 1,
            hours: 12,
        },
        QueryType::SingleGroupby {
            metrics: 5,
            hosts: 8,
            hours: 1,
        },
        QueryType::CpuMaxAll { hosts: 1 },
        QueryType::CpuMaxAll { hosts: 8 },
        QueryType::DoubleGroupby { metrics: 1 },
        QueryType::DoubleGroupby { metrics: 5 },
        QueryType::DoubleGroupby { metrics: 10 },
        QueryType::HighCpu { hosts: 1 },
        QueryType::HighCpu { hosts: 0 },
        QueryType::Lastpoint,
        QueryType::GroupbyOrderbyLimit,
    ];

    /// TSBS's name of the type.
    pub fn name(&self) -> String {
        match *self {
            QueryType::SingleGroupby {
                metrics,
                hosts,
                hours,
            } => {
                format!("single-groupby-{metrics}-{hosts}-{hours}")
            }
            QueryType::CpuMaxAll { hosts } => format!("cpu-max-all-{hosts}"),
            QueryType::DoubleGroupby { metrics: 10 } => "double-groupby-all".to_string(),
            QueryType::DoubleGroupby { metrics } => format!("double-groupby-{metrics}"),
            QueryType::HighCpu { hosts: 0 } => "high-cpu-all".to_string(),
            QueryType::HighCpu { hosts } => format!("high-cpu-{hosts}"),
            QueryType::Lastpoint => "lastpoint".to_string(),
            QueryType::GroupbyOrderbyLimit => "groupby-orderby-limit".to_string(),
        }
    }

    /// One query of this type in InfluxQL, as `tsbs_generate_queries`
    /// writes it for InfluxDB, its hosts and window drawn by `rng` over
    /// `hosts` hosts and the data's `[start_ms, end_ms)`.
    pub fn influxql(&self, rng: &mut Rng, hosts: u64, start_ms: u64, end_ms: u64) -> String {
        let hour = 3_600_000;
        let window = |rng: &mut Rng, len: u64| -> (String, String) {
            let room = end_ms.saturating_sub(start_ms).saturating_sub(len);
            // Whole seconds, as TSBS prints RFC 3339 times.
            let from = (start_ms + rng.below(room + 1)) / 1000 * 1000;
            (rfc3339(from), rfc3339(from + len))
        };
        let select = |agg: &str, metrics: usize| -> String {
            CPU_FIELDS[..metrics]
                .iter()
                .map(|f| format!("{agg}({f})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match *self {
            QueryType::SingleGroupby {
                metrics,
                hosts: n,
                hours,
            } => {
                let (from, to) = window(rng, hours * hour);
                format!(
                    "SELECT {} from cpu where {} and time >= '{from}' and time < '{to}' group by time(1m)",
                    select("max", metrics),
                    host_where(rng, hosts, n)
                )
            }
            QueryType::CpuMaxAll { hosts: n } => {
                let (from, to) = window(rng, 8 * hour);
                format!(
                    "SELECT {} from cpu where {} and time >= '{from}' and time < '{to}' group by time(1h)",
                    select("max", CPU_FIELDS.len()),
                    host_where(rng, hosts, n)
                )
            }
            QueryType::DoubleGroupby { metrics } => {
                let (from, to) = window(rng, 12 * hour);
                format!(
                    "SELECT {} from cpu where time >= '{from}' and time < '{to}' group by time(1h),hostname",
                    select("mean", metrics)
                )
            }
            QueryType::HighCpu { hosts: n } => {
                let (from, to) = window(rng, 12 * hour);
                let hosts = if n == 0 {
                    String::new()
                } else {
                    format!("and {} ", host_where(rng, hosts, n))
                };
                format!(
                    "SELECT * from cpu where usage_user > 90.0 {hosts}and time >= '{from}' and time < '{to}'"
                )
            }
            QueryType::Lastpoint => {
                "SELECT * from cpu group by \"hostname\" order by time desc limit 1".to_string()
            }
            QueryType::GroupbyOrderbyLimit => {
                let (_, to) = window(rng, hour);
                format!(
                    "SELECT max(usage_user) from cpu WHERE time < '{to}' group by time(1m) limit 5"
                )
            }
        }
    }
}

/// `(hostname = 'host_a' or hostname = 'host_b' …)` of `n` distinct hosts.
fn host_where(rng: &mut Rng, hosts: u64, n: usize) -> String {
    let mut chosen: Vec<u64> = Vec::with_capacity(n);
    while chosen.len() < n.min(hosts as usize) {
        let h = rng.below(hosts);
        if !chosen.contains(&h) {
            chosen.push(h);
        }
    }
    let terms: Vec<String> = chosen
        .iter()
        .map(|h| format!("hostname = '{}'", hostname(*h)))
        .collect();
    format!("({})", terms.join(" or "))
}

/// `YYYY-MM-DDTHH:MM:SSZ` of epoch ms (whole seconds).
pub fn rfc3339(ms: u64) -> String {
    crate::clock::format_rfc3339((ms / 1000) as i64 * 1_000_000_000)
}

/// A small seeded generator (splitmix64), so every system gets the same
/// queries from one seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        super::mix(self.0)
    }

    /// Uniform in `[0, n)` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_tsbs_tags_and_bodies_cover_every_point_once() {
        let prefix = series_prefix(3);
        assert!(
            prefix.starts_with("cpu,hostname=host_3,region="),
            "{prefix}"
        );
        assert_eq!(prefix.matches(',').count(), 10);
        let tags = host_tags(3);
        let region = REGIONS
            .iter()
            .find(|r| r.0 == tags[1].1)
            .expect("a TSBS region");
        assert!(region.1.contains(&tags[2].1.as_str()), "{tags:?}");
        let bodies: Vec<String> = Bodies::new(5, 7, 4).collect();
        let lines: Vec<&str> = bodies.iter().flat_map(|b| b.lines()).collect();
        assert_eq!(lines.len(), 35);
        assert!(lines[0].starts_with("cpu,hostname=host_0,"));
        assert!(lines[5].starts_with("cpu,hostname=host_0,"));
        assert!(lines[5].ends_with(&format!(" {}", START_MS + INTERVAL_MS)));
    }

    #[test]
    fn queries_have_tsbs_shapes_and_repeat_from_a_seed() {
        assert_eq!(rfc3339(START_MS), "2016-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(START_MS + 86_400_000 + 3_723_000),
            "2016-01-02T01:02:03Z"
        );
        let names: Vec<String> = QueryType::ALL.iter().map(QueryType::name).collect();
        assert_eq!(names.len(), 15);
        assert!(names.contains(&"double-groupby-all".to_string()));
        let day = START_MS + 86_400_000;
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for t in QueryType::ALL {
            assert_eq!(
                t.influxql(&mut a, 100, START_MS, day),
                t.influxql(&mut b, 100, START_MS, day)
            );
        }
        let q = QueryType::SingleGroupby {
            metrics: 5,
            hosts: 8,
            hours: 1,
        }
        .influxql(&mut a, 100, START_MS, day);
        assert_eq!(q.matches("hostname = ").count(), 8, "{q}");
        assert!(q.starts_with("SELECT max(usage_user), max(usage_system), max(usage_idle), max(usage_nice), max(usage_iowait) from cpu where (hostname = 'host_"), "{q}");
    }
}
