"""Python's `influxdb` client library (influxdb-python 5.3) against one
server: writes, queries and the helper calls a user of the library makes.
Prints one JSON document of everything the library handed back, so the
test (tests/influx_protocol.rs) can compare InfluxDB's and halite's.

Usage: influxdb_python.py HOST PORT
"""

import json
import sys

from influxdb import InfluxDBClient
from influxdb.exceptions import InfluxDBClientError, InfluxDBServerError

DB = "pyclient"
T0 = 1_700_000_000


def points():
    """Dict points as the library's users build them: tags, several field
    types, times as epoch seconds (written with time_precision='s')."""
    out = []
    for h in range(3):
        for i in range(120):
            out.append(
                {
                    "measurement": "sensor",
                    "tags": {"site": f"site-{h}", "kind": "temp" if h < 2 else "humidity"},
                    "time": T0 + i * 30,
                    "fields": {
                        "value": (i * 37 + h * 11) % 200 / 4.0 + 0.5,
                        "reading": (i * 13 + h) % 50,
                        "ok": i % 7 != 0,
                    },
                }
            )
    return out


def typed(value):
    """A value with the type the library decoded it as: a float must stay
    a float, a time a datetime."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [typed(v) for v in value]
    if hasattr(value, "isoformat"):
        return ["datetime", value.isoformat()]
    return [type(value).__name__, value]


def error_of(call):
    try:
        call()
    except (InfluxDBClientError, InfluxDBServerError) as e:
        return {"code": getattr(e, "code", None), "error": str(e)}
    return None


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    client = InfluxDBClient(host=host, port=port, database=DB, timeout=30)
    out = {}
    out["version_1x"] = client.ping().startswith("1.")
    client.create_database(DB)
    out["databases"] = sorted(
        d["name"] for d in client.get_list_database() if d["name"] != "default"
    )
    out["write_dicts"] = client.write_points(points(), time_precision="s", batch_size=100)
    out["write_lines"] = client.write_points(
        [
            f"sensor,site=site-9,kind=temp value=1.25,reading=3i,ok=true {(T0 + 60) * 10**9}",
            f"sensor,site=site-9,kind=temp value=2.5,reading=4i,ok=false {(T0 + 90) * 10**9}",
        ],
        protocol="line",
    )
    out["bad_write"] = error_of(
        # In the same shard as the points (InfluxDB 1.x checks field types
        # per shard; halite per measurement, docs/compatibility.md).
        lambda: client.write_points(
            [f"sensor,site=site-1 value=\"text\" {T0 * 10**9}"], protocol="line"
        )
    )
    out["measurements"] = client.get_list_measurements()
    out["series"] = client.get_list_series(DB)
    out["retention_policies"] = client.get_list_retention_policies(DB)
    queries = {
        "raw": "SELECT value, reading, ok FROM sensor WHERE site = 'site-1' LIMIT 5",
        "desc": "SELECT * FROM sensor WHERE kind = 'temp' ORDER BY time DESC LIMIT 4",
        "mean_by_site": "SELECT mean(value), max(reading) FROM sensor GROUP BY site",
        "windows": f"SELECT mean(value), count(reading) FROM sensor WHERE time >= {T0}s "
        f"AND time < {T0 + 1800}s GROUP BY time(5m), kind fill(none)",
        "regex": "SELECT last(value) FROM sensor WHERE site =~ /site-[01]/ GROUP BY *",
        # Buckets past the data filled: a float column with floats, an
        # integer column with integers (msgpack keeps the difference).
        "fill_zero": f"SELECT mean(value), count(reading), max(reading) FROM sensor "
        f"WHERE site = 'site-2' AND time >= {T0 + 3000}s AND time < {T0 + 4200}s "
        "GROUP BY time(5m) fill(0)",
        "tag_values": 'SHOW TAG VALUES FROM sensor WITH KEY = "site"',
        "field_keys": "SHOW FIELD KEYS",
    }
    results = {}
    for name, q in queries.items():
        for epoch in ("ms", None):
            rs = client.query(q, epoch=epoch)
            results[f"{name} epoch={epoch}"] = typed(
                {
                    "raw": rs.raw,
                    "points": [
                        {"key": list(k) if isinstance(k, tuple) else k, "points": list(v)}
                        for k, v in rs.items()
                    ],
                }
            )
    out["queries"] = results
    # Not chunked=True: this library asks for msgpack, and its chunked
    # reading fails on InfluxDB 1.6's msgpack answer ("unpack(b) received
    # extra data"); tests/influx_protocol.rs checks chunked answers over HTTP.
    out["unknown_function"] = error_of(lambda: client.query("SELECT nope(value) FROM sensor"))
    out["parse_error"] = error_of(lambda: client.query("SELEKT 1"))
    client.close()
    print(json.dumps(typed(out), sort_keys=True))


if __name__ == "__main__":
    main()
