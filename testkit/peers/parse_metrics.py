"""Parses a Prometheus text exposition from stdin with prometheus_client's own parser and prints
its samples as JSON lines: {"family", "type", "name", "labels", "value"}. A malformed
exposition makes the parser raise, and this script exit non-zero."""

import json
import sys

from prometheus_client.parser import text_string_to_metric_families

for family in text_string_to_metric_families(sys.stdin.read()):
    for sample in family.samples:
        print(
            json.dumps(
                {
                    "family": family.name,
                    "type": family.type,
                    "name": sample.name,
                    "labels": sample.labels,
                    "value": sample.value,
                }
            )
        )
