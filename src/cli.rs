//! The client verbs of the `halite` command: they talk to a running server
//! over its HTTP API and print readable tables, or the raw JSON with
//! `--json`.

use serde_json::{Value, json};

use crate::client::{HttpClient, Response};

/// Where the server is, how to reach it (TLS, token), and how to print.
pub struct Client {
    /// `host:port`, `http://host:port` or `https://host:port`.
    pub addr: String,
    pub json: bool,
    pub http: HttpClient,
}

/// How long a verb waits for its answer (a big scan or a major compaction
/// takes a while).
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(600);

pub type CliResult = Result<(), String>;

impl Client {
    fn call(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Response, String> {
        let headers: Vec<(&str, &str)> = content_type
            .map(|ct| ("Content-Type", ct))
            .into_iter()
            .collect();
        self.call_with(method, path, &headers, body)
    }

    /// A request with any headers (the client adds the token).
    fn call_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, String> {
        self.http
            .request(&self.addr, method, path, headers, body, ANSWER_WITHIN)
            .map_err(|e| format!("{e} (is `halite serve` running there?)"))
    }

    /// `GET path`, answered as it comes (for a caller that reads it).
    pub fn get_path(&self, path: &str) -> Result<Response, String> {
        self.call("GET", path, None, b"")
    }

    /// Prints the answer, or turns an error answer into the error message.
    fn finish(&self, r: Response, table: impl FnOnce(&Value) -> String) -> CliResult {
        let body = r.json();
        if r.status >= 400 {
            let msg = body["error"]["message"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| r.text());
            let mut out = format!("{} ({})", msg, r.status);
            if let Some(rej) = body["rejected"].as_array() {
                for x in rej.iter().take(20) {
                    out.push_str(&format!(
                        "\n  line {}: {}",
                        x["line"],
                        x["reason"].as_str().unwrap_or("")
                    ));
                }
            }
            return Err(out);
        }
        if self.json {
            println!(
                "{}",
                if body.is_null() {
                    r.text()
                } else {
                    body.to_string()
                }
            );
        } else {
            print!("{}", table(&body));
        }
        Ok(())
    }

    pub fn table_create(&self, spec: &str) -> CliResult {
        let r = self.call(
            "POST",
            "/api/v1/tables",
            Some("application/json"),
            spec.as_bytes(),
        )?;
        self.finish(r, |t| {
            format!(
                "created {} with {} region(s)\n",
                t["name"].as_str().unwrap_or("?"),
                t["regions"].as_array().map_or(0, Vec::len)
            )
        })
    }

    pub fn table_list(&self) -> CliResult {
        let r = self.call("GET", "/api/v1/tables", None, b"")?;
        self.finish(r, |tables| {
            let rows: Vec<Vec<String>> = tables
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|t| {
                            vec![
                                t["name"].as_str().unwrap_or("").to_string(),
                                t["regions"].as_array().map_or(0, Vec::len).to_string(),
                                t["families"]
                                    .as_array()
                                    .map(|f| {
                                        f.iter()
                                            .filter_map(|x| x["name"].as_str())
                                            .collect::<Vec<_>>()
                                            .join(",")
                                    })
                                    .unwrap_or_default(),
                                t["durability"].as_str().unwrap_or("").to_string(),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            render(&["TABLE", "REGIONS", "FAMILIES", "DURABILITY"], &rows)
        })
    }

    /// `halite cluster`: every partition's lease, and what the server
    /// holds (`/api/v1/cluster`).
    pub fn cluster(&self) -> CliResult {
        let r = self.call("GET", "/api/v1/cluster", None, b"")?;
        self.finish(r, |s| {
            if s["mode"] != "cluster" {
                return "a single node (no [cluster] node set)\n".to_string();
            }
            let node = s["node"].as_str().unwrap_or("");
            let held: std::collections::BTreeMap<String, &Value> = s["held"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|h| {
                    (
                        format!("{}/{}", h["topic"].as_str().unwrap_or(""), h["partition"]),
                        h,
                    )
                })
                .collect();
            let rows: Vec<Vec<String>> = s["leases"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    let shard = l["shard"].as_str().unwrap_or("").to_string();
                    let here = held.get(&shard);
                    vec![
                        shard,
                        l["owner"].as_str().unwrap_or("").to_string(),
                        l["epoch"].to_string(),
                        here.map_or(String::new(), |h| {
                            h["regions"]
                                .as_array()
                                .map(|r| {
                                    r.iter()
                                        .map(|x| x.to_string())
                                        .collect::<Vec<_>>()
                                        .join(",")
                                })
                                .unwrap_or_default()
                        }),
                        here.map_or(String::new(), |h| match h["published_below"].as_u64() {
                            Some(p) => p.to_string(),
                            None => "-".into(),
                        }),
                        here.map_or(String::new(), |h| {
                            if h["fenced"] == true {
                                "fenced"
                            } else {
                                "held here"
                            }
                            .to_string()
                        }),
                    ]
                })
                .collect();
            format!(
                "node {node}, objects {}\n{}",
                s["objects"].as_str().unwrap_or(""),
                render(
                    &[
                        "PARTITION",
                        "OWNER",
                        "EPOCH",
                        "REGIONS",
                        "PUBLISHED BELOW",
                        "HERE"
                    ],
                    &rows
                )
            )
        })
    }

    pub fn table_describe(&self, name: &str) -> CliResult {
        let r = self.call("GET", &format!("/api/v1/tables/{name}"), None, b"")?;
        self.finish(r, |t| {
            format!("{}\n", serde_json::to_string_pretty(t).unwrap_or_default())
        })
    }

    /// Changes families (a JSON list) and/or the durability.
    pub fn table_alter(
        &self,
        name: &str,
        families: Option<&str>,
        durability: Option<&str>,
    ) -> CliResult {
        let mut body = json!({});
        if let Some(f) = families {
            body["families"] = serde_json::from_str(f)
                .map_err(|e| format!("families must be a JSON list: {e}"))?;
        }
        if let Some(d) = durability {
            body["durability"] = json!(d);
        }
        let r = self.call(
            "PATCH",
            &format!("/api/v1/tables/{name}"),
            Some("application/json"),
            body.to_string().as_bytes(),
        )?;
        self.finish(r, |t| {
            format!(
                "altered {} (durability {})\n",
                t["name"].as_str().unwrap_or("?"),
                t["durability"].as_str().unwrap_or("?")
            )
        })
    }

    /// HBase's `flush`: every region's MemStore to store files.
    pub fn table_flush(&self, name: &str) -> CliResult {
        let r = self.call("POST", &format!("/api/v1/tables/{name}/flush"), None, b"")?;
        self.finish(r, |_| format!("flushed {name}\n"))
    }

    /// HBase's `major_compact`.
    pub fn table_compact(&self, name: &str) -> CliResult {
        let r = self.call("POST", &format!("/api/v1/tables/{name}/compact"), None, b"")?;
        self.finish(r, |_| format!("compacted {name}\n"))
    }

    pub fn namespace_list(&self) -> CliResult {
        let r = self.call("GET", "/api/v1/namespaces", None, b"")?;
        self.finish(r, |ns| {
            let rows: Vec<Vec<String>> = ns
                .as_array()
                .into_iter()
                .flatten()
                .map(|n| vec![scalar(n)])
                .collect();
            render(&["NAMESPACE"], &rows)
        })
    }

    pub fn namespace_create(&self, name: &str) -> CliResult {
        let body = json!({ "name": name }).to_string();
        let r = self.call(
            "POST",
            "/api/v1/namespaces",
            Some("application/json"),
            body.as_bytes(),
        )?;
        self.finish(r, |_| format!("created namespace {name}\n"))
    }

    /// `halite token create`: the token is printed once, on its own line
    /// last, for a script to take.
    pub fn token_create(&self, name: &str, scopes: &[String], namespaces: &[String]) -> CliResult {
        let body = json!({ "name": name, "scopes": scopes, "namespaces": namespaces }).to_string();
        let r = self.call(
            "POST",
            "/api/v1/tokens",
            Some("application/json"),
            body.as_bytes(),
        )?;
        self.finish(r, |t| {
            format!(
                "created token {} ({}) for {}\nshown once; keep it secret:\n{}\n",
                t["id"].as_str().unwrap_or("?"),
                list(&t["scopes"]),
                namespaces_of(&t["namespaces"]),
                t["token"].as_str().unwrap_or("?")
            )
        })
    }

    pub fn token_list(&self) -> CliResult {
        let r = self.call("GET", "/api/v1/tokens", None, b"")?;
        self.finish(r, |tokens| {
            let rows: Vec<Vec<String>> = tokens
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    vec![
                        scalar(&t["id"]),
                        scalar(&t["name"]),
                        list(&t["scopes"]),
                        namespaces_of(&t["namespaces"]),
                    ]
                })
                .collect();
            render(&["ID", "NAME", "SCOPES", "NAMESPACES"], &rows)
        })
    }

