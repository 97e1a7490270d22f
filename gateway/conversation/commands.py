"""Chat commands (R-G5): running one — who may, which handler answers — and the texts of refusals, /stop and /help.

``/compress [focus]`` (admin), ``/new [--unpin]``, ``/status``, ``/stats`` (admin), ``/usage``,
``/approve CODE`` (admin), ``/model [NAME | reset]`` (setting it: admin), ``/forget me`` (someone else:
admin), ``/stop`` (the sender of the running
answer, or an admin; handled by the router, outside the queue, and carried to the worker running the turn by
`gateway.intake.stops`), ``/persona [TEXT | reset]`` (admin), ``/pin TEXT``, ``/pins``, ``/unpin N`` (pin and
unpin: admins in groups), ``/whoami``, ``/help``. Commands work the same on every platform;
adapters recognise them (``adapters.base.parse_command``, which drops ``/cmd@otherbot``). Texts here are short on purpose: chat is not a log, and a summary never appears in it.

The command table, parsing and permissions are in `gateway.conversation.command_rules`; the handlers by group
in `gateway.conversation.status_commands` (figures) and `gateway.conversation.session_commands` (the session
and the chat's settings), `forget` and `model_command`.
"""

from __future__ import annotations

from adapters.base import Inbound
from gateway.conversation.command_rules import (
    ADMIN_COMMANDS,
    COMMANDS,
    CONSOLE_COMMANDS,
    Command,
    CommandContext,
    is_operator,
)
from gateway.conversation.forget import forget_command
from gateway.conversation.model_command import model_command
from gateway.conversation.session import LiveSession
from gateway.conversation.session_commands import (
    approve_command,
    compress_command,
    new_command,
    persona_command,
    pins_command,
    remember_command,
)
from gateway.conversation.status_commands import format_status, stats_command, status_figures, usage_command
from gateway.intake.busy import RunningTurn, StopOutcome
from gateway.intake.keys import SessionKey
from gateway.intake.stops import StopRelay

__all__ = [
    "INTERRUPTED_COMMAND",
    "NOTHING_TO_STOP",
    "NOT_YOURS",
    "OPERATOR_REFUSAL",
    "REFUSAL",
    "format_help",
    "run_command",
    "stop_command",
    "whoami",
]

INTERRUPTED_COMMAND = ("⚠️ /{name} was interrupted before it could answer (a restart or a storage outage) and "
                       "may or may not have taken effect; check before sending it again.")
REFUSAL = "Sorry, /{name} is for admins only."
OPERATOR_REFUSAL = "Sorry, /stats is for the bot's operators (gateway.admins) only."


def format_help(admin: bool, *, console: bool = False) -> str:
    """The /help reply; admin-only commands are marked for non-admins; the console adds its own."""
    lines = ["Commands:"]
    for name, text in COMMANDS.items():
        suffix = " (admins only)" if name in ADMIN_COMMANDS and not admin else ""
        lines.append(f"  {text}{suffix}")
    if console:
        lines += [f"  {text}" for text in CONSOLE_COMMANDS.values()]
    return "\n".join(lines)


async def run_command(command: Command, ctx: CommandContext) -> tuple[str, LiveSession]:
    """Run ``command``; return the reply and the session the chat is now on (``/new`` changes it)."""
    if command.needs_admin(ctx.live.key.is_group) and not ctx.admin:
        return REFUSAL.format(name=command.name), ctx.live
    if command.name == "compress":
        return await compress_command(ctx, command.args or None), ctx.live
    if command.name == "new":
        return await new_command(ctx, command.args)
    if command.name in ("pin", "pins", "unpin"):
        return await pins_command(ctx, command), ctx.live
    if command.name == "status":
        return format_status(status_figures(ctx.sessions, ctx.live)), ctx.live
    if command.name == "stats":
        if not is_operator(ctx.inbound, ctx.sessions.rt.settings.gateway.admins):
            return OPERATOR_REFUSAL, ctx.live
        return await stats_command(ctx), ctx.live
    if command.name == "usage":
        return await usage_command(ctx), ctx.live
    if command.name == "approve":
        return await approve_command(ctx, command.args), ctx.live
    if command.name == "persona":
        return await persona_command(ctx, command.args), ctx.live
    if command.name == "model":
        return await model_command(ctx.sessions, ctx.live, command.args, admin=ctx.admin), ctx.live
    if command.name == "remember":
        return await remember_command(ctx, command.args), ctx.live
    if command.name == "whoami":
        return whoami(ctx.inbound), ctx.live
    if command.name == "forget":
        return await forget_command(ctx.sessions, ctx.live, ctx.inbound, command.args, admin=ctx.admin,
                                    erased=ctx.erased), ctx.live
    if command.name == "help":
        return format_help(ctx.admin, console=ctx.inbound.platform == "console"), ctx.live
    return f"Unknown command /{command.name}. Try /help.", ctx.live


def whoami(inbound: Inbound) -> str:
    """/whoami: the sender's ``platform:id``, ready to paste into ``gateway.admins`` or an access list."""
    me = f"{inbound.platform}:{inbound.user_id}"
    return (f"You are {me}. That is how gateway.admins and the access lists (gateway.allow_users, deny_users) "
            f"name you, e.g. CONCORD_GATEWAY__ADMINS={me}")


NOTHING_TO_STOP = "Nothing is running here to stop."
NOT_YOURS = "Only {name}, who asked, or an admin can stop this answer."
STOP_UNREACHABLE = "⚠️ I could not reach the answer being written to stop it; try /stop again in a moment."


async def stop_command(running: RunningTurn | None, relay: StopRelay, key: SessionKey, inbound: Inbound,
                       admin: bool) -> str | None:
    """/stop: cancel the session's running turn (its sender's or an admin's) — here, or through ``relay`` on the
    worker running it; None when it was stopped (the turn itself then says so, under what it had written)."""
    if running is not None:
        outcome, name = running.request_stop(inbound.user_id, admin), running.user_name
    else:
        outcome, name = await relay.forward(str(key), inbound.user_id, admin)
    return {StopOutcome.STOPPED: None, StopOutcome.NOT_YOURS: NOT_YOURS.format(name=name),
            StopOutcome.NOTHING: NOTHING_TO_STOP, StopOutcome.UNREACHABLE: STOP_UNREACHABLE}[outcome]
