"""A hostile MCP server over stdio, for tests: well-behaved by default, with one switch per way
real servers misbehave.

  --stray-id-on-init   answer `initialize` after a response with an id nobody asked for
  --malformed-entries  list two malformed entries (a negative size, a null name) beside the
                       good one

It serves one text resource, hostile://one ("one"), and hostile://surrogate, whose text holds a
lone UTF-16 surrogate escape ("\ud800"): valid to Python, refused by strict JSON parsers.
"""

import json
import sys

STRAY_ID_ON_INIT = "--stray-id-on-init" in sys.argv[1:]
MALFORMED_ENTRIES = "--malformed-entries" in sys.argv[1:]


def send(message):
    # Compact, like rmcp and most SDKs: `{"jsonrpc":"2.0","id":...`.
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def result(request_id, value):
    send({"jsonrpc": "2.0", "id": request_id, "result": value})


def main():
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            if STRAY_ID_ON_INIT:
                result(987654321, {})
            version = message.get("params", {}).get("protocolVersion", "2025-11-25")
            result(request_id, {
                "protocolVersion": version,
                "capabilities": {"resources": {"subscribe": True}},
                "serverInfo": {"name": "hostile", "version": "0"},
            })
        elif method in ("ping", "resources/subscribe", "resources/unsubscribe"):
            result(request_id, {})
        elif method == "resources/list":
            resources = [{"uri": "hostile://one", "name": "one", "mimeType": "text/plain"}]
            if MALFORMED_ENTRIES:
                resources.insert(0, {"uri": "hostile://bad-size", "name": "x", "size": -1})
                resources.append({"uri": "hostile://bad-name", "name": None})
            result(request_id, {"resources": resources})
        elif method == "resources/templates/list":
            result(request_id, {"resourceTemplates": []})
        elif method == "resources/read":
            uri = message.get("params", {}).get("uri")
            if uri == "hostile://one":
                result(request_id, {"contents": [
                    {"uri": uri, "mimeType": "text/plain", "text": "one"},
                ]})
            elif uri == "hostile://surrogate":
                result(request_id, {"contents": [
                    {"uri": uri, "mimeType": "text/plain", "text": "a\ud800b"},
                ]})
            else:
                send({"jsonrpc": "2.0", "id": request_id,
                      "error": {"code": -32002, "message": "Resource not found"}})
        else:
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
