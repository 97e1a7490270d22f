"""MCP tools through the whole gateway: the fake LLM calls tools of real MCP servers nobody here wrote
(``mcp-server-time`` and ``mcp-server-git`` from the package index, over stdio; the SDK's own streamable-HTTP
server) and answers from what they returned."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agent.tools.mcp_tools import UNTRUSTED_NOTE, UNTRUSTED_TAG
from gateway.intake.keys import SessionKey
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.mcp_http import PLANTED_KEY, serve_mcp_http
from tests.gateway.conftest import GatewayFactory

BIN = Path(sys.executable).parent


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "tool"]


def answer_from_tool(server: FakeLLMServer, name: str, arguments: dict[str, Any], reply: Any) -> None:
    """Script the model: call ``name`` first, then answer with ``reply(tool result)``."""
    server.reply(tool_calls=[{"name": name, "arguments": arguments}])

    def respond(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        return Reply(reply(results[-1]) if results else "no tool result")

    server.responder = respond


def git_repo(path: Path) -> Path:
    path.mkdir()
    run = lambda *args: subprocess.run(["git", *args], cwd=path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("-c", "user.name=T", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m",
        "Pin the deploy window to Tuesdays")
    return path


async def test_the_agent_calls_real_stdio_mcp_servers_and_uses_their_results(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    servers = [
        {"name": "time", "command": str(BIN / "mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        {"name": "git", "command": str(BIN / "mcp-server-git"), "args": ["--repository", str(repo)],
         "tools": ["git_log", "git_status"]},
    ]
    _, adapter = await gateway_factory(tools={"mcp_servers": servers})

    answer_from_tool(fake_llm, "mcp__time__get_current_time", {"timezone": "Asia/Tokyo"},
                     lambda result: "Tokyo time: " + json.loads(result.split("\n", 1)[1].rsplit("\n", 1)[0])
                     ["datetime"])
    await adapter.say("what time is it in Tokyo?")
    answer = adapter.texts()[-1]
    assert answer.startswith("Tokyo time: ") and answer.endswith("+09:00")

    first = fake_llm.requests[0].json
    names = [t["function"]["name"] for t in first["tools"]]
    # Namespaced by server; only the git tools the operator listed.
    assert {"mcp__time__get_current_time", "mcp__time__convert_time", "mcp__git__git_log",
            "mcp__git__git_status"} <= set(names)
    assert not any(n.startswith("mcp__git__") and n not in ("mcp__git__git_log", "mcp__git__git_status")
                   for n in names)
    assert UNTRUSTED_NOTE in first["messages"][0]["content"]
    stored = tool_results(fake_llm.last_request.json)[-1]
    assert stored.startswith(f'<{UNTRUSTED_TAG} server="time" tool="get_current_time">')

    answer_from_tool(fake_llm, "mcp__git__git_log", {"repo_path": str(repo), "max_count": 1},
                     lambda result: "Last commit: " + ("Tuesdays" if "Pin the deploy window to Tuesdays" in result
                                                       else "unknown"))
    await adapter.say("what was the last commit?")
    assert adapter.texts()[-1] == "Last commit: Tuesdays"


async def test_streamable_http_mcp_results_are_redacted_and_untrusted(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    async with serve_mcp_http() as url:
        gateway, adapter = await gateway_factory(tools={"mcp_servers": [{"name": "notes", "url": url}]})
        answer_from_tool(fake_llm, "mcp__notes__lookup", {"topic": "deploys"},
                         lambda result: "Deploys: Tuesday 14:00 UTC" if "Tuesday 14:00 UTC" in result else "?")
        await adapter.say("when do we deploy?")
        assert adapter.texts()[-1] == "Deploys: Tuesday 14:00 UTC"
        live = gateway.sessions.cached(SessionKey("discord", "dm:c1"))
        assert live is not None
        stored = next(m["content"] for m in live.messages if m.get("role") == "tool")
        assert PLANTED_KEY not in stored and stored.count(f"</{UNTRUSTED_TAG}>") == 1
        await gateway.aclose(grace_seconds=5)


async def test_the_bot_answers_without_a_server_that_cannot_start_and_offers_tools_only_where_allowed(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    servers = [{"name": "broken", "command": "/nonexistent/mcp-server"},
               {"name": "time", "command": str(BIN / "mcp-server-time"), "allow_chats": ["discord:elsewhere"]}]
    _, adapter = await gateway_factory(tools={"mcp_servers": servers})
    fake_llm.default_text = "plain answer"
    await adapter.say("hello")
    assert adapter.texts()[-1] == "plain answer"
    body = fake_llm.last_request.json
    assert not any(t["function"]["name"].startswith("mcp__") for t in body.get("tools") or [])
    # The note follows what is configured for the chat, not who is up: the prompt stays stable for caching.
    assert UNTRUSTED_NOTE in body["messages"][0]["content"]
    await adapter.say("hello there", chat_id="elsewhere")
    body = fake_llm.last_request.json
    assert any(t["function"]["name"] == "mcp__time__get_current_time" for t in body["tools"])
    assert UNTRUSTED_NOTE in body["messages"][0]["content"]
