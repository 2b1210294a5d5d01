#!/usr/bin/env bash
# Instructions per request of `halite serve`, counted by callgrind: unlike
# wall-clock figures on this noisy VM, these repeat within a few percent, so
# they tell whether a change made a path cheaper.
#
#   HALITE_BENCH_DIR=/tmp/qdata make bench-query      # once: a loaded store
#   bench/callgrind.sh /tmp/qdata query.json 20       # POST /api/v1/query
#   bench/callgrind.sh /tmp/qdata body.txt 8 write    # POST line protocol
#
# Runs the server under callgrind twice (n/2 and n requests) and prints the
# difference per request, so start-up and shutdown cancel out. Writes go to a
# copy of the data directory. HALITE_CG_SET adds server flags (say
# `--set region.flush_on_close=false`, so a store whose data is still in its
# WAL is not flushed by the first run). Threads that spin while they wait
# make counts for queries fanned out over many buckets vary; compare those
# over several runs. HALITE_BIN names another build (say a copy of the
# binary before a change, to count both in one sitting). Needs valgrind and
# python3.
set -euo pipefail
data=$1 body=$2 n=$3 kind=${4:-query}
bin=${HALITE_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/halite}
config=$(cd "$(dirname "$0")/.." && pwd)/configs/halite.toml
port=18171
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 2; }

run() {
  local count=$1 dir=$data out
  if [ "$kind" = write ]; then
    dir=$(mktemp -d); cp -r "$data"/. "$dir"/
  fi
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve --config "$config" \
    --set "data_dir=\"$dir\"" --set "server.listen=\"127.0.0.1:$port\"" ${HALITE_CG_SET:-} >/dev/null 2>&1 &
  local vp=$!
  for _ in $(seq 1 200); do
    curl -sf "localhost:$port/readyz" >/dev/null 2>&1 && break
    sleep 0.25
  done
  python3 - "$body" "$count" "$kind" "$port" <<'PY'
import http.client, sys
body, count, kind, port = open(sys.argv[1], "rb").read(), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
path = "/api/v1/query" if kind == "query" else "/api/v1/write?table=metrics:cpu&precision=ms"
for _ in range(count):
    c.request("POST", path, body, {"Content-Type": "application/json" if kind == "query" else "text/plain"})
    r = c.getresponse(); r.read()
    assert r.status in (200, 204), r.status
PY
  kill -TERM "$vp"; wait "$vp" || true
  grep -E '^(summary|totals):' "$out" | head -1 | awk '{print $2}'
  rm -f "$out"
  if [ "$kind" = write ]; then rm -rf "$dir"; fi
}

half=$((n / 2))
a=$(run "$half")
b=$(run "$n")
echo "instructions per request: $(( (b - a) / (n - half) ))"
