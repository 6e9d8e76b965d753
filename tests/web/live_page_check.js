#!/usr/bin/env node
// Loads a daemon's live page in headless Chromium (puppeteer-core), lets it
// poll for `seconds`, and prints what it saw as one JSON object: the
// verdict shown (with the time of its sample) and the shard cache's line
// (null when hidden), the verdicts and shard cache lines of every
// /api/timeline reply the page got, each chart's points, every request the
// page made and those that left the page's own host:port (aborted). Saves
// a screenshot.
//
// Usage: live_page_check.js URL SCREENSHOT.png CHROMIUM [SECONDS]
// NODE_PATH must hold the build's node_modules (server/web/package-lock.json).
"use strict";
const puppeteer = require("puppeteer-core");

async function main() {
  const [url, screenshot, chromium, secondsArg] = process.argv.slice(2);
  const seconds = Number(secondsArg || 4);
  const origin = new URL(url).origin;
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // No user namespaces in a container: no sandbox. The rest keeps the
    // browser itself quiet on the network.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--disable-background-networking",
           "--disable-component-update", "--disable-sync",
           "--disable-default-apps", "--metrics-recording-only"],
  });
  const seen = {requests: [], offsite: [], failed: [], errors: []};
  const replies = [];  // {t, kind, line} of each /api/timeline reply
  try {
    const page = await browser.newPage();
    await page.setViewport({width: 1280, height: 1000});
    await page.setRequestInterception(true);
    page.on("request", request => {
      const target = request.url();
      seen.requests.push(target);
      if (target.startsWith(origin + "/")) {
        request.continue();
      } else {
        seen.offsite.push(target);
        request.abort();
      }
    });
    page.on("requestfailed", r => seen.failed.push(r.url()));
    page.on("pageerror", e => seen.errors.push(String(e)));
    page.on("response", async response => {
      if (new URL(response.url()).pathname !== "/api/timeline") return;
      try {
        const timeline = await response.json();
        if (timeline.verdict) {
          replies.push(Object.assign({shard_cache: timeline.shard_cache},
                                     timeline.verdict));
        }
      } catch (e) { /* the page went away */ }
    });
    await page.goto(url, {waitUntil: "load"});
    await new Promise(resolve => setTimeout(resolve, seconds * 1000));
    const shown = await page.evaluate(() => {
      const verdict = document.getElementById("verdict");
      const charts = {};
      for (const [id, u] of Object.entries(window.batchdCharts)) {
        charts[id] = {
          series: u.series.slice(1).map(s => s.label),
          points: u.data.slice(1).map(c => c.filter(v => v != null).length),
          times: u.data[0].length,
          canvas: !!u.root.querySelector("canvas"),
        };
      }
      const cache = document.getElementById("shard-cache");
      return {verdict: verdict.textContent, kind: verdict.dataset.kind,
              verdict_t: verdict.dataset.t, charts,
              shard_cache: cache.hidden ? null : cache.textContent,
              polls: window.batchdPolls,
              notice: document.getElementById("notice").textContent};
    });
    await page.screenshot({path: screenshot, fullPage: true});
    console.log(JSON.stringify(Object.assign(shown, seen,
                                             {replies})));
  } finally {
    await browser.close();
  }
}

main().catch(e => { console.error(e); process.exit(1); });
