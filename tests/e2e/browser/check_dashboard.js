// Opens engine-perf's dashboard page in headless Chromium (Debian's chromium, driven over the
// DevTools protocol by puppeteer-core) and reports what a reader would see, as JSON on stdout:
// console errors, failed requests, every chart's size and series count, the verdict table's rows,
// the layer table's rows, the page's own render time and the browser's script time. Writes a
// screenshot. The caller (test_dashboard_browser.py, bench/history_bench.sh) judges the numbers.
//
//   node check_dashboard.js PAGE.html SCREENSHOT.png [--chromium /usr/bin/chromium]
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const puppeteer = require("puppeteer-core");

async function main() {
  const args = process.argv.slice(2);
  const page_path = path.resolve(args[0]);
  const shot = path.resolve(args[1]);
  const ci = args.indexOf("--chromium");
  const chromium = ci >= 0 ? args[ci + 1] : "/usr/bin/chromium";
  // A fresh profile every time: nothing carried over between runs, nothing written elsewhere.
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "kiln-chromium-"));
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--no-first-run", `--user-data-dir=${profile}`],
  });
  const out = { console_errors: [], page_errors: [], requests_outside: [] };
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1366, height: 900 });  // a laptop screen
    page.on("console", m => { if (m.type() === "error") out.console_errors.push(m.text()); });
    page.on("pageerror", e => out.page_errors.push(String(e)));
    page.on("request", r => { if (!r.url().startsWith("file://") && !r.url().startsWith("data:")) out.requests_outside.push(r.url()); });
    const client = await page.createCDPSession();
    await client.send("Performance.enable");
    // The page's inline scripts have run by the load event; no polling (it would add script time).
    await page.goto("file://" + page_path, { waitUntil: "load", timeout: 60000 });
    out.rendered = await page.evaluate(() => document.body.dataset.rendered === "1");
    const metrics = (await client.send("Performance.getMetrics")).metrics;
    const m = Object.fromEntries(metrics.map(x => [x.name, x.value]));
    out.script_duration_ms = 1000 * (m.ScriptDuration || 0);
    out.task_duration_ms = 1000 * (m.TaskDuration || 0);
    Object.assign(out, await page.evaluate(() => ({
      render_ms: window.kilnRenderMs,
      charts: (window.kilnCharts || []).map(c => {
        const r = c.plot.root.getBoundingClientRect();
        const canvas = c.plot.root.querySelector("canvas");
        return { series: c.series, kind: c.kind, width: r.width, height: r.height, series_count: c.plot.series.length,
                 canvas_width: canvas ? canvas.width : 0, canvas_height: canvas ? canvas.height : 0 };
      }),
      chart_cards: document.querySelectorAll("#charts .card").length,
      verdict_rows: [...document.querySelectorAll("#verdicts tbody tr")].map(tr => [...tr.cells].map(td => td.textContent)),
      layer_rows: document.querySelectorAll("#layer-table tbody tr").length,
      optype_rows: document.querySelectorAll("#optype-table tbody tr").length,
      run_rows: document.querySelectorAll("#runs tbody tr").length,
      runs_button: (document.getElementById("all-runs") || {}).textContent || "",
      new_machine_notes: document.querySelectorAll(".new-machine").length,
      change_point_notes: [...document.querySelectorAll(".cp-list")].map(e => e.textContent).filter(t => t.length > 0),
      title: document.title,
    })));
    await page.screenshot({ path: shot, fullPage: false });
    out.screenshot = shot;
  } finally {
    await browser.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}

main().catch(e => { process.stderr.write(String(e && e.stack || e) + "\n"); process.exit(1); });
