"""A fake Discord (REST API + gateway websocket) on 127.0.0.1 that the real discord.py client talks to.

One aiohttp app serves ``/api/v10/...`` and the gateway websocket at ``/``: HELLO, heartbeat ACKs,
IDENTIFY → READY → GUILD_CREATE (one guild with a text channel, a thread and two roles; more with
:meth:`FakeDiscord.add_guild`), then whatever the test dispatches; RESUME of a session it started → RESUMED,
the connection then serving that session (``resumes`` records each). It is shard-aware as Discord is: several
gateway connections at once, each IDENTIFY with ``shard: [id, count]`` (none: the one shard of an unsharded
bot), a READY per connection naming only that shard's guilds, and every guild event (GUILD_CREATE,
MESSAGE_CREATE, INTERACTION_CREATE) sent only on the connection of shard ``(guild_id >> 22) % count``, DMs
only on shard 0; ``GET /gateway/bot`` recommends ``shard_count`` shards. Each connection records what it was
sent (:attr:`FakeDiscord.connections`). For slash commands it takes the global command sync (``PUT /applications/{id}/commands``),
dispatches INTERACTION_CREATE (:meth:`FakeDiscord.inject_interaction`) and records the interaction callback,
the edit of the original response and followups (``interaction_replies``). Like real Discord it blanks guild message content when IDENTIFY lacks the
message-content intent (unless the bot is mentioned) and refuses messages over 2,000 characters.
Use :meth:`FakeDiscord.patch_client_urls` (or the ``fake_discord`` fixture, which does it) so discord.py
connects here; a ``concord run`` process started with :meth:`FakeDiscord.process_env` does the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import discord
import yarl
from aiohttp import WSMsgType, web

from tests.fakes.loopback import serve_on_loopback

BOT_ID = 1000
GUILD_ID = 2000
ADMIN_ROLE_ID = 2100
BOT_ROLE_ID = 2200  # the role Discord creates for the bot (managed, tagged with the bot's id)
CHANNEL_ID = 3000
THREAD_ID = 3100
DM_CHANNEL_ID = 4000
# For a second guild (FakeDiscord.add_guild): its id puts it on shard 1 of 2, where GUILD_ID is on shard 0.
OTHER_GUILD_ID = (1 << 22) | 2001
OTHER_CHANNEL_ID = 3001
MESSAGE_CONTENT_INTENT = 1 << 15
TEXT_LIMIT = 2000
REPO = Path(__file__).resolve().parents[2]
# Holds the sitecustomize that points a worker process's discord.py at this fake (see process_env).
REDIRECT_DIR = Path(__file__).resolve().with_name("discord_redirect")


@dataclass
class SentMessage:
    """One message the bot posted."""

    message_id: int
    channel_id: int
    content: str
    reference_id: int | None
    allowed_mentions: dict[str, Any] | None
    at: float


@dataclass
class MessageEdit:
    """One edit of a message the bot posted (PATCH /channels/{channel}/messages/{message})."""

    message_id: int
    channel_id: int
    content: str
    at: float


@dataclass
class InteractionReply:
    """One message the bot posted through an interaction's webhook: the original response or a followup."""

    kind: str  # "original" (PATCH …/messages/@original) or "followup" (POST /webhooks/{app}/{token})
    token: str
    content: str
    allowed_mentions: dict[str, Any] | None
    at: float


@dataclass(frozen=True)
class FakeGuild:
    """A guild the bot is in: one text channel, optionally a thread under it."""

    id: int
    channel_id: int
    name: str = "Test guild"
    thread_id: int | None = None


