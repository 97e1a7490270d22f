"""The documentation a user reads stands on its own: no path outside the repository, every rule id the code
cites defined in docs/rules.md, every relative link leading to a file, and the figures it gives (the Discord
invite's permissions) true."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import discord

from tests.conftest import REPO_ROOT

RULES = REPO_ROOT / "docs" / "rules.md"
RULE_ID = re.compile(r"\bR-[A-Z]\d+\b")


def _tracked(*suffixes: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return [REPO_ROOT / name for name in listed.stdout.splitlines()
            if name.endswith(suffixes) and (REPO_ROOT / name).is_file()]


def test_nothing_points_outside_the_repository() -> None:
    # What only the project's development setting has: its shared folder and the documents kept there.
    outside = re.compile(r"\.\./shared|shared/SPEC|SPEC\.md|SPEC §|TESTING-RECIPES|DESIGN\.md")
    found = [f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
             for path in _tracked(".md", ".py", ".example", ".yml", ".cfg", ".service", ".toml", "Makefile",
                                  "Dockerfile", "concord-sweep", "run")
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
             if outside.search(line) and path != Path(__file__)]
    assert found == []


def test_every_rule_the_code_cites_is_defined() -> None:
    defined = set(re.findall(r"^- \*\*(R-[A-Z]\d+)\b", RULES.read_text(), re.M))
    cited: dict[str, str] = {}
    for path in _tracked(".py", ".md"):
        for rule in RULE_ID.findall(path.read_text(errors="replace")):
            cited.setdefault(rule, str(path.relative_to(REPO_ROOT)))
    missing = {rule: where for rule, where in cited.items() if rule not in defined}
    assert missing == {}
    assert "## §8" in RULES.read_text()  # cited as §8 (recall, observability)


def test_the_readme_leads_to_the_rules_and_the_architecture() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert "(docs/rules.md)" in readme and "(docs/architecture.md)" in readme


def test_relative_links_lead_to_files() -> None:
    broken = []
    for path in _tracked(".md"):
        prose = re.sub(r"`[^`\n]*`", "", path.read_text())  # a link shown as code is no link
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", prose):
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(REPO_ROOT)} → {target}")
    assert broken == []


def test_the_invite_url_asks_for_exactly_the_permissions_the_readme_names() -> None:
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    [value] = re.findall(r"scope=bot\+applications\.commands&permissions=(\d+)", readme)
    named = discord.Permissions(view_channel=True, send_messages=True, send_messages_in_threads=True,
                                read_message_history=True)
    assert int(value) == named.value
    for permission in ("*View Channels*", "*Send Messages*", "*Send Messages in Threads*", "*Read Message History*"):
        assert permission in readme
