#!/usr/bin/python3
"""Checks deploy/grafana-dashboard.json against a real Prometheus.

Usage: check_dashboard.py --source-dir DIR --daemon BATCHD --client
       BATCHD_CLIENT --make-dataset MAKE_DATASET [--prometheus PROMETHEUS]

Starts a daemon (metrics on, tokens required, --workers auto, at most one
stream per job) over a small dataset with one file that is not a JPEG, and
Prometheus on a loopback port with the project's own scrape configuration
(deploy/prometheus.yml: the same job_name and relabelling, its target
replaced by the daemon's metrics port, 1 s scrapes, the alert rules
loaded). Two clients of jobs `job-a` and `job-b` stream from it, and two
more are refused: one without a token (UNAUTHENTICATED) and a second
stream of job-a (RESOURCE_EXHAUSTED, --max-streams-per-job 1).

Then every PromQL expression of the dashboard goes through Prometheus's
HTTP API (/api/v1/query), with Grafana's variables substituted ($instance
by the values its own query finds, $__rate_interval by four scrape
intervals). It fails when an expression is invalid, returns no series
(the load above makes every panel non-empty), returns a series without a
label its `by (...)` or legend names, or, grouping by `batchd_job`, does
not return exactly the two jobs. It also fails when a scraped series
carries `exported_job` (a page label clashing with the scrape's `job`) or
when an alert rule does not evaluate. Exits 0 when all pass; prints one
line per expression.
"""
import argparse
import json
import os
import pathlib
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

SCRAPE_INTERVAL_S = 1
JOBS = ("job-a", "job-b")
# How long the expressions may take to show what the load makes.
SETTLE_TIMEOUT_S = 30


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A Prometheus process on a loopback port, scraping `targets` with the
    scrape configuration of `config_path`, adapted."""

    def __init__(self, binary, config_path, rules_path, targets, directory):
        config = yaml.safe_load(pathlib.Path(config_path).read_text())
        config.setdefault("global", {})
        config["global"]["scrape_interval"] = f"{SCRAPE_INTERVAL_S}s"
        config["global"]["evaluation_interval"] = f"{SCRAPE_INTERVAL_S}s"
        config["rule_files"] = [str(rules_path)]
        scrape = config["scrape_configs"][0]
        self.job_name = scrape["job_name"]
        scrape["static_configs"] = [{"targets": list(targets)}]
        self.directory = pathlib.Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        config_file = self.directory / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.directory / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config_file}",
             f"--storage.tsdb.path={self.directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.process.poll() is not None:
                raise RuntimeError("prometheus exited:\n" + self.log())
            try:
                with urllib.request.urlopen(self.url + "/-/ready",
                                            timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("prometheus not ready:\n" + self.log())
            time.sleep(0.2)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def api(self, path, **params):
        """The `data` of an API answer; raises ValueError with Prometheus's
        error for a failed one."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                answer = json.load(r)
        except urllib.error.HTTPError as error:
            answer = json.load(error)
        if answer.get("status") != "success":
            raise ValueError(f"{answer.get('errorType')}: "
                             f"{answer.get('error')}")
        return answer["data"]

    def query(self, expr):
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise ValueError(f"result type {data['resultType']}, not vector")
        return data["result"]

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def dashboard_targets(dashboard):
    """(panel title, expr, legendFormat) of every query of the dashboard."""
    out = []
    for panel in dashboard["panels"]:
        for inner in [panel] + panel.get("panels", []):
            for target in inner.get("targets", []):
                if target.get("expr"):
                    out.append((inner["title"], target["expr"],
                                target.get("legendFormat", "")))
    return out


def resolve_variables(dashboard, prometheus):
    """{name: value} for the dashboard's template variables and Grafana's
    built-in ones used in queries."""
    values = {
        "__rate_interval": f"{4 * SCRAPE_INTERVAL_S}s",
        "__interval": f"{SCRAPE_INTERVAL_S}s",
        "__range": "1m",
    }
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)",
                             (query or "").strip())
        if var.get("type") != "query" or not match:
            raise ValueError(f"variable {var['name']}: cannot resolve "
                             f"{query!r}")
        metric, label = match.groups()
        found = prometheus.api(f"label/{label}/values",
                               **{"match[]": metric})
        if not found:
            values[var["name"]] = ""
        else:
            # A multi-value variable inside =~ is the values' alternation,
            # each escaped as Grafana does: a backslash, doubled inside
            # the PromQL string, before each regex metacharacter.
            values[var["name"]] = "|".join(
                re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", v)
                for v in found)
    return values


