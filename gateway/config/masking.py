"""Credentials out of what `concord config check` and configuration errors print.

A URL setting can carry a secret in three places: the userinfo (``postgres://user:password@host``, a token
as ``https://TOKEN@host``), the query (``?token=…``, ``&api_key=…``) and, for the Telegram Bot API, the path
(``…/bot<token>/``). `mask_url` hides all three and keeps the rest, which is what an operator needs to spot
a typo. A value that is not a string is described by its type only: echoing a dict that was meant to be a URL
would print whatever it holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

from agent.compression.redact import redact_secrets

__all__ = ["MASK", "describe_value", "mask_url", "mask_urls"]

MASK = "***"
_SECRET_PARAM = re.compile(r"(?i)token|key|secret|pass|pwd|auth|sig|credential|code")
_BOT_TOKEN_PATH = re.compile(r"/bot\d+:[^/?#]+")
_MAX_SHOWN = 200


def mask_url(url: str) -> str:
    """``url`` with the password of its userinfo, secret query values and a bot token in its path replaced
    by ``***``, and any other secret shape (a token as the user name) redacted."""
    scheme, sep, rest = redact_secrets(url).partition("://")
    if not sep:
        return scheme
    authority_end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    if "@" in authority:
        creds, _, host = authority.rpartition("@")
        user, colon, _ = creds.partition(":")
        if colon:
            authority = f"{user}:{MASK}@{host}"
    path, qmark, query = tail.partition("?")
    path = _BOT_TOKEN_PATH.sub(f"/bot{MASK}", path)
    if qmark:
        query, hash_mark, fragment = query.partition("#")
        pairs = [(k, MASK if _SECRET_PARAM.search(k) else v) for k, v in parse_qsl(query, keep_blank_values=True)]
        query = urlencode(pairs, safe="*") + hash_mark + fragment
    return f"{scheme}://{authority}{path}{qmark}{query}"


def mask_urls(data: Any) -> Any:
    """A copy of plain config data (``model_dump``) with every ``*url`` string masked."""
    if isinstance(data, Mapping):
        return {k: mask_url(v) if str(k).endswith("url") and isinstance(v, str) else mask_urls(v)
                for k, v in data.items()}
    if isinstance(data, list):
        return [mask_urls(item) for item in data]
    return data


def describe_value(key: str, value: Any, *, secret: bool) -> str:
    """How a configuration error shows the value of ``key``: secrets hidden, URLs masked, non-strings by type."""
    if secret and not key.endswith("url"):
        return f"'{MASK}'"
    if not isinstance(value, str):
        plain = isinstance(value, bool | int | float) or value is None
        return repr(value) if plain and not secret else f"<{type(value).__name__}>"
    shown = mask_url(value) if key.endswith("url") else redact_secrets(value)
    return repr(shown if len(shown) <= _MAX_SHOWN else shown[:_MAX_SHOWN] + "…")
