#!/usr/bin/python3
"""engine-perf and engine-build's history hooks, end to end on the small ControlTransformer.

  test_engine_perf.py --engine-build PATH --engine-perf PATH --gemm-bench PATH --workdir DIR

1. engine-build --record/--label: the report gains schema_version, run (time, kiln commit, config
   series, hashes, load), the machine fingerprint, raw samples, every layer of the profiled runs,
   paced streaming steps (latency from the scheduled release) and trace files; the run is stored.
2. A second run with --set fusions.attention=off, then `compare`: the JSON's keys, layers sorted by
   the size of the change, the unfused attention gathered under the fused node's name.
3. --fail-on: a report slowed down by 4x (imported) is `regressed` and exits 3; a run against
   itself is `same` and exits 0.
4. history / dashboard / import of Google benchmark JSON (gemm-bench).
5. ab ENGINE ENGINE: ABBA rounds, both sides recorded, a verdict that is never `regressed`... checked
   as a verdict of the four, with the samples a side that the rounds imply.
6. --enforce-budget: a budget no run meets fails the build with one line; the report is written.
7. Bad input: a non-SQLite file as the history, an unknown label, a report without schema_version:
   one-line errors, non-zero exits, nothing changed.
The last line is `N passed, N failed`.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perf_fixtures import Results, engine_build, export_small_model, SMALL_CONFIG  # noqa: E402


def run(cmd, timeout=900):
    print("  $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def one_line_error(p, tool):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    problems = []
    if p.returncode == 0:
        problems.append("exit 0")
    if not lines or not lines[0].startswith(tool + ": "):
        problems.append(f"stderr {p.stderr[:300]!r}")
    if len(lines) > 1 and tool == "engine-perf":
        problems.append(f"{len(lines)} lines on stderr")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--engine-perf", required=True)
    ap.add_argument("--gemm-bench", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    work = os.path.abspath(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    res = Results()
    perf = a.engine_perf
    db = os.path.join(work, "perf.db")
    model = export_small_model(work)

    # 1. A recorded run.
    e1 = os.path.join(work, "fused.engine")
    # The gate's pass path: a budget no run misses, however loaded the shared host (its fail path: 6).
    b1 = engine_build(a.engine_build, model, e1, "--record", db, "--label", "baseline", "--enforce-budget",
                      "--set", "benchmark.budget_ms=100000")
    problems = [] if b1.returncode == 0 else [f"exit {b1.returncode}: {b1.stderr[-1500:]}"]
    if b1.returncode == 0:
        if "history: run 1 recorded into" not in b1.stdout:
            problems.append("no 'history: run 1 recorded' line")
        r = json.load(open(e1 + ".report.json"))
        run_ = r.get("run", {})
        problems += [f"missing {k}" for k in ("schema_version", "run", "machine") if k not in r]
        if r.get("schema_version") != 1:
            problems.append(f"schema_version {r.get('schema_version')}")
        if len(run_.get("kiln", {}).get("commit", "")) not in (40, 7):
            problems.append(f"kiln commit {run_.get('kiln')}")
        if run_.get("config", {}).get("series") != "tests/e2e/configs/control_transformer_small.yaml":
            problems.append(f"series {run_.get('config')}")
        if len(run_.get("model_sha256", "")) != 64 or len(run_.get("engine_sha256", "")) != 64:
            problems.append("hashes")
        if len(run_.get("load_average", {}).get("before") or []) != 3:
            problems.append("load before")
        m = r["machine"]
        if len(m.get("fingerprint", "")) != 16 or not m.get("cpu_model") or m.get("cores", 0) < 1 or not m.get("isa"):
            problems.append(f"machine {m}")
        for name in ("full", "incremental"):
            p = r["profiles"][name]
            if len(p.get("samples_ms", [])) != 12:
                problems.append(f"{name}: {len(p.get('samples_ms', []))} samples")
            layers = p.get("all_layers", [])
            if len(layers) <= len(p.get("layers", [])) or any(len(l["ms"]) != p.get("layer_runs") for l in layers):
                problems.append(f"{name}: all_layers")
            if not os.path.exists(p.get("trace", "")):
                problems.append(f"{name}: no trace file")
            if not any(l["op_type"] == "kiln::Attention" and l["replaced"] for l in layers):
                problems.append(f"{name}: no fused attention with its replaced nodes")
        s = r["streaming"]
        steps = s.get("steps_detail", [])
        if len(steps) != 4 or s.get("latency_from") != "scheduled_release":
            problems.append(f"streaming steps {len(steps)} {s.get('latency_from')}")
        else:
            for i, (rel, start, end, missed) in enumerate(steps):
                if abs(rel - 100 * i) > 1e-3 or start < rel - 1e-3 or end < start:
                    problems.append(f"step {i}: {rel} {start} {end}")
            lat = sorted(e - r_ for r_, _, e, _ in steps)
            if abs(s["latency_ms"]["max"] - lat[-1]) > 1e-3 * max(1, lat[-1]):
                problems.append(f"latency max {s['latency_ms']['max']} vs steps {lat[-1]}")
    res.check("engine-build --record: report provenance, raw samples, every layer, paced steps", problems)

    # 2. Attention fusion off, recorded; compare.
    e2 = os.path.join(work, "unfused.engine")
    b2 = engine_build(a.engine_build, model, e2, "--set", "fusions.attention=off", "--record", db, "--label", "unfused")
    cj = os.path.join(work, "compare.json")
    c = run([perf, "compare", "--db", db, "baseline", "unfused", "--json", cj])
    problems = [] if b2.returncode == 0 and c.returncode == 0 else [f"exits {b2.returncode} {c.returncode}: {b2.stderr[-800:]} {c.stderr[-800:]}"]
    if not problems:
        j = json.load(open(cj))
        if j.get("verdict") not in ("regressed", "improved", "same", "inconclusive"):
            problems.append(f"verdict {j.get('verdict')}")
        for name in ("full", "incremental", "streaming"):
            p = j["profiles"].get(name)
            if p is None:
                problems.append(f"no profile {name}")
                continue
            for k in ("verdict", "p50_change", "p50_change_ci", "p_value", "layers"):
                if k not in p:
                    problems.append(f"{name}: no {k}")
            for k in ("p50_ms", "p99_ms", "miss_rate"):
                if not ("a" in p[k] and "b" in p[k]):
                    problems.append(f"{name}.{k}")
            if name == "streaming":
                continue
            deltas = [abs(l["delta_ms"]) for l in p["layers"]]
            if deltas != sorted(deltas, reverse=True) or not deltas:
                problems.append(f"{name}: layers not sorted by |delta|")
            if any(set(l) < {"name", "op_type", "a_ms", "b_ms", "delta_ms"} for l in p["layers"]):
                problems.append(f"{name}: layer keys")
            grouped = [l for l in p["layers"] if "kiln::Attention" in l["op_type"] and l["members"]]
            if not grouped:
                problems.append(f"{name}: the unfused attention is not gathered under the fused node")
        if "verdict:" not in c.stdout or "layers that moved most" not in c.stdout:
            problems.append("text output")
    res.check("compare baseline vs attention fusion off: JSON keys, layer attribution across the fusion", problems)

    # 3. The gate.
    problems = []
    slow = os.path.join(work, "slow.report.json")
    if os.path.exists(e1 + ".report.json"):
        r = json.load(open(e1 + ".report.json"))
        # 4x, not a subtler step: on a loaded 2-core machine one profile's samples spread over 5x
        # (0.73-3.95 ms seen), and a 1.5x shift of a dozen such samples is honestly inconclusive.
        for p in r["profiles"].values():
            p["samples_ms"] = [x * 4.0 for x in p["samples_ms"]]
        json.dump(r, open(slow, "w"))
        i = run([perf, "import", "--db", db, "--label", "slow", slow])
        g = run([perf, "compare", "--db", db, "baseline", "slow", "--fail-on", "regressed"])
        s = run([perf, "compare", "--db", db, "baseline", "baseline", "--fail-on", "regressed", "--metric", "p99"])
        s_json = os.path.join(work, "self.json")
        s2 = run([perf, "compare", "--db", db, "baseline", "baseline", "--json", s_json])
        if i.returncode != 0:
            problems.append(f"import: {i.stderr}")
        if g.returncode != 3 or "verdict: regressed" not in g.stdout:
            problems.append(f"slowed run: exit {g.returncode}, {g.stdout[-300:]}")
        # A run against itself: never regressed; with a dozen samples the interval of the change
        # is wider than +-3 %, so `inconclusive` is the honest answer, `same` where it is narrow.
        if s.returncode != 0 or not ("verdict: same" in s.stdout or "verdict: inconclusive" in s.stdout):
            problems.append(f"run against itself: exit {s.returncode}, {s.stdout[-300:]}")
        if s2.returncode == 0:
            for name, p in json.load(open(s_json))["profiles"].items():
                if p["p50_change"] != 0 or p["p_value"] < 0.99 or p["p50_change_ci"][0] > 0 or p["p50_change_ci"][1] < 0:
                    problems.append(f"{name} against itself: change {p['p50_change']} {p['p50_change_ci']} p {p['p_value']}")
    else:
        problems.append("no report from step 1")
    res.check("compare --fail-on regressed: exit 3 on a 4x slower import, 0 on the same run (zero change, p = 1)", problems)

    # 4. history, dashboard, Google benchmark import.
    hj = os.path.join(work, "history.json")
    h = run([perf, "history", "--db", db, "--json", hj])
    html = os.path.join(work, "page.html")
    d = run([perf, "dashboard", "--db", db, "-o", html, "--baseline", "baseline"])
    gb = os.path.join(work, "gemm.json")
    bench = run([a.gemm_bench, "--benchmark_filter=^onednn/M:274/K:384/N:384/cold:0", "--benchmark_repetitions=3",
                 "--benchmark_min_time=0.01", f"--benchmark_out={gb}", "--benchmark_out_format=json"])
    gi = run([perf, "import", "--db", db, "--label", "kernels", gb])
    problems = []
    for name, p in (("history", h), ("dashboard", d), ("gemm-bench", bench), ("import gbench", gi)):
        if p.returncode != 0:
            problems.append(f"{name}: exit {p.returncode} {p.stderr[-500:]}")
    if not problems:
        series = json.load(open(hj))
        if not any(s["config"] == "tests/e2e/configs/control_transformer_small.yaml" and s["profile"] == "full" and len(s["runs"]) >= 3
                   for s in series):
            problems.append("history: no full-profile series of 3 runs")
        page = open(html).read()
        if "{{" in page or "uPlot" not in page or "<script src" in page or "http://" in page.split("kiln-data")[0]:
            problems.append("page not self-contained")
        run([perf, "history", "--db", db, "--json", hj])
        series = json.load(open(hj))
        if not any(s["config"] == "bench:gemm-bench" for s in series):
            problems.append("no bench:gemm-bench series after the import")
        kernels = [s for s in series if s["config"] == "bench:gemm-bench"]
        if kernels and len(kernels[0]["runs"]) != 1:
            problems.append("gbench runs")
    res.check("history, dashboard (self-contained), Google benchmark JSON import", problems)

    # 5. A/A.
    aj = os.path.join(work, "ab.json")
    ab = run([perf, "ab", e1, e1, "--profile", "incremental", "--rounds", "2", "--max-rounds", "4", "--iterations", "4",
              "--config", SMALL_CONFIG, "--db", db, "--json", aj])
    problems = [] if ab.returncode == 0 else [f"exit {ab.returncode}: {ab.stderr[-800:]}"]
    if not problems and not os.path.exists(aj):
        problems.append("no --json file")
    if not problems:
        j = json.load(open(aj))
        v = j["verdict"]
        n = j["profiles"]["incremental"]["n"]
        if v not in ("same", "inconclusive", "improved", "regressed"):
            problems.append(f"verdict {v}")
        if n["a"] != n["b"] or n["a"] not in (8, 16):  # 2 rounds of 4, or 4 rounds after an inconclusive first verdict
            problems.append(f"samples a side {n}")
        # More rounds follow exactly an inconclusive first verdict; after them any verdict stands (on a
        # busy CI machine even an A/A run may be called changed, about alpha of the time).
        extra = "inconclusive: 2 more rounds" in ab.stderr
        if n["a"] == 8 and v == "inconclusive":
            problems.append("inconclusive after the first 2 rounds but no more rounds ran")
        if (n["a"] == 16) != extra:
            problems.append(f"{n['a']} samples a side, progress {'with' if extra else 'without'} 'more rounds'")
        if "split over 2 planned looks" not in " ".join(j.get("notes", [])):
            problems.append(f"no alpha split note: {j.get('notes')}")
        if "ABBA rounds after" not in ab.stderr and "ABBA rounds" not in ab.stderr:
            problems.append("no progress lines")
        if not j["profiles"]["incremental"]["layers"]:
            problems.append("no layer attribution")
    res.check("ab ENGINE ENGINE: ABBA rounds, extra rounds only when inconclusive, recorded", problems)

    # 6. The budget gate.
    e3 = os.path.join(work, "gate.engine")
    g = engine_build(a.engine_build, model, e3, "--set", "benchmark.budget_ms=0.001", "--enforce-budget", iterations=3)
    problems = []
    last = g.stderr.strip().splitlines()[-1] if g.stderr.strip() else ""
    if g.returncode == 0 or not last.startswith("engine-build: ") or "over the 0.001 ms budget" not in last:
        problems.append(f"exit {g.returncode}, last stderr line {last!r}")
    if not os.path.exists(e3 + ".report.json"):
        problems.append("no report written")
    g2 = engine_build(a.engine_build, model, e3, "--set", "benchmark.budget_ms=0.001", iterations=3)
    if g2.returncode != 0:
        problems.append(f"without the gate: exit {g2.returncode}")
    res.check("--enforce-budget fails the build when p99 misses the budget; without it the miss is only printed", problems)

    # 7. Bad input.
    problems = []
    notes = os.path.join(work, "notes.txt")
    open(notes, "w").write("not a database\n")
    before = sha(notes)
    p = run([perf, "compare", "--db", notes, "1", "2"])
    problems += ["non-SQLite: " + x for x in one_line_error(p, "engine-perf")]
    if sha(notes) != before:
        problems.append("the non-SQLite file changed")
    p = run([perf, "compare", "--db", db, "baseline", "no-such-label"])
    problems += ["unknown label: " + x for x in one_line_error(p, "engine-perf")]
    if "no-such-label" not in p.stderr:
        problems.append("unknown label not named")
    old = os.path.join(work, "old.report.json")
    r = json.load(open(e1 + ".report.json")) if os.path.exists(e1 + ".report.json") else {}
    r.pop("schema_version", None)
    json.dump(r, open(old, "w"))
    db_before = sha(db)
    p = run([perf, "import", "--db", db, old])
    problems += ["old report: " + x for x in one_line_error(p, "engine-perf")]
    if sha(db) != db_before:
        problems.append("the history changed on a refused import")
    p = run([perf, "dashboard", "--db", os.path.join(work, "missing.db"), "-o", os.path.join(work, "x.html")])
    problems += ["missing db: " + x for x in one_line_error(p, "engine-perf")]
    if os.path.exists(os.path.join(work, "missing.db")) or os.path.exists(os.path.join(work, "x.html")):
        problems.append("a failed dashboard left files")
    res.check("bad input: one-line errors, nothing changed", problems)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
