"""Live sessions: a stored session plus the objects that work on it (engine, memory, agent loop).

The store is the truth: every turn reloads the session row and its active messages, so several workers can
share sessions. The engine and agent loop are kept in a bounded LRU because they carry what the store does
not (the loop's noted system prompt and real-usage anchor); an entry is rebuilt from the store when it was
evicted, when the chat moved to another session, or when another worker changed the engine state.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agent.compression.engine import ContextEngine
from agent.llm.failover import ChatFailover
from agent.loop import AgentLoop
from agent.memory import MemoryProvider
from agent.tools.mcp_tools import UNTRUSTED_NOTE
from agent.tools.registry import ToolRegistry
from agent.turn import LoopConfig
from gateway.conversation.continuity import END_IDLE, continuity_note, previous_idle_session
from gateway.conversation.engine_state import restore_engine_state
from gateway.conversation.history import read_history_tool
from gateway.conversation.pins import pin_token_limit, pin_tool, pins_block
from gateway.conversation.prompt import build_system_prompt
from gateway.conversation.recall import recall_tool
from gateway.conversation.rerank import meaning_rerank
from gateway.intake.keys import SessionKey
from gateway.runtime import Runtime
from gateway.store import (
    CompactionInfo,
    EngineState,
    Handling,
    PinRecord,
    PreparedRecord,
    SessionRecord,
    payload_of,
)

__all__ = ["END_IDLE", "END_NEW", "LiveSession", "SessionManager"]

log = logging.getLogger(__name__)

END_NEW = "new"


@dataclass
class LiveSession:
    """One conversation during a turn: its row, active messages (as stored) and working objects."""

    key: SessionKey
    record: SessionRecord
    engine: ContextEngine
    memory: MemoryProvider
    loop: AgentLoop
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The store's exact count of each of ``messages``: compressions and the agent's ledger start from them.
    token_counts: list[int] = field(default_factory=list)
    watermark: int = 0
    # The engine state as last read from or written to the store; a different stored one means another
    # worker moved the session on, and the engine must be reloaded.
    synced_state: EngineState | None = None
    pending_note: str | None = None
    # This chat's own persona (``/persona``), None for the configured one.
    persona: str | None = None
    # The chat's pinned rules, as last read from the store (their block ends the system prompt).
    pins: tuple[PinRecord, ...] = ()
    # The configured models as this chat calls them: its own (``/model``) or the main one first.
    models: ChatFailover | None = None
    # How many of the newest ``messages`` were stored since the engine was last handed them.
    unseen: int = 0
    # What the engine prepared for them then, to keep with their rows in the session's next append (no write
    # of its own): (session id, records).
    prepared: tuple[str, list[PreparedRecord]] | None = None

    @property
    def id(self) -> str:
        """The store's session id."""
        return self.record.id

    @property
    def first_seq(self) -> int:
        """The stored number of ``messages[0]``: an active set's sequences are consecutive up to the watermark."""
        return self.watermark - len(self.messages) + 1

    @property
    def system_prompt(self) -> str:
        """The prompt the agent currently runs with."""
        return self.loop.system_prompt

    @property
    def held_counts(self) -> list[int] | None:
        """``token_counts`` when they describe ``messages`` (None if the two ever got out of step)."""
        return self.token_counts if len(self.token_counts) == len(self.messages) else None

    def stored(self, count: int) -> None:
        """``count`` messages were appended to ``messages`` as stored."""
        self.unseen += count

    def hand_stored_to_engine(self) -> None:
        """Give the engine the messages stored since the last call (`ContextEngine.on_messages_stored`); for
        after the answer was sent. What it prepared for them waits for `take_prepared`."""
        if self.unseen > 0:
            fresh, self.unseen = self.messages[-self.unseen:], 0
            first = self.watermark - len(fresh) + 1
            records = self.engine.on_messages_stored(fresh)
            if records is None or len(records) != len(fresh):  # an engine written before it returned records
                return
            kept = [PreparedRecord(first + i, payload_of(message), record)
                    for i, (message, record) in enumerate(zip(fresh, records, strict=True)) if record is not None]
            if kept:
                earlier = self.prepared[1] if self.prepared is not None and self.prepared[0] == self.id else []
                self.prepared = (self.id, [*earlier, *kept])

    def take_prepared(self) -> list[PreparedRecord]:
        """What the engine prepared for this session's stored messages and the store does not keep yet, handed
        over once (records made while the conversation was in another session are dropped)."""
        pending, self.prepared = self.prepared, None
        return pending[1] if pending is not None and pending[0] == self.id else []

    @property
    def last_compaction(self) -> CompactionInfo | None:
        """When, why and how much the last compaction saved (from the store)."""
        return self.record.engine.last_compaction


