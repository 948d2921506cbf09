#!/usr/bin/python3
"""The dashboard page in a real browser: a history built from fixtures (12 runs of a fixture config
with a step planted at run 7, and 3 runs of it on another machine) and from a real engine-build run
of the small ControlTransformer, written by `engine-perf dashboard` and opened from file:// in
headless Chromium (Debian's chromium, through puppeteer-core; tests/e2e/browser/).

  test_dashboard_browser.py --engine-build PATH --engine-perf PATH --workdir DIR

Checks: no console errors, no uncaught exceptions, no request leaves file://; every chart drawn with
a non-zero size and its series (latency: x, p50 and its band, p99 and its band, budget = 8; miss
rate: x, rate and its band = 4); one verdict row per series; the planted change point on the page;
the other machine shown as a separate series; the layer tables filled; a screenshot under the
workdir. The last line is `N passed, N failed`.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perf_fixtures import REPO, Results, engine_build, export_small_model, synthetic_report  # noqa: E402

BROWSER_DIR = os.path.join(REPO, "tests", "e2e", "browser")


def run(cmd, timeout=900):
    print("  $ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine-build", required=True)
    ap.add_argument("--engine-perf", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args()
    work = os.path.abspath(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    res = Results()
    db = os.path.join(work, "perf.db")

    # Fixtures: a step of +8 % at run 7 of 12 on machine 1; 3 runs on machine 2.
    files = []
    for i in range(12):
        p50 = {"full": 190.0 * (1.08 if i >= 7 else 1.0), "incremental": 41.0}
        files.append(synthetic_report(os.path.join(work, f"fixture{i:02d}.json"), index=i, p50s=p50,
                                      label="baseline" if i == 2 else "", seed=1))
    for i in range(3):
        files.append(synthetic_report(os.path.join(work, f"other{i}.json"), index=20 + i, p50s={"full": 150.0, "incremental": 30.0},
                                      machine="fixture-machine-2", seed=2))
    imp = run([a.engine_perf, "import", "--db", db, *files])
    res.check("import the fixture reports", [] if imp.returncode == 0 else [imp.stderr[-800:]])

    model = export_small_model(work)
    b = engine_build(a.engine_build, model, os.path.join(work, "ct.engine"), "--record", db, "--label", "small-model")
    res.check("a real engine-build run recorded", [] if b.returncode == 0 else [b.stderr[-1500:]])
    b2 = engine_build(a.engine_build, model, os.path.join(work, "ct2.engine"), "--record", db)
    res.check("a second real engine-build run recorded", [] if b2.returncode == 0 else [b2.stderr[-1500:]])

    html = os.path.join(work, "kiln-perf.html")
    d = run([a.engine_perf, "dashboard", "--db", db, "-o", html, "--baseline", "baseline"])
    res.check("engine-perf dashboard", [] if d.returncode == 0 and os.path.getsize(html) > 0 else [d.stderr[-800:]])

    shot = os.path.join(work, "dashboard.png")
    c = run(["node", os.path.join(BROWSER_DIR, "check_dashboard.js"), html, shot, "--chromium", a.chromium], timeout=300)
    if c.returncode != 0:
        res.check("the page in headless Chromium", [f"exit {c.returncode}: {c.stderr[-1500:]}"])
        return res.finish()
    out = json.loads(c.stdout.strip().splitlines()[-1])
    print(json.dumps({k: v for k, v in out.items() if k not in ("charts", "verdict_rows")}, indent=1))
    res.check("no console errors, no exceptions, no network, the page's script ran to its end", [
        "" if out.get("rendered") else "the page's script did not finish",
        f"console: {out['console_errors']}" if out["console_errors"] else "",
        f"exceptions: {out['page_errors']}" if out["page_errors"] else "",
        f"requests: {out['requests_outside']}" if out["requests_outside"] else ""])

    # Series: fixture config x 2 profiles x 2 machines, small model x (full, incremental, streaming).
    expected_series = 4 + 3
    charts = out["charts"]
    problems = []
    if out["chart_cards"] != expected_series:
        problems.append(f"{out['chart_cards']} chart cards, expected {expected_series}")
    if len(charts) != 2 * expected_series:
        problems.append(f"{len(charts)} charts, expected {2 * expected_series}")
    for ch in charts:
        want = 8 if ch["kind"] == "latency" else 4
        if ch["series_count"] != want:
            problems.append(f"chart {ch['series']} {ch['kind']}: {ch['series_count']} series, expected {want}")
        if not (ch["width"] > 100 and ch["height"] > 100 and ch["canvas_width"] > 100 and ch["canvas_height"] > 50):
            problems.append(f"chart {ch['series']} {ch['kind']}: size {ch['width']}x{ch['height']} canvas {ch['canvas_width']}x{ch['canvas_height']}")
    res.check("every chart drawn with a non-zero size and its series", problems)

    rows = out["verdict_rows"]
    problems = []
    if len(rows) != expected_series:
        problems.append(f"{len(rows)} verdict rows, expected {expected_series}")
    full = [r for r in rows if r[0] == "configs/fixture.yaml" and r[1] == "full" and " vs " in r[6] and "baseline" in r[6]]
    if len(full) != 1:
        problems.append(f"no fixture full row against the baseline: {rows}")
    elif not full[0][6].startswith("regressed"):
        problems.append(f"latest fixture full run vs the baseline (8 % slower): {full[0][6]}")
    res.check("the verdict table: a row per series, the planted regression against the baseline", problems)

    problems = []
    if not any("→" in t and "change point" in t for t in out["change_point_notes"]):
        problems.append(f"no change point shown: {out['change_point_notes']}")
    if out["new_machine_notes"] < 2:
        problems.append(f"{out['new_machine_notes']} new-machine notes, expected 2 (full and incremental on machine 2)")
    if out["layer_rows"] < 2 or out["optype_rows"] < 2:
        problems.append(f"layer tables: {out['layer_rows']} / {out['optype_rows']} rows")
    if out["run_rows"] != len(files) + 2:
        problems.append(f"{out['run_rows']} rows in the runs table, expected {len(files) + 2}")
    if not os.path.exists(shot) or os.path.getsize(shot) < 10000:
        problems.append("no screenshot")
    res.check("change point, separate machine series, layer tables, runs table, screenshot", problems)
    data = json.loads(open(html).read().split('id="kiln-data">', 1)[1].split("</script>", 1)[0].replace("<\\/", "</"))
    fixture_full = [s for s in data["series"] if s["key"] == "configs/fixture.yaml" and s["profile"] == "full" and len(s["runs"]) == 12]
    problems = []
    if len(fixture_full) != 1:
        problems.append("no 12-run fixture full series")
    else:
        idx = [cp["index"] for cp in fixture_full[0]["change_points"]]
        if not any(abs(i - 7) <= 1 for i in idx):
            problems.append(f"change points at {idx}, planted at 7")
    res.check("the planted change point is found within one run", problems)
    return res.finish()


if __name__ == "__main__":
    sys.exit(main())