    pub fn token_revoke(&self, id: &str) -> CliResult {
        let r = self.call("DELETE", &format!("/api/v1/tokens/{id}"), None, b"")?;
        self.finish(r, |_| format!("revoked token {id}\n"))
    }

    pub fn namespace_drop(&self, name: &str) -> CliResult {
        let r = self.call("DELETE", &format!("/api/v1/namespaces/{name}"), None, b"")?;
        self.finish(r, |_| format!("dropped namespace {name}\n"))
    }

    /// A delete (see `POST /api/v1/tables/{t}/delete`).
    pub fn delete(&self, table: &str, spec: &Value) -> CliResult {
        let r = self.call(
            "POST",
            &format!("/api/v1/tables/{table}/delete"),
            Some("application/json"),
            spec.to_string().as_bytes(),
        )?;
        self.finish(r, |d| format!("deleted {} row(s)\n", d["deleted_rows"]))
    }

    /// HBase's `count`: the rows a query selects, streamed as NDJSON and
    /// counted from its trailer (nothing is held whole).
    pub fn count(&self, spec: &Value) -> CliResult {
        let r = self.call_with(
            "POST",
            "/api/v1/query",
            &[
                ("Content-Type", "application/json"),
                ("Accept", "application/x-ndjson"),
            ],
            spec.to_string().as_bytes(),
        )?;
        if r.status >= 400 {
            return self.finish(r, |_| String::new());
        }
        let text = r.text();
        let last: Value = text
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        if !last["error"].is_null() {
            return Err(format!("the count stopped: {}", last["error"]["message"]));
        }
        let rows = last["rows"]
            .as_u64()
            .ok_or_else(|| "the answer ended without its trailer".to_string())?;
        if self.json {
            println!("{}", json!({ "rows": rows }));
        } else {
            println!("{rows} row(s)");
        }
        Ok(())
    }

