//! SVG charts of `make bench-scale`'s results (`bench/scale.json`), drawn
//! with plotters: the ingest rate over the run per system, the query
//! types' p50 and p99 per system, and bytes per value on disk. Linked from
//! `bench/RESULTS.md`.

use std::path::Path;

use plotters::prelude::*;
use serde_json::Value as Json;

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// One colour per system, in the order the bench runs them.
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
];

fn systems(results: &Json) -> Vec<&Json> {
    results["systems"]
        .as_array()
        .map(|s| s.iter().collect())
        .unwrap_or_default()
}

fn name(system: &Json) -> String {
    system["name"].as_str().unwrap_or("?").to_string()
}

fn numbers(v: &Json) -> Vec<f64> {
    v.as_array()
        .map(|a| a.iter().filter_map(Json::as_f64).collect())
        .unwrap_or_default()
}

/// Draws the three charts into `dir` as `scale-ingest.svg`,
/// `scale-queries.svg` and `scale-bytes.svg`.
pub fn draw_all(results: &Json, dir: &Path) -> Drawn {
    ingest(results, &dir.join("scale-ingest.svg"))?;
    queries(results, &dir.join("scale-queries.svg"))?;
    bytes(results, &dir.join("scale-bytes.svg"))?;
    Ok(())
}

/// Rows/s in each tenth of the ingest, a line per system.
fn ingest(results: &Json, path: &Path) -> Drawn {
    let systems = systems(results);
    let top = systems
        .iter()
        .flat_map(|s| numbers(&s["tenths"]))
        .fold(1.0, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (820, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Ingest, TSBS devops {} hosts, {} rows: rows/s per tenth of the run",
                results["hosts"], results["rows"]
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.5f64..10.5f64, 0f64..top)?;
    chart
        .configure_mesh()
        .x_labels(10)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .x_desc("tenth of the run")
        .y_desc("rows/s")
        .y_label_formatter(&|y| format!("{:.0}k", y / 1000.0))
        .draw()?;
    for (i, s) in systems.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<(f64, f64)> = numbers(&s["tenths"])
            .into_iter()
            .enumerate()
            .map(|(j, v)| ((j + 1) as f64, v))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(3)))?
            .label(name(s))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
            });
        chart.draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, colour.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Each query type's p50 as a bar and p99 as a tick, per system, on a log
/// scale of milliseconds.
fn queries(results: &Json, path: &Path) -> Drawn {
    let systems: Vec<&Json> = systems(results)
        .into_iter()
        .filter(|s| s["queries"].as_array().is_some_and(|q| !q.is_empty()))
        .collect();
    let Some(first) = systems.first() else {
        return Ok(());
    };
    let types: Vec<String> = first["queries"]
        .as_array()
        .map(|q| {
            q.iter()
                .map(|q| q["name"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default();
    let all: Vec<f64> = systems
        .iter()
        .flat_map(|s| s["queries"].as_array().into_iter().flatten())
        .flat_map(|q| [q["p50_ms"].as_f64(), q["p99_ms"].as_f64()])
        .flatten()
        .filter(|v| *v > 0.0)
        .collect();
    let low = all.iter().copied().fold(f64::MAX, f64::min).max(0.01) / 2.0;
    let high = all.iter().copied().fold(0.0, f64::max).max(1.0) * 2.0;
    let n = types.len();
    let height = 60 + 34 * n as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "TSBS's 15 query types: p50 (bar) and p99 (tick), ms, log scale",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(190)
        .build_cartesian_2d((low..high).log_scale(), -0.5f64..(n as f64 - 0.5))?;
    let label_of = |y: &f64| {
        let i = (n as f64 - 1.0 - y.round()) as usize;
        types.get(i).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .y_labels(n)
        .y_label_formatter(&label_of)
        .x_desc("milliseconds")
        .disable_y_mesh()
        .draw()?;
    let band = 0.8 / systems.len() as f64;
    for (si, s) in systems.iter().enumerate() {
        let colour = COLOURS[si % COLOURS.len()];
        let mut bars = Vec::new();
        let mut ticks = Vec::new();
        for (ti, q) in s["queries"].as_array().into_iter().flatten().enumerate() {
            // Top to bottom in the report's order.
            let centre = (n - 1 - ti) as f64;
            let y0 = centre - 0.4 + band * si as f64;
            let y1 = y0 + band * 0.9;
            if let Some(p50) = q["p50_ms"].as_f64() {
                bars.push(Rectangle::new(
                    [(low, y0), (p50.max(low), y1)],
                    colour.mix(0.8).filled(),
                ));
            }
            if let Some(p99) = q["p99_ms"].as_f64() {
                ticks.push(PathElement::new(
                    vec![(p99.max(low), y0), (p99.max(low), y1)],
                    BLACK.stroke_width(2),
                ));
            }
        }
        chart
            .draw_series(bars)?
            .label(name(s))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 16, y + 5)], colour.filled()));
        chart.draw_series(ticks)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Bytes per value of each system's whole data directory, and the WAL's
/// share of it.
fn bytes(results: &Json, path: &Path) -> Drawn {
    let systems = systems(results);
    let n = systems.len();
    let top = systems
        .iter()
        .filter_map(|s| s["bytes_per_value"].as_f64())
        .fold(0.1, f64::max)
        * 1.25;
    let root = SVGBackend::new(path, (820, 120 + 50 * n as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Bytes per value on disk, whole data directory (the WAL's part in grey)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(150)
        .build_cartesian_2d(0f64..top, -0.5f64..(n as f64 - 0.5))?;
    let names: Vec<String> = systems.iter().map(|s| name(s)).collect();
    let label_of = |y: &f64| {
        let i = (n as f64 - 1.0 - y.round()) as usize;
        names.get(i).cloned().unwrap_or_default()
    };
    chart
        .configure_mesh()
        .y_labels(n)
        .y_label_formatter(&label_of)
        .x_desc("bytes per value")
        .disable_y_mesh()
        .draw()?;
    let rows = results["rows"].as_f64().unwrap_or(1.0).max(1.0);
    for (i, s) in systems.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let centre = (n - 1 - i) as f64;
        let total = s["bytes_per_value"].as_f64().unwrap_or(0.0);
        let wal = s["wal_bytes"].as_f64().unwrap_or(0.0) / (rows * 10.0);
        chart.draw_series([
            Rectangle::new(
                [(0.0, centre - 0.3), (total, centre + 0.3)],
                colour.filled(),
            ),
            Rectangle::new(
                [
                    (total - wal.min(total), centre - 0.3),
                    (total, centre + 0.3),
                ],
                BLACK.mix(0.45).filled(),
            ),
        ])?;
        chart.draw_series([Text::new(
            format!("{total:.2}"),
            (total + top * 0.01, centre + 0.1),
            ("sans-serif", 15),
        )])?;
    }
    root.present()?;
    Ok(())
}
