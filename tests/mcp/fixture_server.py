"""A small MCP server on the official Python SDK (`mcp`, pinned in requirements.txt) for what
the registry servers cannot show deterministically (tests/integration/mcp.rs):

- `add_tool(name)`: registers a new tool `name` and sends notifications/tools/list_changed;
- `wait(marker)`: writes "started" to the file `marker`, then waits up to 60 s; when the client
  sends notifications/cancelled for the call, it writes "cancelled" to `marker + ".cancelled"`;
- `pick_color()`: asks the user (MCP elicitation) for a color (an enum) and whether it is final
  (a boolean), and answers with what came back.

Runs over stdio: `python fixture_server.py`.
"""

import asyncio
import pathlib
from typing import Literal

from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("roundtable-fixture")


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool called `name` and tells the client its tool list changed."""

    def added() -> str:
        return f"I am {name}"

    server.add_tool(added, name=name, description=f"A tool added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool()
async def wait(marker: str) -> str:
    """Waits up to 60 s, recording its start and its cancellation in files."""
    pathlib.Path(marker).write_text("started")
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        pathlib.Path(marker + ".cancelled").write_text("cancelled")
        raise
    return "waited"


class ColorForm(BaseModel):
    color: Literal["red", "green", "blue"] = Field(description="Which color?")
    final: bool = Field(description="Is that final?")


@server.tool()
async def pick_color(ctx: Context) -> str:
    """Asks the user for a color."""
    result = await ctx.elicit(message="Pick a color", schema=ColorForm)
    if result.action == "accept":
        return f"accepted: color={result.data.color} final={result.data.final}"
    return result.action


if __name__ == "__main__":
    server.run()