    pub fn table_drop(&self, name: &str) -> CliResult {
        let r = self.call("DELETE", &format!("/api/v1/tables/{name}"), None, b"")?;
        self.finish(r, |_| format!("dropped {name}\n"))
    }

    pub fn put(&self, table: &str, precision: &str, lines: &str) -> CliResult {
        let r = self.call(
            "POST",
            &format!("/api/v1/write?table={table}&precision={precision}"),
            Some("text/plain"),
            lines.as_bytes(),
        )?;
        let n = lines
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .count();
        self.finish(r, |_| format!("wrote {n} point(s)\n"))
    }

    pub fn get(&self, table: &str, row_hex: &str) -> CliResult {
        let r = self.call(
            "GET",
            &format!("/api/v1/tables/{table}/rows/{row_hex}"),
            None,
            b"",
        )?;
        self.finish(r, |row| rows_table(std::slice::from_ref(row), false))
    }

    pub fn scan(&self, table: &str, spec: &Value) -> CliResult {
        let r = self.call(
            "POST",
            &format!("/api/v1/tables/{table}/scan"),
            Some("application/json"),
            spec.to_string().as_bytes(),
        )?;
        self.finish(r, |page| page_table(page, true))
    }

    pub fn query(&self, spec: &Value) -> CliResult {
        let r = self.call(
            "POST",
            "/api/v1/query",
            Some("application/json"),
            spec.to_string().as_bytes(),
        )?;
        self.finish(r, |answer| match answer["aggregates"].as_array() {
            Some(aggs) => {
                let mut out = aggregates_table(aggs);
                if let Some(t) = answer["continuation"].as_str() {
                    out.push_str(&format!("more: --continuation {t}\n"));
                }
                out
            }
            None => page_table(answer, false),
        })
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Rows as a table: key fields, timestamp, then one column per qualifier.
fn rows_table(rows: &[Value], show_bucket: bool) -> String {
    let mut key_cols: Vec<String> = Vec::new();
    let mut value_cols: Vec<String> = Vec::new();
    for r in rows {
        if let Some(f) = r["key"]["fields"].as_object() {
            for k in f.keys() {
                if !key_cols.contains(k) {
                    key_cols.push(k.clone());
                }
            }
        }
        for c in r["cells"].as_array().into_iter().flatten() {
            let q = format!("{}:{}", scalar(&c["family"]), scalar(&c["qualifier"]));
            if !value_cols.contains(&q) {
                value_cols.push(q);
            }
        }
    }
    // A salted table's raw rows come bucket by bucket: the bucket column
    // says why the order restarts.
    let salted = show_bucket && rows.iter().any(|r| r["key"]["bucket"].is_u64());
    let mut header: Vec<String> = if key_cols.is_empty() {
        vec!["ROW".into()]
    } else {
        key_cols.clone()
    };
    if salted {
        header.insert(0, "bucket".into());
    }
    header.extend(value_cols.iter().cloned());
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut line: Vec<String> = if key_cols.is_empty() {
                vec![scalar(&r["row"])]
            } else {
                key_cols
                    .iter()
                    .map(|k| scalar(&r["key"]["fields"][k]))
                    .collect()
            };
            if salted {
                line.insert(0, scalar(&r["key"]["bucket"]));
            }
            for q in &value_cols {
                let v = r["cells"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| format!("{}:{}", scalar(&c["family"]), scalar(&c["qualifier"])) == *q)
                    .map(|c| scalar(&c["value"]))
                    .unwrap_or_default();
                line.push(v);
            }
            line
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    render(&header, &body)
}

/// A page of rows; `show_bucket` for raw scans, whose salted rows come
/// bucket by bucket (queries merge them in logical order).
fn page_table(page: &Value, show_bucket: bool) -> String {
    let rows = page["rows"].as_array().cloned().unwrap_or_default();
    let mut out = rows_table(&rows, show_bucket);
    out.push_str(&format!("({} row(s))\n", rows.len()));
    if let Some(t) = page["continuation"].as_str() {
        out.push_str(&format!("more: --continuation {t}\n"));
    }
    out
}

fn aggregates_table(aggs: &[Value]) -> String {
    let mut series_cols: Vec<String> = Vec::new();
    let mut fn_cols: Vec<String> = Vec::new();
    for a in aggs {
        for k in a["series"].as_object().into_iter().flat_map(|m| m.keys()) {
            if !series_cols.contains(k) {
                series_cols.push(k.clone());
            }
        }
        for k in a["values"].as_object().into_iter().flat_map(|m| m.keys()) {
            if !fn_cols.contains(k) {
                fn_cols.push(k.clone());
            }
        }
    }
    // `window_ms`, or `window_ns` and so on: the table's time unit.
    let window = aggs
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|m| m.keys())
        .find(|k| k.starts_with("window_"))
        .cloned()
        .unwrap_or_else(|| "window_ms".into());
    let mut header = series_cols.clone();
    header.push("field".into());
    header.push(window.clone());
    header.extend(fn_cols.iter().cloned());
    let rows: Vec<Vec<String>> = aggs
        .iter()
        .map(|a| {
            let mut line: Vec<String> = series_cols
                .iter()
                .map(|k| scalar(&a["series"][k]))
                .collect();
            line.push(scalar(&a["field"]));
            line.push(scalar(&a[window.as_str()]));
            line.extend(fn_cols.iter().map(|f| scalar(&a["values"][f])));
            line
        })
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    render(&header, &rows)
}

/// Left-aligned columns separated by two spaces.
/// A JSON list of strings, comma-separated.
fn list(v: &Value) -> String {
    v.as_array()
        .into_iter()
        .flatten()
        .map(scalar)
        .collect::<Vec<_>>()
        .join(",")
}

/// A token's namespaces; none listed means every one.
fn namespaces_of(v: &Value) -> String {
    match list(v) {
        all if all.is_empty() => "every namespace".to_string(),
        some => some,
    }
}

fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ");
        s.truncate(s.trim_end().len());
        s.push('\n');
        s
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// What a progress bar counts.
#[derive(Debug, Clone, Copy)]
pub enum ProgressUnit {
    /// Points, rows, messages: shown as a count and a rate.
    Count(&'static str),
    Bytes,
}

/// A progress bar on stderr for long work (`halite produce`, `halite
/// verify`, the bench's load phases), `total` long. indicatif draws it only
/// when stderr is a terminal, so logs and tests see nothing of it.
pub fn progress_bar(total: u64, what: &str, unit: ProgressUnit) -> indicatif::ProgressBar {
    let template = match unit {
        ProgressUnit::Count(name) => format!(
            "{{msg}} [{{wide_bar}}] {{human_pos}}/{{human_len}} {name} ({{per_sec}}, {{eta}} left)"
        ),
        ProgressUnit::Bytes => {
            "{msg} [{wide_bar}] {bytes}/{total_bytes} ({binary_bytes_per_sec}, {eta} left)"
                .to_string()
        }
    };
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}
