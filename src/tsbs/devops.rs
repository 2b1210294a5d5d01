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
    /// Steps of the data set up to the last one sent.
    steps: u64,
    lines_per_body: usize,
    /// The first point sent.
    first: u64,
    next: u64,
    /// Out of order: points held back, by the place they are sent at.
    late: Option<std::collections::BinaryHeap<std::cmp::Reverse<(u64, u64)>>>,
}

/// Of a thousand points sent out of order ([`Bodies::out_of_order`]): this
/// many are late by an hour, and this many more by up to a minute.
pub const LATE_BY_AN_HOUR: u64 = 10;
pub const LATE_WITHIN_A_MINUTE: u64 = 100;

impl Bodies {
    pub fn new(hosts: u64, steps: u64, lines_per_body: usize) -> Self {
        Bodies {
            prefixes: (0..hosts).map(series_prefix).collect(),
            steps,
            lines_per_body: lines_per_body.max(1),
            first: 0,
            next: 0,
            late: None,
        }
    }

    /// The data set's `more_steps` steps after its first `after_steps`:
    /// the same series going on (for ingest beside queries on what came
    /// before).
    pub fn continued(hosts: u64, after_steps: u64, more_steps: u64, lines_per_body: usize) -> Self {
        let first = hosts * after_steps;
        Bodies {
            steps: after_steps + more_steps,
            first,
            next: first,
            ..Bodies::new(hosts, 0, lines_per_body)
        }
    }

    /// The same points, 10 % of them sent up to a minute (6 steps) late
    /// and 1 % an hour late — after newer points of their series, as a
    /// buffering or reconnecting agent sends them. Which points, and how
    /// late, follows from each point's place alone, so every system gets
    /// the same bytes.
    pub fn out_of_order(hosts: u64, steps: u64, lines_per_body: usize) -> Self {
        Bodies {
            late: Some(std::collections::BinaryHeap::new()),
            ..Bodies::new(hosts, steps, lines_per_body)
        }
    }

    /// The place point `i` (in TSBS's order) is sent at: its own, or
    /// `hosts` places per step later.
    fn sent_at(i: u64, hosts: u64) -> u64 {
        let draw = super::mix(i ^ 0x0005_EED0_F0DD) % 1000;
        let steps_late = if draw < LATE_BY_AN_HOUR {
            360
        } else if draw < LATE_BY_AN_HOUR + LATE_WITHIN_A_MINUTE {
            1 + draw % 6
        } else {
            0
        };
        i + steps_late * hosts
    }

    /// Lines in all.
    pub fn total(&self) -> u64 {
        self.prefixes.len() as u64 * self.steps - self.first
    }
}

impl Iterator for Bodies {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let hosts = self.prefixes.len() as u64;
        let total = hosts * self.steps;
        if self.next >= total && self.late.as_ref().is_none_or(|l| l.is_empty()) {
            return None;
        }
        let mut body = String::with_capacity(self.lines_per_body * 320);
        let Some(late) = self.late.as_mut() else {
            let end = (self.next + self.lines_per_body as u64).min(total);
            for i in self.next..end {
                let (step, host) = (i / hosts, i % hosts);
                line(&self.prefixes[host as usize], host, step, &mut body);
            }
            self.next = end;
            return Some(body);
        };
        // A point is sent once every point before its place is known: the
        // heap holds at most an hour of points.
        let mut lines = 0;
        while lines < self.lines_per_body {
            let ready = late
                .peek()
                .is_some_and(|std::cmp::Reverse((at, _))| *at < self.next || self.next >= total);
            if ready {
                let Some(std::cmp::Reverse((_, i))) = late.pop() else {
                    break;
                };
                let (step, host) = (i / hosts, i % hosts);
                line(&self.prefixes[host as usize], host, step, &mut body);
                lines += 1;
            } else if self.next < total {
                late.push(std::cmp::Reverse((
                    Bodies::sent_at(self.next, hosts),
                    self.next,
                )));
                self.next += 1;
            } else {
                break;
            }
        }
        (lines > 0).then_some(body)
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

    /// What one query of this type asks, drawn by `rng` over `hosts` hosts
    /// and the data's `[start_ms, end_ms)`: its window and hosts, the same
    /// whichever language then says it.
    pub fn draw(&self, rng: &mut Rng, hosts: u64, start_ms: u64, end_ms: u64) -> Drawn {
        let hour = 3_600_000;
        let (len, n) = match *self {
            QueryType::SingleGroupby {
                hosts: n, hours, ..
            } => (Some(hours * hour), n),
            QueryType::CpuMaxAll { hosts: n } => (Some(8 * hour), n),
            QueryType::DoubleGroupby { .. } => (Some(12 * hour), 0),
            QueryType::HighCpu { hosts: n } => (Some(12 * hour), n),
            QueryType::Lastpoint => (None, 0),
            QueryType::GroupbyOrderbyLimit => (Some(hour), 0),
        };
        let (from_ms, to_ms) = match len {
            Some(len) => {
                let room = end_ms.saturating_sub(start_ms).saturating_sub(len);
                // Whole seconds, as TSBS prints RFC 3339 times.
                let from = (start_ms + rng.below(room + 1)) / 1000 * 1000;
                (from, from + len)
            }
            None => (start_ms, end_ms),
        };
        Drawn {
            from_ms,
            to_ms,
            hosts: choose_hosts(rng, hosts, n),
        }
    }

