#!/usr/bin/python3
"""The live page in a real browser: a daemon under load, its metrics page
in headless Chromium (tests/web/live_page_check.js), and what the page shows
checked against the daemon's own figures.

Usage: live_page_test.py --build BUILD --node-modules DIR --chromium PATH
           [--seconds 5] [--load-seconds 6] [--screenshot OUT.png]

Checks, exiting 1 with the reason on the first that fails:
- every chart exists, has a canvas and has data points; the throughput,
  stage and buffer charts have them for the job under load;
- the verdict line on the page is the one in the /api/timeline reply it
  was drawn from, and says what `batchd top --once` (GetStatus) says: the same
  kind of verdict for the same job; the shard cache line is that reply's
  too (hidden: this daemon reads local files);
- every request the page made went to the daemon's own host:port, after
  the first /api/timeline request with since= (only the newer points),
  and no script on the page failed.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

from batchd_testing.daemon import Daemon, daemon_binary

JOB = "page-job"
CHARTS = ["throughput", "trainers", "workers", "stages", "buffers",
          "substitutions"]


def fail(message, detail=""):
    print(f"FAIL: {message}", file=sys.stderr)
    if detail:
        print(detail, file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--node-modules", required=True)
    parser.add_argument("--chromium", required=True)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--load-seconds", type=float, default=6)
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    build = pathlib.Path(args.build)
    if not os.path.exists(args.chromium):
        fail(f"no browser at {args.chromium}: install Debian's chromium "
             "(make setup does)")
    screenshot = args.screenshot or str(build / "tests" / "web" /
                                        "live-page.png")
    check = pathlib.Path(__file__).with_name("live_page_check.js")
    with tempfile.TemporaryDirectory(prefix="batchd-live-page-") as tmp:
        data = os.path.join(tmp, "data")
        subprocess.run([str(build / "tools" / "make_dataset"), "--out", data,
                        "--images", "256", "--classes", "4"], check=True,
                       stdout=subprocess.DEVNULL)
        with Daemon(daemon_binary(build), {"photos": data},
                    ["--workers", "1"], directory=os.path.join(tmp, "d"),
                    metrics=True) as daemon:
            # A trainer that computes 150 ms per batch of 16 small images:
            # the daemon keeps up, so the verdict settles on compute-bound.
            load = subprocess.Popen(
                [str(build / "client" / "batchd-client"), "--endpoint",
                 daemon.endpoint, "--dataset", "photos", "--job", JOB,
                 "--epochs", "1000", "--batch_size", "16", "--size", "64",
                 "--step_ms", "150"],
                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            try:
                time.sleep(args.load_seconds)
                url = f"http://127.0.0.1:{daemon.metrics_port}/"
                env = dict(os.environ, NODE_PATH=args.node_modules)
                run = subprocess.run(
                    ["node", str(check), url, screenshot, args.chromium,
                     str(args.seconds)],
                    capture_output=True, text=True, env=env, timeout=60)
                if run.returncode != 0:
                    fail("the browser check did not run", run.stderr)
                top = subprocess.run(
                    [str(build / "client" / "batchd-top"), "--once",
                     "--endpoint", daemon.endpoint, "--width", "200"],
                    capture_output=True, text=True, timeout=20)
            finally:
                load.terminate()
                load.wait(timeout=20)
    seen = json.loads(run.stdout)
    print(f"page: {seen['polls']} polls, verdict {seen['verdict']!r}")

    for chart in CHARTS:
        info = seen["charts"].get(chart)
        if info is None or not info["canvas"]:
            fail(f"chart {chart} is missing", json.dumps(seen["charts"]))
        if info["times"] < 3 or max(info["points"], default=0) == 0:
            fail(f"chart {chart} has no data points", json.dumps(info))
    points = {c: dict(zip(seen["charts"][c]["series"],
                          seen["charts"][c]["points"])) for c in CHARTS}
    for chart, series in [("throughput", f"{JOB} images/s"),
                          ("trainers", f"{JOB} wait %"),
                          ("stages", "decode"), ("buffers", "reserved"),
                          ("workers", "busy %")]:
        if points[chart].get(series, 0) == 0:
            fail(f"chart {chart} has no points for {series!r}",
                 json.dumps(points[chart]))

    # The verdict shown is the one of the reply with its sample's time.
    drawn = [r for r in seen["replies"]
             if f"{r['t']:.3f}" == seen["verdict_t"]]
    if not drawn:
        fail("the page's verdict is from no /api/timeline reply",
             json.dumps({"shown": seen["verdict_t"],
                         "replies": seen["replies"]}))
    if seen["verdict"] != drawn[-1]["line"] or seen["kind"] != drawn[-1]["kind"]:
        fail("the page's verdict is not the timeline's",
             f"page: {seen['verdict']}\njson: {drawn[-1]['line']}")
    # The shard cache's line is the same reply's: hidden without one (this
    # daemon reads local files).
    expected = drawn[-1].get("shard_cache")
    if seen["shard_cache"] != (expected["line"] if expected else None):
        fail("the page's shard cache line is not the timeline's",
             f"page: {seen['shard_cache']}\njson: {expected}")
    # batchd top renders GetStatus with the same verdict function (its
    # arrow in ASCII); the figures move between samples, the verdict and
    # its job do not under this steady load.
    top_lines = [line.strip() for line in top.stdout.splitlines()]
    top_verdict = next((line for line in top_lines if re.match(
        r"(idle|unknown|compute-bound|input-bound|network-bound|draining):",
        line)), None)
    if top_verdict is None:
        fail("batchd top printed no verdict", top.stdout + top.stderr)
    print(f"top:  verdict {top_verdict!r}")
    if top_verdict.split(":")[0] != seen["kind"]:
        fail("batchd top and the page disagree",
             f"top: {top_verdict}\npage: {seen['verdict']}")
    if seen["kind"] != "compute-bound" or f'job "{JOB}"' not in seen["verdict"]:
        fail("a trainer computing 150 ms a step is not compute-bound",
             seen["verdict"])
    if f'job "{JOB}"' not in top_verdict:
        fail("batchd top names another job", top_verdict)

    if seen["offsite"]:
        fail("the page asked for other hosts", "\n".join(seen["offsite"]))
    origin = f"http://127.0.0.1:{daemon.metrics_port}/"
    stray = [u for u in seen["requests"] if not u.startswith(origin)]
    if stray or not seen["requests"]:
        fail("requests outside the daemon", "\n".join(stray))
    # After its first answer the page asks only for newer points.
    timeline = [u for u in seen["requests"] if "/api/timeline" in u]
    if not any("/api/timeline?since=" in u for u in timeline[1:]):
        fail("the page does not ask for newer points only (since=)",
             "\n".join(timeline))
    if seen["errors"]:
        fail("script errors on the page", "\n".join(seen["errors"]))
    if seen["notice"]:
        fail("the page shows a notice", seen["notice"])
    print(f"{len(seen['requests'])} requests, all to {origin}; "
          f"screenshot {screenshot}")
    print("live page: passed")


if __name__ == "__main__":
    main()
