"""Crash points (`gateway.ops.faults`): armed by name from the environment, unknown names said and ignored."""

from __future__ import annotations

import pytest

from gateway.ops.faults import POINTS, parse_points


def test_points_are_armed_by_name_and_unknown_ones_are_said(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_points(" inbox-kept, request-stored ,nope") == {"inbox-kept", "request-stored"}
    assert "unknown crash point 'nope' ignored" in capsys.readouterr().err
    assert parse_points("") == set()
    assert {"inbox-kept", "request-stored", "command-applied", "answer-stored", "observed-queued",
            "ahead-summarized"} == POINTS