    /// One query of this type in InfluxQL, as `tsbs_generate_queries`
    /// writes it for InfluxDB, its hosts and window drawn by `rng` over
    /// `hosts` hosts and the data's `[start_ms, end_ms)`.
    pub fn influxql(&self, rng: &mut Rng, hosts: u64, start_ms: u64, end_ms: u64) -> String {
        let d = self.draw(rng, hosts, start_ms, end_ms);
        let (from, to) = (rfc3339(d.from_ms), rfc3339(d.to_ms));
        let select = |agg: &str, metrics: usize| -> String {
            CPU_FIELDS[..metrics]
                .iter()
                .map(|f| format!("{agg}({f})"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match *self {
            QueryType::SingleGroupby { metrics, .. } => format!(
                "SELECT {} from cpu where {} and time >= '{from}' and time < '{to}' group by time(1m)",
                select("max", metrics),
                host_where(&d.hosts)
            ),
            QueryType::CpuMaxAll { .. } => format!(
                "SELECT {} from cpu where {} and time >= '{from}' and time < '{to}' group by time(1h)",
                select("max", CPU_FIELDS.len()),
                host_where(&d.hosts)
            ),
            QueryType::DoubleGroupby { metrics } => format!(
                "SELECT {} from cpu where time >= '{from}' and time < '{to}' group by time(1h),hostname",
                select("mean", metrics)
            ),
            QueryType::HighCpu { .. } => {
                let hosts = if d.hosts.is_empty() {
                    String::new()
                } else {
                    format!("and {} ", host_where(&d.hosts))
                };
                format!(
                    "SELECT * from cpu where usage_user > 90.0 {hosts}and time >= '{from}' and time < '{to}'"
                )
            }
            QueryType::Lastpoint => {
                "SELECT * from cpu group by \"hostname\" order by time desc limit 1".to_string()
            }
            QueryType::GroupbyOrderbyLimit => format!(
                "SELECT max(usage_user) from cpu WHERE time < '{to}' group by time(1m) limit 5"
            ),
        }
    }

    /// One query of this type as `tsbs_generate_queries` writes it for
    /// VictoriaMetrics (MetricsQL over `cpu_<field>` series, a range query),
    /// drawn as [`QueryType::influxql`] draws (the same seed gives the same
    /// window and hosts). `None` for the types TSBS has no VictoriaMetrics
    /// form of (high-cpu, lastpoint, groupby-orderby-limit); they still
    /// draw, so the next query's draws stay in step.
    pub fn promql(
        &self,
        rng: &mut Rng,
        hosts: u64,
        start_ms: u64,
        end_ms: u64,
    ) -> Option<RangeQuery> {
        let d = self.draw(rng, hosts, start_ms, end_ms);
        let selector = |metrics: usize| -> String {
            let names = &CPU_FIELDS[..metrics];
            let hosts: Vec<String> = d.hosts.iter().map(|h| hostname(*h)).collect();
            let host_matcher =
                (!hosts.is_empty()).then(|| format!("hostname=~'{}'", hosts.join("|")));
            match (names, host_matcher) {
                ([one], Some(h)) => format!("cpu_{one}{{{h}}}"),
                ([one], None) => format!("cpu_{one}"),
                (many, h) => {
                    let name = format!("__name__=~'cpu_({})'", many.join("|"));
                    match h {
                        Some(h) => format!("{{{name}, {h}}}"),
                        None => format!("{{{name}}}"),
                    }
                }
            }
        };
        let (query, step_s) = match *self {
            QueryType::SingleGroupby { metrics, .. } => (
                format!(
                    "max(max_over_time({}[1m])) by (__name__)",
                    selector(metrics)
                ),
                60,
            ),
            QueryType::CpuMaxAll { .. } => (
                format!(
                    "max(max_over_time({}[1h])) by (__name__)",
                    selector(CPU_FIELDS.len())
                ),
                3600,
            ),
            QueryType::DoubleGroupby { metrics } => (
                format!(
                    "avg(avg_over_time({}[1h])) by (__name__, hostname)",
                    selector(metrics)
                ),
                3600,
            ),
            QueryType::HighCpu { .. } | QueryType::Lastpoint | QueryType::GroupbyOrderbyLimit => {
                return None;
            }
        };
        Some(RangeQuery {
            query,
            start_s: d.from_ms / 1000,
            end_s: d.to_ms / 1000,
            step_s,
        })
    }
}

/// A query's window and hosts (see [`QueryType::draw`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Drawn {
    pub from_ms: u64,
    pub to_ms: u64,
    pub hosts: Vec<u64>,
}

/// A PromQL/MetricsQL range query: `/api/v1/query_range`'s parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeQuery {
    pub query: String,
    pub start_s: u64,
    pub end_s: u64,
    pub step_s: u64,
}

/// `n` distinct hosts of `hosts`, in the order drawn.
fn choose_hosts(rng: &mut Rng, hosts: u64, n: usize) -> Vec<u64> {
    let mut chosen: Vec<u64> = Vec::with_capacity(n);
    while chosen.len() < n.min(hosts as usize) {
        let h = rng.below(hosts);
        if !chosen.contains(&h) {
            chosen.push(h);
        }
    }
    chosen
}

/// `(hostname = 'host_a' or hostname = 'host_b' …)`.
fn host_where(hosts: &[u64]) -> String {
    let terms: Vec<String> = hosts
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
        // Going on after step 3 is the same lines from there.
        let more = Bodies::continued(5, 3, 4, 6);
        assert_eq!(more.total(), 20);
        let more: Vec<String> = more.collect();
        let more: Vec<&str> = more.iter().flat_map(|b| b.lines()).collect();
        assert_eq!(more, lines[15..]);
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

    /// The PromQL of a query asks what its InfluxQL asks: drawn from one
    /// seed, the window and hosts are the same, and the draws stay in step
    /// over the types TSBS has no VictoriaMetrics form of.
    #[test]
    fn promql_draws_as_influxql_does() {
        let day = START_MS + 86_400_000;
        let (mut a, mut b) = (Rng::new(11), Rng::new(11));
        let mut forms = 0;
        for t in QueryType::ALL {
            let influxql = t.influxql(&mut a, 100, START_MS, day);
            let Some(p) = t.promql(&mut b, 100, START_MS, day) else {
                continue;
            };
            forms += 1;
            assert!(
                influxql.contains(&format!("time >= '{}'", rfc3339(p.start_s * 1000))),
                "{influxql} / {p:?}"
            );
            assert!(
                influxql.contains(&format!("time < '{}'", rfc3339(p.end_s * 1000))),
                "{influxql} / {p:?}"
            );
            for host in influxql.split("hostname = '").skip(1) {
                let host = host.split('\'').next().unwrap_or_default();
                assert!(p.query.contains(host), "{influxql} / {p:?}");
            }
        }
        assert_eq!(forms, 11);
        let q = QueryType::SingleGroupby {
            metrics: 1,
            hosts: 1,
            hours: 1,
        }
        .promql(&mut Rng::new(3), 100, START_MS, day)
        .expect("a form");
        assert!(
            q.query
                .starts_with("max(max_over_time(cpu_usage_user{hostname=~'host_")
                && q.query.ends_with("'}[1m])) by (__name__)"),
            "{q:?}"
        );
        assert_eq!((q.step_s, q.end_s - q.start_s), (60, 3600));
        let q = QueryType::DoubleGroupby { metrics: 5 }
            .promql(&mut Rng::new(3), 100, START_MS, day)
            .expect("a form");
        assert_eq!(
            q.query,
            "avg(avg_over_time({__name__=~'cpu_(usage_user|usage_system|usage_idle|usage_nice|usage_iowait)'}[1h])) by (__name__, hostname)"
        );
    }

    /// Sent out of order, every point still comes once; about 10 % come
    /// after a newer point of their host and about 1 % an hour late.
    #[test]
    fn out_of_order_bodies_send_every_point_once_some_late() {
        let (hosts, steps) = (20, 800);
        let lines_of = |bodies: Bodies| -> Vec<String> {
            bodies
                .flat_map(|b| b.lines().map(str::to_string).collect::<Vec<_>>())
                .collect()
        };
        let lines = lines_of(Bodies::out_of_order(hosts, steps, 333));
        assert_eq!(lines.len() as u64, hosts * steps);
        let mut sent = lines.clone();
        let mut in_order = lines_of(Bodies::new(hosts, steps, 333));
        assert_ne!(sent, in_order);
        sent.sort_unstable();
        in_order.sort_unstable();
        assert_eq!(sent, in_order);
        let time = |l: &str| -> u64 { l.rsplit(' ').next().unwrap().parse().unwrap() };
        let host = |l: &str| -> String { l.split(',').nth(1).unwrap().to_string() };
        let mut newest: std::collections::HashMap<String, u64> = Default::default();
        let (mut late, mut an_hour) = (0u64, 0u64);
        for l in &lines {
            let (h, t) = (host(l.as_str()), time(l.as_str()));
            let seen = newest.entry(h).or_insert(0);
            if t < *seen {
                late += 1;
                // Sent just before its host's point an hour on.
                if *seen - t >= 3_600_000 - INTERVAL_MS {
                    an_hour += 1;
                }
            }
            *seen = (*seen).max(t);
        }
        let all = hosts * steps;
        assert!(
            (all * 8 / 100..all * 12 / 100).contains(&late),
            "{late} of {all}"
        );
        assert!(
            (all / 200..all * 2 / 100).contains(&an_hour),
            "{an_hour} of {all}"
        );
    }
}
