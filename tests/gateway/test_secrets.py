"""Secrets never reach error texts: configuration errors about URLs that carry a password."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, load_settings


@pytest.mark.parametrize(("section", "key", "url"), [
    ("storage", "database_url", "postgres://bot:hunter2@db.internal:5432/concord"),  # the common wrong scheme
    ("redis", "url", "http://:hunter2@cache.internal:6379/0"),
])
def test_a_rejected_url_is_reported_without_its_password(section: str, key: str, url: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(**{section: {key: url}})
    message = str(info.value)
    assert f"{section}.{key}" in message
    assert "hunter2" not in message
