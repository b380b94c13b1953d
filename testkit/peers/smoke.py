"""Smoke check of `quarry serve` by the official Python MCP SDK: a client Quarry did not write.

Usage: python smoke.py [--modern] QUARRY_BINARY CONFIG_FILE   (stdio: the script starts quarry)
       python smoke.py [--modern] --http URL API_KEY           (a gateway serving streamable HTTP)

With --modern the client speaks MCP 2026-07-28 (server/discover, no initialize handshake, every
request carrying its _meta); without it, 2025-11-25.

Lists the tools, lists resources through the tool and through resources/list, reads one resource
both ways, and prints a JSON summary. Exits non-zero on any mismatch.
"""

import asyncio
import contextlib
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def structured(result):
    for name in ("structured_content", "structuredContent"):
        value = getattr(result, name, None)
        if value is not None:
            return value
    raise SystemExit(f"no structured content in {result!r}")


@contextlib.asynccontextmanager
async def connect(argv):
    if argv[0] == "--http":
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers={"Authorization": f"Bearer {argv[2]}"})
        async with client, streamable_http_client(argv[1], http_client=client) as streams:
            yield streams[0], streams[1]
        return
    # The SDK passes a child only a few safe variables by default: hand over ours, so the
    # gateway uses the store the test chose (QUARRY_STORE_PATH), not the user's default one.
    params = StdioServerParameters(
        command=argv[0], args=["serve", "--config", argv[1]], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write):
        yield read, write


async def main(argv) -> None:
    modern = argv[0] == "--modern"
    if modern:
        argv = argv[1:]
    async with connect(argv) as (read, write):
        async with ClientSession(read, write) as session:
            if modern:
                await session.discover()
                assert session.protocol_version == "2026-07-28", session.protocol_version
            else:
                await session.initialize()
            tools = sorted(t.name for t in (await session.list_tools()).tools)
            expected = sorted(["list_mcp_resources", "read_mcp_resource", "list_mcp_resource_versions", "list_mcp_resource_templates", "purge_mcp_cache", "add_mcp_server", "remove_mcp_server", "mcp_auth_configure", "mcp_auth_test", "mcp_auth_remove", "mcp_auth_refresh", "mcp_audit_export"])
            assert tools == expected, tools

            listing = structured(await session.call_tool("list_mcp_resources", {"limit": 1000}))
            assert listing["success"] is True, listing
            uris = [r["uri"] for r in listing["resources"]]
            target = "mcp://files/fixture_3A//text/hello.txt"
            assert target in uris, uris

            read = structured(await session.call_tool("read_mcp_resource", {"resource_uri": target}))
            assert read["content"] == "Hello from files!\n", read

            bad = await session.call_tool("read_mcp_resource", {"resource_uri": "nope"})
            assert getattr(bad, "is_error", None) or getattr(bad, "isError", None), bad
            assert structured(bad)["error_code"] == "E001", structured(bad)

            native = await session.list_resources()
            assert len(native.resources) == listing["total_count"], (len(native.resources), listing["total_count"])
            contents = (await session.read_resource(target)).contents
            assert contents[0].text == read["content"], contents

            print(json.dumps({
                "tools": tools,
                "total_count": listing["total_count"],
                "read": read["content_range"],
                "version": read["version"]["version"],
                "native_resources": len(native.resources),
                "protocol": session.protocol_version,
            }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
