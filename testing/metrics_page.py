#!/usr/bin/python3
"""Fetches a batchd /metrics page and parses it with prometheus_client.

Usage: metrics_page.py URL

Prints one line per sample, `name{label="value",...} value` with labels
sorted, so that a test can compare them with a run's known numbers. Exits 1
(with the reason on stderr) when the page cannot be fetched or does not parse
with the real Prometheus parser, or when a histogram is inconsistent.
"""
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    url = sys.argv[1]
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            content_type = response.headers.get("Content-Type", "")
            page = response.read().decode("utf-8")
    except Exception as error:  # noqa: BLE001 - report any failure plainly
        print(f"cannot fetch {url}: {error}", file=sys.stderr)
        return 1
    if not content_type.startswith("text/plain"):
        print(f"unexpected Content-Type {content_type!r}", file=sys.stderr)
        return 1
    try:
        families = list(text_string_to_metric_families(page))
    except Exception as error:  # noqa: BLE001
        print(f"the page does not parse: {error}", file=sys.stderr)
        return 1
    for family in families:
        if family.type == "histogram":
            # Buckets are cumulative and +Inf equals _count, per label set.
            buckets, counts = {}, {}
            for s in family.samples:
                key = tuple(sorted((k, v) for k, v in s.labels.items()
                                   if k != "le"))
                if s.name.endswith("_bucket"):
                    buckets.setdefault(key, []).append(
                        (float(s.labels["le"]), s.value))
                elif s.name.endswith("_count"):
                    counts[key] = s.value
            for key, values in buckets.items():
                values.sort()
                cumulative = [v for _, v in values]
                if cumulative != sorted(cumulative):
                    print(f"{family.name}{key}: buckets not cumulative",
                          file=sys.stderr)
                    return 1
                if values[-1][0] != float("inf") or \
                        values[-1][1] != counts.get(key):
                    print(f"{family.name}{key}: +Inf bucket != _count",
                          file=sys.stderr)
                    return 1
        print(f"# family {family.name} {family.type}")
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            print(f"{s.name}{{{labels}}} {s.value!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
