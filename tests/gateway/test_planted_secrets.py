"""The planted-secret campaign: 100 conversations carry every secret kind in every phrasing, and none of them
reaches a summary request, a stored summary, the previous-summary state, memory, a log line or CLI output.

Secrets sit in user messages, tool arguments and tool output in the middle of each conversation, which is
then compressed through the gateway (``/compress``). Half the conversations use a summary model that echoes
its whole prompt back (the worst case), half a failing one (the static summary), with JSON logs at DEBUG and
at INFO; an LLM error body carrying a forged log record is answered in between. Afterwards the summary
requests, the store, the memory files, every log line and ``concord sessions search/show/export`` are
searched for every planted secret and a 16-character piece of it.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent.compression.summary import is_summary_text
from bench._redaction_corpus import Planted, positives
from gateway.cli.main import main
from gateway.ops.logsetup import configure_logging
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, bulk_session, is_summary_request

CONVERSATIONS_PER_MODE = 50
# A bulky middle (the summary serializer clips each message), so an echoed prompt is a usable summary.
FILLER = "build log line: compiled module ok\n" * 600
FORGERY = 'bad request "}\n{"level":"CRITICAL","logger":"gateway.auth","message":"all admins removed"}\n'


def _conversation(lines: list[Planted], number: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"conversation {number}: let's deploy"},
                                      {"role": "assistant", "content": "Sure."}]
    for index, planted in enumerate(lines):
        call_id = f"c{number}-{index}"
        arguments = planted.text if index % 3 == 1 else "deploy status"
        output = planted.text if index % 3 == 2 else "ok"
        messages += [
            {"role": "user", "content": planted.text if index % 3 == 0 else f"step {index}"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": "shell", "arguments": json.dumps({"command": arguments}, ensure_ascii=False)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": output},
            {"role": "assistant", "content": f"Step {index} done.\n{FILLER if index >= len(lines) - 4 else ''}"},
        ]
    for turn in range(12):  # the verbatim tail
        messages += [{"role": "user", "content": f"next {turn}"}, {"role": "assistant", "content": "ok"}]
    return messages


def _leaks(planted: list[Planted], text: str) -> list[str]:
    found = []
    for item in planted:
        secret = item.secret
        pieces = [secret] + ([secret[:16], secret[len(secret) // 2 :][:16]] if len(secret) > 16 else [])
        for piece in pieces:
            at = text.find(piece)
            if at >= 0:
                found.append(f"{item.kind}/{item.phrasing}: …{text[max(at - 60, 0) : at + 30]!r}…")
                break
    return found


@pytest.mark.parametrize(("mode", "level"), [("echo", "DEBUG"), ("static", "INFO")])
async def test_no_planted_secret_gets_out(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                          mode: str, level: str) -> None:
    planted = positives()
    logs = io.StringIO()
    configure_logging(level, json_logs=True, stream=logs)

    def respond(body: dict[str, Any]) -> str:
        if is_summary_request(body):
            # echo: the whole prompt comes back as the summary; static: an empty summary is a failed one
            return str(body["messages"][-1]["content"]) if mode == "echo" else ""
        return "ok"

    fake_llm.responder = respond
    # A window small enough that the planted middle is outside the verbatim tail.
    gateway, adapter = await gateway_factory(llm={"context_length": 32_000})
    session_ids = []
    share = -(-len(planted) // CONVERSATIONS_PER_MODE)
    for number in range(CONVERSATIONS_PER_MODE):
        lines = planted[number * share : (number + 1) * share]
        session_ids.append(await bulk_session(gateway, f"dm:conv{number}", _conversation(lines, number)))
        await adapter.say("/compress", chat_id=f"conv{number}", user_id="boss")
        assert adapter.texts(f"conv{number}")[-1].startswith("Compressed"), adapter.texts(f"conv{number}")[-1]
        if number % 10 == 0:  # a chat turn that fails with a forged log record in the error body
            fake_llm.raw(400, json.dumps({"error": {"message": FORGERY, "type": "invalid_request_error"}}))
            await adapter.say(f"and now? {lines[0].text}", chat_id=f"conv{number}", user_id="boss")
        if number % 10 == 5:  # the model saves a planted line to memory
            fake_llm.reply("", tool_calls=[{"id": "m", "name": "memory",
                                            "arguments": {"action": "append", "target": "user", "text": lines[0].text}}])
            fake_llm.reply("saved")
            await adapter.say("remember that", chat_id=f"conv{number}", user_id=f"user{number}")

    summary_requests = [json.dumps(r.json, ensure_ascii=False) for r in fake_llm.requests if is_summary_request(r.json)]
    assert len(summary_requests) >= CONVERSATIONS_PER_MODE
    assert _leaks(planted, "\n".join(summary_requests)) == []

    stored = []
    kinds = set()
    for session_id in session_ids:
        record = await gateway.rt.store.sessions.require(session_id)
        assert record.engine.previous_summary
        stored.append(repr(record.engine))
        active = await gateway.rt.store.messages.load_active(session_id)
        summaries = [str(m.get("content")) for m in active.messages if is_summary_text(str(m.get("content") or ""))]
        assert len(summaries) == 1
        stored += summaries
        kinds.add("static" if "Static summary of" in summaries[0] else "llm")
    assert kinds == {"static" if mode == "static" else "llm"}
    assert _leaks(planted, "\n".join(stored)) == []

    memory = "\n".join(p.read_text() for p in (tmp_path / "memory").rglob("*.md"))
    assert memory.count("[REDACTED]") >= 5 and _leaks(planted, memory) == []

    lines = logs.getvalue().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one valid JSON record
    assert records and all(r["level"] != "CRITICAL" for r in records)
    assert {"session", "platform", "worker"} <= set(records[-1])
    assert _leaks(planted, logs.getvalue()) == []

    for key in list(os.environ):
        if key.startswith("CONCORD_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("CONCORD_STORAGE__DATA_DIR", str(tmp_path))
    capsys.readouterr()
    for words in ("password", "token", "key", "密码", "login", "export"):
        assert await asyncio.to_thread(main, ["sessions", "search", words, "--limit", "200"]) == 0
    for session_id in session_ids[::7]:
        assert await asyncio.to_thread(main, ["sessions", "show", session_id]) == 0
        assert await asyncio.to_thread(main, ["sessions", "export", session_id, "--include-archived"]) == 0
    printed = capsys.readouterr()
    assert "[REDACTED]" in printed.out
    assert _leaks(planted, printed.out + printed.err) == []