@dataclass
class GatewayConnection:
    """One gateway websocket: what it identified as and the dispatches it was sent (event, data)."""

    ws: web.WebSocketResponse
    identify: dict[str, Any] | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    closed: bool = False
    seq: int = 0

    @property
    def shard(self) -> tuple[int, int]:
        """(shard id, shard count) from IDENTIFY; (0, 1) for an unsharded client."""
        shard_id, count = (self.identify or {}).get("shard") or (0, 1)
        return int(shard_id), int(count)

    def serves(self, guild_id: int | None) -> bool:
        """Whether Discord would send this guild's events here (``None``: a DM, always shard 0)."""
        shard_id, count = self.shard
        return shard_id == (0 if guild_id is None else shard_of(guild_id, count))

    def message_ids(self) -> list[str]:
        """Ids of the MESSAGE_CREATE events sent on this connection, in order."""
        return [str(data.get("id")) for event, data in self.events if event == "MESSAGE_CREATE"]

    async def send(self, event: str, data: dict[str, Any]) -> None:
        """One op-0 dispatch; on a connection that has just gone it is lost, as on Discord."""
        self.seq += 1  # sequence numbers are per session, as discord.py expects when resuming
        try:
            await self.ws.send_str(json.dumps({"op": 0, "t": event, "s": self.seq, "d": data}))
        except ConnectionError:
            self.closed = True
            return
        self.events.append((event, data))


def shard_of(guild_id: int, shard_count: int) -> int:
    """The shard Discord sends a guild's events to."""
    return (guild_id >> 22) % shard_count


def _event_guild(event: str, data: dict[str, Any]) -> int | None:
    """The guild an event belongs to (``None``: a DM or no guild); unreadable ids count as none."""
    raw = data.get("id") if event.startswith("GUILD_") else data.get("guild_id")
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


@dataclass
class _Failure:
    times: int
    retry_after: float
    via: bool
    is_global: bool


def _user(user_id: int, name: str, bot: bool = False) -> dict[str, Any]:
    return {"id": str(user_id), "username": name, "global_name": name, "discriminator": "0",
            "avatar": None, "bot": bot}