def substitute(expr, values):
    def one(match):
        name = match.group(1) or match.group(2)
        if name not in values:
            raise ValueError(f"unknown variable ${name}")
        return values[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def labels_named(expr, legend):
    """Labels the series must carry: those of every `by (...)` (but `le`,
    which histogram_quantile consumes) and of the legend's {{label}}."""
    labels = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
    for group in re.findall(r"\bby\s*\(([^)]*)\)", expr):
        labels.update(l.strip() for l in group.split(",") if l.strip())
    labels.discard("le")
    return labels


def check(expr, legend, result):
    """Problems with one expression's result, as strings."""
    if not result:
        return ["no series"]
    problems = []
    needed = labels_named(expr, legend)
    for series in result:
        missing = sorted(l for l in needed if not series["metric"].get(l))
        if missing:
            problems.append(f"series {series['metric']} lacks "
                            f"{', '.join(missing)}")
    if "batchd_job" in needed:
        jobs = sorted(s["metric"].get("batchd_job", "") for s in result)
        if jobs != sorted(JOBS):
            problems.append(f"per-job series {jobs}, want {list(JOBS)}")
    return problems


def run_client(args, endpoint, job, token_file, epochs, step_ms):
    command = [args.client, "--endpoint", endpoint, "--dataset", "tiny",
               "--batch_size", "8", "--size", "32", "--epochs", str(epochs),
               "--step_ms", str(step_ms), "--job", job, "--seed", "1"]
    if token_file:
        command += ["--token_file", str(token_file)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--make-dataset", required=True)
    parser.add_argument("--prometheus",
                        default=shutil.which("prometheus") or "prometheus")
    args = parser.parse_args()
    source = pathlib.Path(args.source_dir).resolve()
    sys.path.insert(0, str(source / "testing" / "python"))
    from batchd_testing.daemon import Daemon

    dashboard = json.loads(
        (source / "deploy" / "grafana-dashboard.json").read_text())
    work = pathlib.Path(tempfile.mkdtemp(prefix="batchd-dashboard-"))
    started = time.monotonic()
    daemon = prometheus = None
    clients = []
    failures = 0
    try:
        data = work / "tiny"
        subprocess.run([args.make_dataset, "--out", str(data), "--images",
                        "64", "--classes", "2", "--seed", "3"], check=True,
                       stdout=subprocess.DEVNULL)
        first_class = sorted(p for p in data.iterdir() if p.is_dir())[0]
        (first_class / "zz-not-a-jpeg.jpg").write_bytes(b"not a JPEG\n")
        token = secrets.token_hex(16)
        (work / "tokens").write_text(f"{token}\n")
        (work / "token").write_text(f"{token}\n")
        daemon = Daemon(args.daemon, {"tiny": data},
                        ["--workers", "auto", "--max-workers", "2",
                         "--max-streams-per-job", "1",
                         "--auth-token-file", str(work / "tokens")],
                        directory=work / "daemon", metrics=True)
        prometheus = Prometheus(
            args.prometheus, source / "deploy" / "prometheus.yml",
            source / "deploy" / "prometheus" / "alerts.yml",
            [f"127.0.0.1:{daemon.metrics_port}"], work / "prometheus")
        print(f"prometheus {prometheus.url}, scrape job "
              f"{prometheus.job_name!r}, daemon metrics on "
              f"{daemon.metrics_port}")

        # Two jobs streaming, one slower than the other.
        clients = [run_client(args, daemon.endpoint, "job-a",
                              work / "token", 1000, 20),
                   run_client(args, daemon.endpoint, "job-b",
                              work / "token", 1000, 5)]
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while len(prometheus.query("batchd_job_streams > 0")) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the two jobs never streamed together")
            time.sleep(0.5)
        # Refused: no token; a second stream of job-a.
        for job, token_file, code in (
                ("job-b", None, "UNAUTHENTICATED"),
                ("job-a", work / "token", "RESOURCE_EXHAUSTED")):
            refused = run_client(args, daemon.endpoint, job, token_file, 1, 0)
            try:
                _, err = refused.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                refused.kill()
                _, err = refused.communicate()
            err = err.decode(errors="replace")
            if refused.returncode == 0 or code not in err:
                raise RuntimeError(f"a client of {job} was not refused with "
                                   f"{code} (exit {refused.returncode}):\n"
                                   f"{err[-2000:]}")

        values = resolve_variables(dashboard, prometheus)
        print("variables: " + ", ".join(f"${k}={v}"
                                        for k, v in sorted(values.items())))
        targets = dashboard_targets(dashboard)
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        # Poll until every expression shows what the load makes (rates
        # need two scrapes after a counter first appears), then report.
        while True:
            outcome = []
            for title, expr, legend in targets:
                query = substitute(expr, values)
                try:
                    problems = check(expr, legend, prometheus.query(query))
                except ValueError as error:
                    problems = [f"invalid: {error}"]
                outcome.append((title, query, problems))
            if all(not p for _, _, p in outcome) or \
                    time.monotonic() > deadline:
                break
            time.sleep(1)
        for title, query, problems in outcome:
            print(f"{'FAIL' if problems else 'ok  '} [{title}] {query}")
            for problem in problems:
                print(f"       {problem}")
            failures += bool(problems)

        clashing = prometheus.query('count({exported_job!=""})')
        if clashing:
            print("FAIL series carry exported_job: a page label `job` "
                  "clashes with the scrape job's")
            failures += 1
        up = prometheus.query(f'up{{job="{prometheus.job_name}"}} == 1')
        if len(up) != 1:
            print(f"FAIL up{{job={prometheus.job_name!r}}}: {up}")
            failures += 1
        rules = prometheus.api("rules")["groups"]
        evaluated = 0
        for group in rules:
            for rule in group["rules"]:
                evaluated += 1
                if rule.get("health") != "ok":
                    print(f"FAIL alert {rule['name']}: {rule.get('health')} "
                          f"{rule.get('lastError', '')}")
                    failures += 1
        if evaluated == 0:
            print("FAIL no alert rules loaded")
            failures += 1
        print(f"{len(targets)} expressions, {evaluated} alert rules, "
              f"{failures} failures, {time.monotonic() - started:.1f} s")
    finally:
        for client in clients:
            if client.poll() is None:
                client.terminate()
            try:
                client.wait(timeout=10)
            except subprocess.TimeoutExpired:
                client.kill()
        if prometheus is not None:
            prometheus.stop()
            if failures:
                print(prometheus.log()[-3000:])
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