class SessionManager:
    """Opens, refreshes, restarts and ends live sessions; keeps at most ``capacity`` of them warm."""

    def __init__(self, rt: Runtime, capacity: int = 1024) -> None:
        self.rt = rt
        self.capacity = capacity
        self._live: OrderedDict[SessionKey, LiveSession] = OrderedDict()
        self._persona = rt.settings.gateway.persona_template()

    def __len__(self) -> int:
        return len(self._live)

    def cached(self, key: SessionKey) -> LiveSession | None:
        """The warm live session of ``key`` (the one its last turn used), or None."""
        return self._live.get(key)

    def drop(self, key: SessionKey) -> None:
        """Forget ``key``'s warm live session: its next message builds it again from the store (an erasure
        changed what it held, its memory snapshot included)."""
        self._live.pop(key, None)

    async def open(self, key: SessionKey, user_id: str | None) -> LiveSession:
        """The chat's open session, fresh from the store (created, with a continuity note, if none is open)."""
        return (await self.open_for_message(key, user_id, None))[0]

    async def open_for_message(self, key: SessionKey, user_id: str | None,
                               message_key: str | None) -> tuple[LiveSession, Handling]:
        """`open`, and how far the handling of the message ``message_key`` got in the store (marked handled
        already?): the session row, the chat's pins and that record come from one read (the one before every
        turn)."""
        store = self.rt.store
        snapshot = await store.chat_snapshot(key.platform, key.chat_key, message_key=message_key)
        record, note = snapshot.session, None
        if record is None:
            previous = await previous_idle_session(store, key)
            record = await store.sessions.get_or_create_active(key.platform, key.chat_key)
            note = continuity_note(previous) if previous is not None else None
        live = await self.attach(record, user_id, pins=snapshot.pins)
        if note:
            live.pending_note = note
        return live, snapshot.message

    async def attach(self, record: SessionRecord, user_id: str | None, *, remember: bool = True,
                     pins: tuple[PinRecord, ...] | None = None) -> LiveSession:
        """A live session for ``record``: the warm one refreshed from the store, or a new one.

        ``remember=False`` (sweeps) leaves the warm cache alone: a session opened without its user must not
        replace the one a conversation built with the user's memory. ``pins``: the chat's pins when the
        caller has just read them (otherwise they are read here).
        """
        key = SessionKey(record.platform, record.chat_key)
        live = self._live.get(key)
        if live is not None and live.id == record.id and _unchanged(live, record):
            # Nobody else wrote to the session since our last turn: the cached active set is current.
            live.record = record
            await self._update_pins(live, pins)
            if remember:
                self._remember(key, live)
            self._follow_window(live)
            return live
        active = await self.rt.store.messages.load_active(record.id)
        if live is None or live.id != record.id:
            live = await self._build(key, record, user_id, active.messages, pins)
        else:
            replaced = record.compactions != live.record.compactions
            compacted_only = _one_compaction_since(live.record, record)
            live.record = record
            if replaced and not compacted_only:
                # Another process replaced the active set otherwise than by one compaction — an erasure may
                # have taken a memory entry with it: the memory snapshot is taken again (the prompt changes
                # only if it did). A compaction keeps the snapshot, so the prompt stays byte-identical.
                await live.memory.start_session(record.id)
            if replaced or record.engine != live.synced_state:
                # Another worker (or a sweep) moved the session on: take its engine state and prompt.
                restore_engine_state(live.engine, record.engine)
                live.synced_state = record.engine
                live.loop.system_prompt = self.system_prompt(key, live.memory, persona=live.persona,
                                                             pins=live.pins)
            await self._update_pins(live, pins)
        live.messages, live.token_counts, live.watermark = active.messages, active.token_counts, active.watermark
        if remember:
            self._remember(key, live)
        self._follow_window(live)
        return live

    def _follow_window(self, live: LiveSession) -> None:
        """A window learned meanwhile (another session's overflow error) applies to this session too: the
        window of the model this chat's next call goes to (its own, or a fallback while the main one fails)."""
        planned = live.models.planned() if live.models is not None else None
        window = planned.window if planned is not None and planned.window is not None else self.rt.window
        lower = getattr(live.engine, "lower_context_length", None)
        if window is not None and callable(lower) and window.tokens < live.engine.context_length:
            lower(window.tokens)

    async def reload(self, live: LiveSession) -> None:
        """Re-read the active messages and their watermark."""
        active = await self.rt.store.messages.load_active(live.id)
        live.messages, live.token_counts, live.watermark = active.messages, active.token_counts, active.watermark

    async def refresh_record(self, live: LiveSession) -> None:
        """Re-read the session row (counters, last compaction) after a write."""
        live.record = await self.rt.store.sessions.require(live.id)
        live.synced_state = live.record.engine

    async def rebind(self, live: LiveSession, record: SessionRecord, *, fresh_memory: bool) -> None:
        """The conversation continues under ``record`` (after a compaction, in place or rotated): same engine,
        its id, the prompt rebuilt — byte-identical unless ``fresh_memory`` (what is stored came from another
        process, an erasure or a new session among the possibilities) takes the memory snapshot again and it
        changed, or a pin or the persona did."""
        live.record = record
        live.synced_state = record.engine
        live.loop.session_id = record.id
        if fresh_memory:
            await live.memory.start_session(record.id)
        live.loop.system_prompt = self.system_prompt(live.key, live.memory, persona=live.persona, pins=live.pins)
        await self.reload(live)

    def system_prompt(self, key: SessionKey, memory: MemoryProvider, *, persona: str | None = None,
                      pins: tuple[PinRecord, ...] = ()) -> str:
        """The session's system prompt as configured; ``persona`` is the chat's own (``/persona``); its pinned
        rules come last."""
        mcp = self.rt.mcp
        untrusted = mcp is not None and mcp.any_allowed(key.platform, key.chat_refs)
        return build_system_prompt(self.rt.settings.gateway.bot_name, key, memory, persona=persona or self._persona,
                                   pins=pins_block(pins, pin_token_limit(self.rt)),
                                   tools_note=UNTRUSTED_NOTE if untrusted else "")

    async def refresh_pins(self, live: LiveSession) -> None:
        """Re-read the chat's pins (another worker, a command or the pin tool may have changed them); the
        system prompt is rebuilt only when they changed, so it stays byte-stable for prompt caching."""
        await self._update_pins(live, None)

    async def _update_pins(self, live: LiveSession, pins: tuple[PinRecord, ...] | None) -> None:
        if pins is None:
            pins = tuple(await self.rt.store.pins.list(live.key.platform, live.key.chat_key))
        if pins == live.pins:
            return
        live.pins = pins
        live.loop.system_prompt = self.system_prompt(live.key, live.memory, persona=live.persona, pins=pins)

    async def set_persona(self, live: LiveSession, persona: str | None) -> None:
        """Give ``live``'s chat its own persona (None: back to the configured one); stored, so it survives
        restarts, and in effect from the next model call."""
        if persona is None:
            await self.rt.store.chat_settings.take(_chat_scope(live.key), _PERSONA)
        else:
            await self.rt.store.chat_settings.put(_chat_scope(live.key), _PERSONA, persona)
        live.persona = persona
        live.loop.system_prompt = self.system_prompt(live.key, live.memory, persona=persona, pins=live.pins)

    async def set_model(self, live: LiveSession, name: str | None) -> None:
        """Make ``name`` (a configured model) ``live``'s chat's model, or the main one again (None); stored, so
        it survives restarts, and in effect from the next model call."""
        if name is None:
            await self.rt.store.chat_settings.take(_chat_scope(live.key), _MODEL)
        else:
            await self.rt.store.chat_settings.put(_chat_scope(live.key), _MODEL, name)
        live.models = live.loop.provider = self.rt.provider.for_chat(name)

    async def _models_for(self, key: SessionKey) -> ChatFailover:
        choice = await self.rt.store.chat_settings.get(_chat_scope(key), _MODEL)
        models = self.rt.provider.for_chat(choice)
        if choice and models.preferred.name != choice:
            log.warning("chat %s chose model %r, which is no longer configured; it uses %s", key, choice,
                        models.preferred.name)
        return models

    async def start_new(self, live: LiveSession, user_id: str | None, reason: str = END_NEW) -> LiveSession:
        """End ``live`` (history kept) and open a fresh session for the same chat (``/new``)."""
        old_id = live.id
        await self.rt.store.sessions.end(old_id, reason)
        live.engine.on_session_end(old_id)
        self._live.pop(live.key, None)
        fresh = await self.open(live.key, user_id)
        fresh.engine.on_session_reset()
        try:
            await fresh.memory.on_session_switch(old_id, fresh.id)
        except Exception:  # memory is best effort; a failing hook must not block /new
            log.warning("memory on_session_switch failed", exc_info=True)
        return fresh

    async def end(self, session_id: str, key: SessionKey, reason: str) -> None:
        """End a session from outside a turn (idle expiry); its warm objects are dropped."""
        await self.rt.store.sessions.end(session_id, reason)
        live = self._live.pop(key, None)
        if live is not None and live.id == session_id:
            live.engine.on_session_end(session_id)

    async def _build(self, key: SessionKey, record: SessionRecord, user_id: str | None,
                     messages: list[dict[str, Any]], pins: tuple[PinRecord, ...] | None = None) -> LiveSession:
        rt = self.rt
        engine = rt.new_engine()
        if key.is_group:
            engine.summary_template = "group"
        restore_engine_state(engine, record.engine)
        memory = rt.new_memory(key, None if key.is_group and not _per_user(key) else user_id)
        await memory.start_session(record.id)
        tools = ToolRegistry(memory.tools())
        tools.add_engine_tools(engine)
        if rt.mcp is not None:
            tools.add_source(partial(rt.mcp.tools_for, key.platform, key.chat_refs))
        persona = await rt.store.chat_settings.get(_chat_scope(key), _PERSONA)
        models = await self._models_for(key)
        if pins is None:
            pins = tuple(await rt.store.pins.list(key.platform, key.chat_key))
        prompt = self.system_prompt(key, memory, persona=persona, pins=pins)
        loop = AgentLoop(
            provider=models, engine=engine, system_prompt=prompt, session_id=record.id, tools=tools,
            memory=memory, max_tokens=rt.settings.llm.max_tokens, counter=rt.counter,
            config=LoopConfig(max_iterations=rt.settings.llm.max_iterations,
                              auto_compress=rt.settings.compression.enabled),
            temperature=rt.settings.llm.temperature, window=rt.window,
        )
        # Registered last (after the loop exists) so it follows the session id through rotations.
        tools.register(recall_tool(rt.store, lambda: loop.session_id, rerank=meaning_rerank()))
        tools.register(read_history_tool(rt.store, lambda: loop.session_id))
        live = LiveSession(key, record, engine, memory, loop, synced_state=record.engine, persona=persona,
                           pins=pins, models=models)
        if not key.is_group:
            tools.register(pin_tool(rt, key, lambda: self.refresh_pins(live)))
        engine.on_session_start(record.id, [{"role": "system", "content": prompt}, *messages])
        return live

    def _remember(self, key: SessionKey, live: LiveSession) -> None:
        self._live[key] = live
        self._live.move_to_end(key)
        while len(self._live) > self.capacity:
            self._live.popitem(last=False)


def _unchanged(live: LiveSession, record: SessionRecord) -> bool:
    """Whether ``record`` (just read) describes exactly the state ``live`` already holds."""
    return (record.message_count == len(live.messages) and record.compactions == live.record.compactions
            and record.engine == live.synced_state and live.watermark > 0)


def _one_compaction_since(before: SessionRecord, after: SessionRecord) -> bool:
    """Whether exactly one replacement of the active set happened between the two reads of a session, and it was
    a compaction (its number is the last compaction's; an erasure's replacement leaves that as it was)."""
    last = after.engine.last_compaction
    return after.compactions == before.compactions + 1 and last is not None and last.number == after.compactions


_PERSONA = "persona"
_MODEL = "model"


def _chat_scope(key: SessionKey) -> str:
    return f"chat:{key}"


def _per_user(key: SessionKey) -> bool:
    return ":user:" in key.chat_key