@dataclass
class FakeDiscord:
    """The fake; ``await start()`` / ``await stop()``, or use the ``fake_discord`` fixture."""

    token: str = "fake-discord-token"
    sent_messages: list[SentMessage] = field(default_factory=list)
    typing_calls: list[tuple[int, float]] = field(default_factory=list)
    identify: dict[str, Any] | None = None
    requests: list[str] = field(default_factory=list)
    refused_channels: dict[int, int] = field(default_factory=dict)
    synced_commands: list[dict[str, Any]] | None = None
    interaction_callbacks: list[dict[str, Any]] = field(default_factory=list)
    interaction_replies: list[InteractionReply] = field(default_factory=list)
    edits: list[MessageEdit] = field(default_factory=list)
    # Messages a moderator deleted: editing them answers 404 Unknown Message.
    deleted_messages: set[int] = field(default_factory=set)
    command_sync_status: int = 200
    interaction_callback_status: int = 200
    # The shard count ``GET /gateway/bot`` recommends (what an AutoShardedClient without one runs).
    shard_count: int = 1
    guilds: list[FakeGuild] = field(
        default_factory=lambda: [FakeGuild(GUILD_ID, CHANNEL_ID, thread_id=THREAD_ID)])
    port: int = 0

    def __post_init__(self) -> None:
        # Every gateway connection, closed ones included (a test can see where each event went).
        self.connections: list[GatewayConnection] = []
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self._next_id = 10_000
        self._failures: dict[str, _Failure] = {}
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind a free loopback port and serve REST and the gateway."""
        app = web.Application()
        app.router.add_get("/", self._gateway)
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_get("/api/v10/gateway/bot", self._gateway_bot)
        app.router.add_post("/api/v10/channels/{channel_id}/messages", self._create_message)
        app.router.add_patch("/api/v10/channels/{channel_id}/messages/{message_id}", self._edit_message)
        app.router.add_post("/api/v10/channels/{channel_id}/typing", self._typing)
        app.router.add_put("/api/v10/applications/{app_id}/commands", self._sync_commands)
        app.router.add_post("/api/v10/interactions/{interaction_id}/{token}/callback", self._interaction_callback)
        app.router.add_patch("/api/v10/webhooks/{app_id}/{token}/messages/@original", self._edit_original)
        app.router.add_post("/api/v10/webhooks/{app_id}/{token}", self._followup)
        # A client that got its close frame while its read was in flight keeps the handler open: aiohttp's
        # default would wait a minute for it at cleanup (seen as a 60 s teardown), a fake has nothing to finish.
        self._runner, self.port = await serve_on_loopback(app, shutdown_timeout=1.0)

    async def stop(self) -> None:
        """Close gateway connections and stop serving."""
        for connection in self.open_connections():
            await connection.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def patch_client_urls(self, monkeypatch: Any) -> None:
        """Point discord.py's process-wide REST base and gateway URL at this fake (per test)."""
        monkeypatch.setattr(discord.http.Route, "BASE", f"http://127.0.0.1:{self.port}/api/v10")
        monkeypatch.setattr(discord.gateway.DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(f"ws://127.0.0.1:{self.port}/"))

    def process_env(self) -> dict[str, str]:
        """Environment for a ``concord run`` process of this checkout to use this fake: the bot token, and
        ``discord_redirect/sitecustomize.py`` on PYTHONPATH, which points discord.py here at start-up."""
        return {"CONCORD_DISCORD__TOKEN": self.token, "FAKE_DISCORD_URL": f"http://127.0.0.1:{self.port}",
                "PYTHONPATH": os.pathsep.join([str(REDIRECT_DIR), str(REPO)])}

    # -- scripting -------------------------------------------------------------------------------
    def add_guild(self, guild_id: int, channel_id: int, name: str = "Another guild") -> FakeGuild:
        """Put the bot in one more guild (with one text channel); call it before the clients connect."""
        guild = FakeGuild(guild_id, channel_id, name)
        self.guilds.append(guild)
        return guild

    def open_connections(self) -> list[GatewayConnection]:
        """The gateway connections still open, identified or not."""
        return [c for c in self.connections if not c.closed]

    def shards_of(self, message_id: str) -> list[tuple[int, int]]:
        """The (shard id, count) of every connection the MESSAGE_CREATE ``message_id`` was sent on."""
        return [c.shard for c in self.connections if message_id in c.message_ids()]

    def refuse_channel(self, channel_id: int, status: int = 403) -> None:
        """Answer every message posted to ``channel_id`` with ``status`` (403 Forbidden, 400, 404 …)."""
        self.refused_channels[channel_id] = status

    def fail_next(self, route: str, times: int = 1, retry_after: float = 0.3, via: bool = True,
                  is_global: bool = False) -> None:
        """Answer the next ``times`` calls of ``route`` ("messages", "typing" or "followup") with 429.

        With ``via`` (what Discord's edge adds) discord.py waits and retries; without it discord.py treats
        the 429 as a Cloudflare ban and raises at once.
        """
        self._failures[route] = _Failure(times, retry_after, via, is_global)

    async def send_raw(self, frame: str | bytes) -> None:
        """Send one frame exactly as given (malformed gateway traffic; bytes go as a binary frame, which the
        client inflates as part of its compressed stream) to every connected client."""
        for connection in self.open_connections():
            if isinstance(frame, bytes):
                await connection.ws.send_bytes(frame)
            else:
                await connection.ws.send_str(frame)

    async def close_connections(self, code: int) -> None:
        """Close every gateway connection with ``code`` (a close code the client may or may not recover from)."""
        for connection in self.open_connections():
            await connection.ws.close(code=code)

    @property
    def identify_count(self) -> int:
        """How many IDENTIFY payloads clients sent (a reconnect from login sends another)."""
        return len(self.identifies)

    async def dispatch(self, event: str, data: dict[str, Any]) -> int:
        """Send one op-0 dispatch where Discord would: a guild's event on every identified connection of its
        shard, any other (a DM) on shard 0's; how many connections it went to (0: that shard is down)."""
        guild_id = _event_guild(event, data)
        targets = [c for c in self.open_connections() if c.identify is not None and c.serves(guild_id)]
        for connection in targets:
            await connection.send(event, data)
        return len(targets)

    def _guild_of(self, channel_id: int) -> int | None:
        """The guild a channel is in: ``None`` for the DM channel; the first guild for channels it does not know."""
        if channel_id == DM_CHANNEL_ID:
            return None
        return next((g.id for g in self.guilds if channel_id in (g.channel_id, g.thread_id)), GUILD_ID)

    def make_message(
        self,
        content: str,
        *,
        channel_id: int = CHANNEL_ID,
        user_id: int = 42,
        user_name: str = "alice",
        is_bot: bool = False,
        role_ids: tuple[int, ...] = (),
        reply_to_bot: bool = False,
        attachments: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE payload; ``<@1000>`` in the content fills ``mentions`` like Discord does."""
        self._next_id += 1
        author = _user(user_id, user_name, bot=is_bot)
        message: dict[str, Any] = {
            "id": str(self._next_id), "channel_id": str(channel_id), "author": author, "content": content,
            "timestamp": "2025-01-01T00:00:00+00:00", "edited_timestamp": None, "tts": False,
            "mention_everyone": False, "mentions": [_user(BOT_ID, "testbot", bot=True)]
            if f"<@{BOT_ID}>" in content or f"<@!{BOT_ID}>" in content else [],
            "mention_roles": [str(r) for r in (ADMIN_ROLE_ID, BOT_ROLE_ID) if f"<@&{r}>" in content],
            "attachments": attachments or [], "embeds": [], "pinned": False, "type": 0,
        }
        guild_id = self._guild_of(channel_id)
        if guild_id is not None:
            message["guild_id"] = str(guild_id)
            message["member"] = {"roles": [str(r) for r in role_ids], "joined_at": "2024-01-01T00:00:00+00:00",
                                 "deaf": False, "mute": False, "nick": None, "flags": 0}
        if reply_to_bot:
            earlier = {**self.make_message("an earlier answer", channel_id=channel_id), "author":
                       _user(BOT_ID, "testbot", bot=True)}
            message["type"] = 19
            message["message_reference"] = {"message_id": earlier["id"], "channel_id": str(channel_id)}
            message["referenced_message"] = earlier
        return message

    async def inject_message(self, content: str, **kwargs: Any) -> dict[str, Any]:
        """Dispatch MESSAGE_CREATE for :meth:`make_message` (content blanked without the intent)."""
        message = self.make_message(content, **kwargs)
        intents = int((self.identify or {}).get("intents", 0))
        if "guild_id" in message and not intents & MESSAGE_CONTENT_INTENT and not message["mentions"]:
            message = {**message, "content": ""}
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    def make_interaction(
        self,
        name: str,
        options: dict[str, str] | None = None,
        *,
        channel_id: int = CHANNEL_ID,
        user_id: int = 42,
        user_name: str = "alice",
        role_ids: tuple[int, ...] = (),
    ) -> dict[str, Any]:
        """An INTERACTION_CREATE payload for the slash command ``/name`` with string ``options``."""
        self._next_id += 1
        command_id = next((c["id"] for c in self.synced_commands or () if c["name"] == name), "0")
        interaction: dict[str, Any] = {
            "id": str(self._next_id), "application_id": str(BOT_ID), "type": 2, "token": f"itoken-{self._next_id}",
            "version": 1, "attachment_size_limit": 8 * 1024 * 1024, "locale": "en-US", "app_permissions": "0",
            "data": {"id": command_id, "name": name, "type": 1,
                     "options": [{"name": k, "type": 3, "value": v} for k, v in (options or {}).items()]},
            "channel_id": str(channel_id),
        }
        guild_id = self._guild_of(channel_id)
        if guild_id is None:
            user = _user(user_id, user_name)
            interaction.update(context=1, user=user,
                               channel={"id": str(channel_id), "type": 1, "recipients": [user]})
        else:
            kind = 11 if channel_id == THREAD_ID else 0
            interaction.update(context=0, guild_id=str(guild_id), guild_locale="en-US",
                               channel={"id": str(channel_id), "type": kind, "guild_id": str(guild_id)},
                               member={"user": _user(user_id, user_name), "roles": [str(r) for r in role_ids],
                                       "joined_at": "2024-01-01T00:00:00+00:00", "deaf": False, "mute": False,
                                       "flags": 0, "nick": None, "permissions": "0"})
        return interaction

    async def inject_interaction(self, name: str, options: dict[str, str] | None = None,
                                 **kwargs: Any) -> dict[str, Any]:
        """Dispatch INTERACTION_CREATE for :meth:`make_interaction`; returns the payload."""
        interaction = self.make_interaction(name, options, **kwargs)
        await self.dispatch("INTERACTION_CREATE", interaction)
        return interaction

    async def wait_for_interaction_replies(self, count: int, within_s: float = 10.0) -> list[InteractionReply]:
        """Wait until the bot has posted at least ``count`` interaction messages."""
        deadline = time.monotonic() + within_s
        while len(self.interaction_replies) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bot sent {len(self.interaction_replies)} of {count} interaction messages")
            await asyncio.sleep(0.02)
        return list(self.interaction_replies)

    async def wait_for_messages(self, count: int, within_s: float = 10.0) -> list[SentMessage]:
        """Wait until the bot has posted at least ``count`` messages."""
        deadline = time.monotonic() + within_s
        while len(self.sent_messages) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bot sent {len(self.sent_messages)} of {count} messages")
            await asyncio.sleep(0.02)
        return list(self.sent_messages)

    # -- REST ------------------------------------------------------------------------------------
    def _json(self, request: web.Request, data: Any, status: int = 200, headers: dict[str, str] | None = None
              ) -> web.Response:
        # discord.py compares Content-Type exactly; aiohttp's json_response adds a charset.
        self.requests.append(f"{request.method} {request.path}")
        return web.Response(status=status, body=json.dumps(data).encode(),
                            headers={"Content-Type": "application/json", **(headers or {})})

    def _rate_limited(self, request: web.Request, route: str) -> web.Response | None:
        failure = self._failures.get(route)
        if failure is None or failure.times <= 0:
            return None
        failure.times -= 1
        body = {"message": "You are being rate limited.", "retry_after": failure.retry_after,
                "global": failure.is_global}
        return self._json(request, body, status=429, headers={"Via": "1.1 google"} if failure.via else {})

    async def _me(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return self._json(request, {"message": "401: Unauthorized", "code": 0}, status=401)
        return self._json(request, _user(BOT_ID, "testbot", bot=True))

    async def _application(self, request: web.Request) -> web.Response:
        return self._json(request, {
            "id": str(BOT_ID), "name": "testbot", "description": "", "icon": None, "bot_public": True,
            "bot_require_code_grant": False, "owner": _user(1, "owner"), "verify_key": "00", "flags": 0})

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        return self._json(request, {
            "url": f"ws://127.0.0.1:{self.port}/", "shards": self.shard_count,
            "session_start_limit": {"total": 1000, "remaining": 1000, "reset_after": 0, "max_concurrency": 1}})

    async def _create_message(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bot {self.token}":
            return self._json(request, {"message": "401: Unauthorized", "code": 0}, status=401)
        limited = self._rate_limited(request, "messages")
        if limited is not None:
            return limited
        channel_id = int(request.match_info["channel_id"])
        if channel_id in self.refused_channels:
            status = self.refused_channels[channel_id]
            return self._json(request, {"message": "Missing Permissions", "code": 50013}, status=status)
        body = await request.json()
        content = str(body.get("content") or "")
        if not content.strip() or len(content) > TEXT_LIMIT:
            return self._json(request, {"message": "Invalid Form Body", "code": 50035}, status=400)
        reference = body.get("message_reference") or {}
        self._next_id += 1
        message_id = self._next_id
        self.sent_messages.append(SentMessage(
            message_id, channel_id, content, int(reference["message_id"]) if reference else None,
            body.get("allowed_mentions"), time.monotonic()))
        message = self.make_message(content, channel_id=channel_id)
        message.update({"id": str(message_id), "author": _user(BOT_ID, "testbot", bot=True), "mentions": []})
        return self._json(request, message)

    async def _edit_message(self, request: web.Request) -> web.Response:
        limited = self._rate_limited(request, "edits")
        if limited is not None:
            return limited
        message_id = int(request.match_info["message_id"])
        sent = next((m for m in self.sent_messages if m.message_id == message_id), None)
        if sent is None or message_id in self.deleted_messages:
            return self._json(request, {"message": "Unknown Message", "code": 10008}, status=404)
        content = str((await request.json()).get("content") or "")
        if not content.strip() or len(content) > TEXT_LIMIT:
            return self._json(request, {"message": "Invalid Form Body", "code": 50035}, status=400)
        sent.content = content
        self.edits.append(MessageEdit(message_id, sent.channel_id, content, time.monotonic()))
        message = self.make_message(content, channel_id=sent.channel_id)
        message.update({"id": str(message_id), "author": _user(BOT_ID, "testbot", bot=True), "mentions": [],
                        "edited_timestamp": "2025-01-01T00:00:01+00:00"})
        return self._json(request, message)

    async def _typing(self, request: web.Request) -> web.Response:
        limited = self._rate_limited(request, "typing")
        if limited is not None:
            return limited
        self.typing_calls.append((int(request.match_info["channel_id"]), time.monotonic()))
        self.requests.append(f"{request.method} {request.path}")
        return web.Response(status=204)

    async def _sync_commands(self, request: web.Request) -> web.Response:
        if self.command_sync_status != 200:
            return self._json(request, {"message": "Missing Access", "code": 50001},
                              status=self.command_sync_status)
        commands = await request.json()
        self.synced_commands = [
            {"type": 1, "options": [], **command, "id": str(5000 + index), "application_id": str(BOT_ID),
             "version": "1"}
            for index, command in enumerate(commands)]
        return self._json(request, self.synced_commands)

    async def _interaction_callback(self, request: web.Request) -> web.Response:
        if self.interaction_callback_status != 200:
            return self._json(request, {"message": "Unknown interaction", "code": 10062},
                              status=self.interaction_callback_status)
        body = await request.json()
        interaction_id = request.match_info["interaction_id"]
        self.interaction_callbacks.append({"id": interaction_id, "token": request.match_info["token"], **body})
        return self._json(request, {
            "interaction": {"id": interaction_id, "type": 2, "response_message_loading": body.get("type") == 5,
                            "response_message_ephemeral": False},
            "resource": {"type": body.get("type")}})

    async def _edit_original(self, request: web.Request) -> web.Response:
        return await self._interaction_message(request, "original")

    async def _followup(self, request: web.Request) -> web.Response:
        limited = self._rate_limited(request, "followup")
        return limited if limited is not None else await self._interaction_message(request, "followup")

    async def _interaction_message(self, request: web.Request, kind: str) -> web.Response:
        token = request.match_info["token"]
        if not any(c["token"] == token for c in self.interaction_callbacks):
            return self._json(request, {"message": "Unknown Webhook", "code": 10015}, status=404)
        body = await request.json()
        content = str(body.get("content") or "")
        if not content.strip() or len(content) > TEXT_LIMIT:
            return self._json(request, {"message": "Invalid Form Body", "code": 50035}, status=400)
        self.interaction_replies.append(
            InteractionReply(kind, token, content, body.get("allowed_mentions"), time.monotonic()))
        self._next_id += 1
        message = self.make_message(content)
        message.update({"id": str(self._next_id), "author": _user(BOT_ID, "testbot", bot=True), "mentions": [],
                        "webhook_id": str(BOT_ID), "application_id": str(BOT_ID)})
        return self._json(request, message)

    # -- gateway ---------------------------------------------------------------------------------
    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        connection = GatewayConnection(ws)
        self.connections.append(connection)
        await ws.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": 1000}}))
        try:
            async for frame in ws:
                if frame.type != WSMsgType.TEXT:
                    continue
                payload = json.loads(frame.data)
                if payload["op"] == 1:
                    await ws.send_str(json.dumps({"op": 11}))
                elif payload["op"] == 2:
                    connection.identify = self.identify = payload["d"]
                    self.identifies.append(payload["d"])
                    await self._ready_sequence(connection)
                elif payload["op"] == 6:
                    await self._resume(connection, payload["d"])
        finally:
            connection.closed = True
        return ws

    async def _resume(self, connection: GatewayConnection, resume: dict[str, Any]) -> None:
        """RESUME of a session this fake started (READY named it ``fake-session-N``): RESUMED, and the
        connection carries on that session's sequence; an unknown session is invalidated, as Discord does."""
        self.resumes.append(resume)
        number = str(resume.get("session_id", "")).removeprefix("fake-session-")
        if not number.isdigit() or not 0 < int(number) <= len(self.identifies):
            await connection.ws.send_str(json.dumps({"op": 9, "d": False}))
            return
        connection.identify = self.identifies[int(number) - 1]
        connection.seq = int(resume.get("seq") or 0)
        await connection.send("RESUMED", {})

    async def _ready_sequence(self, connection: GatewayConnection) -> None:
        """READY naming this shard's guilds (unavailable), then a GUILD_CREATE for each."""
        mine = [g for g in self.guilds if connection.serves(g.id)]
        identify = connection.identify or {}
        await connection.send("READY", {
            "v": 10, "user": _user(BOT_ID, "testbot", bot=True), "session_id": f"fake-session-{len(self.identifies)}",
            "resume_gateway_url": f"ws://127.0.0.1:{self.port}/",
            "guilds": [{"id": str(g.id), "unavailable": True} for g in mine],
            "application": {"id": str(BOT_ID), "flags": 0}, "private_channels": [], "relationships": [],
            **({"shard": identify["shard"]} if "shard" in identify else {})})
        for guild in mine:
            await connection.send("GUILD_CREATE", _guild(guild))


def _guild(guild: FakeGuild) -> dict[str, Any]:
    role = {"color": 0, "hoist": False, "managed": False, "mentionable": False, "permissions": "0", "position": 0}
    thread = {"id": str(guild.thread_id), "type": 11, "name": "a thread", "parent_id": str(guild.channel_id),
              "guild_id": str(guild.id), "owner_id": "42", "flags": 0, "message_count": 0, "member_count": 1,
              "thread_metadata": {"archived": False, "auto_archive_duration": 1440,
                                  "archive_timestamp": "2025-01-01T00:00:00+00:00", "locked": False}}
    return {
        "id": str(guild.id), "name": guild.name, "owner_id": "1", "icon": None, "features": [],
        "member_count": 3, "large": False, "unavailable": False, "emojis": [], "stickers": [],
        "roles": [{**role, "id": str(guild.id), "name": "@everyone"},
                  {**role, "id": str(ADMIN_ROLE_ID), "name": "Admins", "position": 1},
                  {**role, "id": str(BOT_ROLE_ID), "name": "testbot", "position": 2, "managed": True,
                   "tags": {"bot_id": str(BOT_ID)}}],
        "channels": [{"id": str(guild.channel_id), "type": 0, "name": "general", "position": 0,
                      "permission_overwrites": [], "guild_id": str(guild.id)}],
        "threads": [thread] if guild.thread_id is not None else [],
        "members": [{"user": _user(BOT_ID, "testbot", bot=True), "roles": [], "joined_at": "2024-01-01T00:00:00+00:00",
                     "deaf": False, "mute": False, "flags": 0}],
        "voice_states": [], "presences": [],
    }
