"""``tools``: the agent's tools beyond its own — MCP servers (``tools.mcp_servers``).

In an environment variable the list is JSON:
``CONCORD_TOOLS__MCP_SERVERS='[{"name": "time", "command": "mcp-server-time"}]'``; in config.yaml a list of
mappings. Each entry is one server, reached either by a stdio ``command`` (with ``args``, ``env``, ``cwd``)
or by a streamable-HTTP ``url`` (with ``headers``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from agent.tools.mcp_server import McpServerSpec
from gateway.config.fields import SECTION

__all__ = ["McpServerSettings", "ToolsSettings"]

class McpServerSettings(BaseModel):
    """One MCP server and where its tools are offered."""

    model_config = SECTION
    # The tools appear as mcp__<name>__<tool>.
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = []
    # Extra environment for a stdio server (it inherits only HOME, LOGNAME, PATH, SHELL, TERM, USER).
    env: dict[str, SecretStr] = {}
    cwd: Path | None = None
    url: str | None = None
    headers: dict[str, SecretStr] = {}
    # The server's tools to offer (empty: all).
    tools: list[str] = []
    # Where the tools are offered: platform:chat id entries, platform names (both empty: every chat).
    allow_chats: list[str] = []
    allow_platforms: list[Literal["discord", "telegram", "console"]] = []
    # Per-call deadline, and the longest output the model reads (head and tail kept, the cut named).
    timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    max_output_tokens: int = Field(default=4_000, ge=100, le=100_000)
    connect_timeout_seconds: float = Field(default=30.0, gt=0, le=600)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @field_validator("allow_chats")
    @classmethod
    def _chat_refs(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            platform, _, ident = entry.partition(":")
            if platform not in ("discord", "telegram", "console") or not ident:
                raise ValueError(f"chat {entry!r} must look like discord:<chat id>, telegram:<chat id> or "
                                 "console:<name>")
        return entries

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r} needs exactly one of `command` (stdio) or `url` "
                             "(streamable HTTP)")
        return self

    def spec(self) -> McpServerSpec:
        """The server as the agent's MCP client takes it (secrets unwrapped)."""
        return McpServerSpec(
            name=self.name, command=self.command, args=tuple(self.args),
            env={k: v.get_secret_value() for k, v in self.env.items()},
            cwd=str(self.cwd) if self.cwd is not None else None, url=self.url,
            headers={k: v.get_secret_value() for k, v in self.headers.items()}, tools=frozenset(self.tools),
            allow_chats=frozenset(self.allow_chats), allow_platforms=frozenset(self.allow_platforms),
            timeout_s=self.timeout_seconds, max_output_tokens=self.max_output_tokens,
            connect_timeout_s=self.connect_timeout_seconds)


class ToolsSettings(BaseModel):
    """Tools from outside: MCP servers."""

    model_config = SECTION
    mcp_servers: list[McpServerSettings] = Field(default=[], max_length=32)

    @model_validator(mode="after")
    def _unique_and_installed(self) -> ToolsSettings:
        names = [s.name for s in self.mcp_servers]
        if len(set(names)) != len(names):
            raise ValueError(f"tools.mcp_servers: names must be unique, got {names}")
        if self.mcp_servers and importlib.util.find_spec("mcp") is None:
            raise ValueError("tools.mcp_servers needs the MCP SDK: pip install 'concord[mcp]'")
        return self
