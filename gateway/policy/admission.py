"""Admission: the access policy applied to one inbound message — let it through, or send the refusal due.

Refusals are quiet in groups; in a DM they are one short line, or, where ``gateway.dm_policy`` is
``pairing``, the sender's pairing code for an admin to approve.
"""

from __future__ import annotations

import logging

from adapters.base import Adapter, Inbound
from gateway.policy.access import AccessPolicy, Verdict, user_ref
from gateway.policy.pairing import Pairing

__all__ = ["PAIRING_TEXT", "REFUSED_DM", "admitted"]

log = logging.getLogger(__name__)

REFUSED_DM = "Sorry, this bot is not available to you."
PAIRING_TEXT = ("This bot answers people an admin approved. Your pairing code is {code}: "
                "ask an admin to send /approve {code}.")


async def admitted(access: AccessPolicy, pairing: Pairing | None, inbound: Inbound, adapter: Adapter, admin: bool,
                   *, quiet: bool = False) -> bool:
    """Apply the access policy: True to go on; otherwise the refusal (if any is due, and not ``quiet``)
    was sent."""
    approved = (pairing is not None and inbound.chat_type == "dm" and not admin
                and await pairing.is_approved(user_ref(inbound)))
    verdict = access.decide(inbound, admin=admin, approved=approved)
    if verdict is Verdict.ALLOW:
        return True
    log.info("access: %s from %s in %s:%s (%s)", verdict, user_ref(inbound), inbound.platform, inbound.chat_id,
             inbound.chat_type)
    if inbound.chat_type == "dm" and not quiet:
        if verdict is Verdict.PAIR and pairing is not None:
            await adapter.send(inbound, PAIRING_TEXT.format(code=await pairing.code_for(user_ref(inbound))))
        elif verdict is Verdict.REFUSE:
            await adapter.send(inbound, REFUSED_DM)
    return False
