#!/usr/bin/env python3
"""Runs `quarry auth probe` the way a conformance client scenario needs it.

The suite appends the scenario server's URL as the last argument and describes the scenario in
MCP_CONFORMANCE_SCENARIO and MCP_CONFORMANCE_CONTEXT (client credentials, pre-registered
clients). This maps them to the probe's flags: the client secret goes through the environment,
a private key through a file, never through arguments.

usage: client.py QUARRY_BINARY URL
"""

import json
import os
import subprocess
import sys
import tempfile

# The client ID metadata document URL the suite's CIMD scenario expects Quarry to use.
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def main() -> None:
    quarry, url = sys.argv[1], sys.argv[-1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    args = [quarry, "auth", "probe", "--follow", "--allow-private-network",
            "--client-metadata-url", CIMD_URL]
    env = dict(os.environ)
    key_file = None
    if scenario.startswith("auth/client-credentials"):
        args.append("--client-credentials")
    if "client_id" in context:
        args += ["--client-id", context["client_id"]]
    if "client_secret" in context:
        env["QUARRY_CONFORMANCE_CLIENT_SECRET"] = context["client_secret"]
        args += ["--client-secret-env", "QUARRY_CONFORMANCE_CLIENT_SECRET"]
    if "private_key_pem" in context:
        key = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)
        key.write(context["private_key_pem"])
        key.close()
        key_file = key.name
        args += ["--private-key-file", key_file]
    # The scenario servers offer one tool; calling it is what a step-up challenge answers.
    args += ["--call-tool", "test-tool", url]
    try:
        code = subprocess.run(args, env=env, check=False).returncode
    finally:
        if key_file:
            os.unlink(key_file)
    sys.exit(code)


if __name__ == "__main__":
    main()
