"""``python -m bench``: discovery of benchmark modules, failure isolation, and a smoke run of bench.tokens."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import bench
from bench import __main__ as runner
from bench import tokens as bench_tokens

_FAKES = {
    "zz_ok": "def main():\n    print('zz_ok ran')\n",
    "zz_async": "async def main():\n    return 0\n",
    "zz_fails": "def main():\n    return 1\n",
    "zz_raises": "def main():\n    raise RuntimeError('kaput')\n",
    "zz_broken": "raise ImportError('missing dependency')\n",
    "zz_helper": "VALUE = 1\n",
    "zz_argv": "import sys\n\ndef main():\n    return 0 if sys.argv[1:] == [] else 2\n",
}


@pytest.fixture
def fake_benches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, source in _FAKES.items():
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.setattr(bench, "__path__", [*bench.__path__, str(tmp_path)])
    yield
    for name in _FAKES:
        sys.modules.pop(f"bench.{name}", None)


def test_discovery_finds_modules_with_main_and_reports_broken_ones(fake_benches: None) -> None:
    runnable, errors = runner.discover()
    names = [name for name, _ in runnable]
    assert {"corpus", "tokens", "zz_ok", "zz_async", "zz_fails", "zz_raises", "zz_argv"} <= set(names)
    assert "zz_helper" not in names and "__main__" not in names
    assert names == sorted(names)
    assert [e for e in errors if "zz_broken" in e] == ["zz_broken: import failed: ImportError: missing dependency"]


def test_named_selection_and_unknown_names(fake_benches: None) -> None:
    runnable, errors = runner.discover(["zz_ok", "zz_helper", "nope"])
    assert [name for name, _ in runnable] == ["zz_ok"]
    assert errors[0] == "zz_helper: has no main()"
    assert errors[1].startswith("nope: no such benchmark module")


def test_failures_are_isolated_and_set_the_exit_status(fake_benches: None, capsys) -> None:
    assert runner.main(["zz_ok", "zz_async", "zz_argv"]) == 0
    out = capsys.readouterr().out
    assert "zz_ok ran" in out and "bench.zz_async: ok" in out and "bench.zz_argv: ok" in out
    assert runner.main(["zz_raises", "zz_fails", "zz_ok"]) == 1
    captured = capsys.readouterr()
    assert "RuntimeError: kaput" in captured.err
    assert "bench.zz_fails: FAILED (1)" in captured.out and "bench.zz_ok: ok" in captured.out
    assert "failed: zz_raises, zz_fails" in captured.err
    assert runner.main(["zz_broken"]) == 1


def test_list_prints_names_without_running(fake_benches: None, capsys) -> None:
    assert runner.main(["--list", "zz_ok"]) == 0
    assert capsys.readouterr().out.strip() == "zz_ok"


def test_tokens_bench_runs_on_a_small_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    folder = tmp_path / "qa-locomo"
    folder.mkdir()
    turns = [{"speaker": "A" if i % 2 else "B", "dia_id": f"D1:{i}", "text": f"turn {i} 你好"} for i in range(40)]
    (folder / "l.json").write_text(json.dumps([{"sample_id": "c", "qa": [], "conversation": {
        "speaker_a": "A", "speaker_b": "B", "session_1_date_time": "today", "session_1": turns}}]))
    monkeypatch.setenv("CONCORD_CORPUS_DIR", str(tmp_path))
    assert bench_tokens.main(["--turns", "20", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "locomo" in out and "41" in out  # 1 session marker + 40 turns
    assert "synthetic messages" in out and "Ledger cost ratio 5,000 vs 500" in out


def test_tokens_bench_without_corpus_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("CONCORD_CORPUS_DIR", str(tmp_path / "absent"))
    assert bench_tokens.main(["--turns", "5", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "corpus not found" in out and "Exact vs rough" not in out and "synthetic messages" in out
