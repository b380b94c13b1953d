"""A hostile MCP server for tests: well-behaved by default, with one switch per way real servers
misbehave. It speaks stdio, or streamable HTTP with `--http` (it prints its endpoint URL as the
first line of stdout, answers every request as a server-sent event stream, and serves until
killed).

  --stray-id-on-init   answer `initialize` after a response with an id nobody asked for
  --malformed-entries  list two malformed entries (a negative size, a null name) beside the
                       good one
  --hold-streams       over HTTP, keep every answer's event stream open after the answer
                       (a comment every 100 ms, for up to 30 s) instead of ending it
  --end-streams-late   over HTTP, end every answer's event stream 200 ms after the answer

It serves one text resource, hostile://one ("one"), and two that misbehave when read:
  hostile://surrogate  its text holds a lone UTF-16 surrogate escape ("\\ud800"): valid to
                       Python, refused by strict JSON parsers
  hostile://cut        the answer stops halfway through the message: over stdio the process
                       exits, over HTTP the connection closes
  hostile://sized/N    a text of N bytes ("xxx..."), made at once whatever N is
"""

import http.server
import json
import os
import sys
import time

SWITCHES = set(sys.argv[1:])
STRAY_ID_ON_INIT = "--stray-id-on-init" in SWITCHES
MALFORMED_ENTRIES = "--malformed-entries" in SWITCHES
HTTP = "--http" in SWITCHES
HOLD_STREAMS = "--hold-streams" in SWITCHES
END_STREAMS_LATE = "--end-streams-late" in SWITCHES


class Cut(Exception):
    """The answer to send is this message's first half, and then nothing."""

    def __init__(self, partial):
        super().__init__("cut")
        self.partial = partial


def encode(message):
    # Compact, like rmcp and most SDKs: `{"jsonrpc":"2.0","id":...`.
    return json.dumps(message, separators=(",", ":"))


def result(request_id, value):
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id, code, message):
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def read(request_id, uri):
    text = {"hostile://one": "one", "hostile://surrogate": "a\ud800b"}.get(uri)
    if uri and uri.startswith("hostile://sized/") and uri[16:].isdigit():
        text = "x" * int(uri[16:])
    if uri == "hostile://cut":
        whole = encode(result(request_id, {"contents": [
            {"uri": uri, "mimeType": "text/plain", "text": "x" * 4096},
        ]}))
        raise Cut(whole[: len(whole) // 2])
    if text is None:
        return error(request_id, -32002, "Resource not found")
    return result(request_id, {"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]})


def answer(message):
    """The messages that answer one request, in order."""
    method, request_id = message.get("method"), message.get("id")
    params = message.get("params") or {}
    if method == "initialize":
        stray = [result(987654321, {})] if STRAY_ID_ON_INIT else []
        return stray + [result(request_id, {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"resources": {"subscribe": True}},
            "serverInfo": {"name": "hostile", "version": "0"},
        })]
    if method in ("ping", "resources/subscribe", "resources/unsubscribe"):
        return [result(request_id, {})]
    if method == "resources/list":
        resources = [{"uri": "hostile://one", "name": "one", "mimeType": "text/plain"}]
        if MALFORMED_ENTRIES:
            resources.insert(0, {"uri": "hostile://bad-size", "name": "x", "size": -1})
            resources.append({"uri": "hostile://bad-name", "name": None})
        return [result(request_id, {"resources": resources})]
    if method == "resources/templates/list":
        return [result(request_id, {"resourceTemplates": []})]
    if method == "resources/read":
        return [read(request_id, params.get("uri"))]
    return [error(request_id, -32601, "Method not found")]


def serve_stdio():
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("id") is None:
            continue  # a notification or a response
        try:
            out = "".join(encode(m) + "\n" for m in answer(message))
        except Cut as cut:
            sys.stdout.write(cut.partial)
            sys.stdout.flush()
            os._exit(1)
        sys.stdout.write(out)
        sys.stdout.flush()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    session = "hostile-session-1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        try:
            message = json.loads(self.rfile.read(length))
        except ValueError:
            return self.plain(400, "not JSON")
        if not isinstance(message, dict) or message.get("id") is None:
            return self.plain(202, "")
        try:
            body = "".join(f"event: message\ndata: {encode(m)}\n\n" for m in answer(message))
        except Cut as cut:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Mcp-Session-Id", self.session)
            self.end_headers()
            self.wfile.write(f"event: message\ndata: {cut.partial}".encode())
            self.wfile.flush()
            self.close_connection = True
            return
        data = body.encode()
        if HOLD_STREAMS:
            return self.hold(data, [b": held\n\n"] * 300, close=True)
        if END_STREAMS_LATE:
            return self.hold(data, [b": ending\n\n", b""], close=False)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Mcp-Session-Id", self.session)
        self.end_headers()
        self.wfile.write(data)

    def hold(self, data, later, close):
        """Sends `data` as the first chunk of a stream, then each of `later` 100 ms apart (an
        empty one ends the stream); `close` closes the connection after."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Mcp-Session-Id", self.session)
        self.end_headers()
        self.close_connection = close
        try:
            for i, chunk in enumerate([data] + later):
                if i > 0:
                    time.sleep(0.1)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
        except OSError:
            self.close_connection = True  # the client gave the stream up

    def do_GET(self):
        self.plain(405, "no standalone stream")

    def do_DELETE(self):
        self.plain(200, "")

    def plain(self, status, text):
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve_http():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}/mcp", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve_http() if HTTP else serve_stdio()
