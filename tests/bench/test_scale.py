"""``python -m bench.scale``: a small verified run on real PostgreSQL + Redis, and the missing-service error."""

from __future__ import annotations

import pytest

from bench import scale


def test_a_small_run_is_verified_and_printed(postgres_url: str, redis_url: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = scale.main(["--postgres", postgres_url, "--redis", redis_url, "--workers", "1", "--sessions", "2",
                       "--messages", "3"])
    out = capsys.readouterr().out
    assert code == 0
    assert "ok: order kept, none lost or doubled" in out
    assert out.splitlines()[1].split()[:2] == ["1", "6"]  # one worker, 2 x 3 messages


def test_without_services_it_says_what_it_needs(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("CONCORD_BENCH_POSTGRES_URL", "CONCORD_TEST_POSTGRES_URL", "CONCORD_BENCH_REDIS_URL",
                 "CONCORD_TEST_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    assert scale.main([]) == 2
    assert "needs PostgreSQL and Redis" in capsys.readouterr().err
