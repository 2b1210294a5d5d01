//! Every saved fuzz input — the seeds of each target (`tests/fuzz/seeds`)
//! and the inputs that once made a target fail (`tests/fuzz/regressions`) —
//! through the same entry points the fuzz targets call (`halite::fuzz`),
//! plus every truncation and a spread of byte flips of each: none may
//! panic. `cargo fuzz` runs the targets themselves (`make fuzz`, and CI for
//! 60 s each).

use std::path::Path;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 8] = [
    ("line_protocol", halite::fuzz::line_protocol),
    ("json_points", halite::fuzz::json_points),
    ("key_codec", halite::fuzz::key_codec),
    ("wal_segment", halite::fuzz::wal_segment),
    ("store_file", halite::fuzz::store_file),
    ("scan_request", halite::fuzz::scan_request),
    ("influxql", halite::fuzz::influxql),
    ("remote_write", halite::fuzz::remote_write),
];

fn inputs(kind: &str, target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz")
        .join(kind)
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .flatten()
        .map(|e| {
            (
                e.path().display().to_string(),
                std::fs::read(e.path()).expect("read input"),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn every_saved_input_and_its_mutations_pass_every_target() {
    for (name, target) in TARGETS {
        let seeds = inputs("seeds", name);
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for (path, input) in seeds.iter().chain(inputs("regressions", name).iter()) {
            target(input);
            // Cut short anywhere, and a byte changed here and there.
            for cut in 0..input.len() {
                target(&input[..cut]);
            }
            let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ input.len() as u64;
            for _ in 0..input.len().min(400) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let mut m = input.clone();
                let at = (x as usize) % m.len().max(1);
                if let Some(b) = m.get_mut(at) {
                    *b ^= (x >> 32) as u8 | 1;
                }
                target(&m);
            }
            let _ = path;
        }
    }
}
