#!/usr/bin/env bash
# The 1,000-run history benchmark: build/history-bench writes a history of 1,000 runs x 2 profiles x
# 50 samples (and 120 layers x 3 profiled runs a profile) and the dashboard page over it; the page is
# then opened in headless Chromium (tests/e2e/browser/check_dashboard.js) for its script time.
# Figures go to stdout; the issue's bounds are under 1 s of script time and under 50 MB on disk.
#
#   bench/history_bench.sh [RUNS]          (after ./scripts/build.sh; RUNS defaults to 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-1000}
OUT=build/history_bench
./build/history-bench --runs "$RUNS" --out "$OUT"
node tests/e2e/browser/check_dashboard.js "$OUT/history.html" "$OUT/history.png" > "$OUT/browser.json"
/usr/bin/python3 - "$OUT/browser.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
print(f"  in headless Chromium: script {o['script_duration_ms']:.0f} ms (all tasks {o['task_duration_ms']:.0f} ms), "
      f"the page's own render {o['render_ms']:.0f} ms; {len(o['charts'])} charts, {o['run_rows']} runs in the table ({o['runs_button'] or 'all'}); "
      f"console errors: {len(o['console_errors'])}")
PY
echo "  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
