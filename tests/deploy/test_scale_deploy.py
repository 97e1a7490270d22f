"""deploy/ for several workers: the compose stack (replicas, health checks on /readyz, Redis persistence, a
PostgreSQL volume, the monitoring profile) as docker-compose reads it, and the systemd sweep timer as systemd
reads it."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import load_settings
from tests.deploy.conftest import COMPOSE, DEPLOY, resolved, stack_copy


def _compose(tmp_path: Path) -> dict[str, Any]:
    """The stack as docker-compose resolves it, from a deploy/.env made the documented way; without
    docker-compose, the file itself."""
    if COMPOSE is None:
        return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    return resolved(stack_copy(tmp_path, POSTGRES_PASSWORD="pw"))


def test_the_stack_runs_replicas_checked_on_readyz(tmp_path: Path) -> None:
    services = _compose(tmp_path)["services"]
    concord = services["concord"]
    env = concord["environment"]
    port = int(env["CONCORD_METRICS__PORT"])
    assert env["CONCORD_METRICS__LISTEN"] == "0.0.0.0"  # reachable by the health check and Prometheus
    assert f"http://127.0.0.1:{port}/readyz" in " ".join(concord["healthcheck"]["test"])
    assert env["CONCORD_REDIS__URL"].startswith("redis://redis:")  # replicas need Redis to share work
    assert env["CONCORD_STORAGE__DATABASE_URL"].startswith("postgresql+asyncpg://")
    if COMPOSE is not None:
        assert concord["deploy"]["replicas"] == 1  # safe for every platform (unsharded Discord included)
    # The settings the stack gives are valid settings.
    load_settings(metrics={"port": port, "listen": env["CONCORD_METRICS__LISTEN"]})


def test_redis_persists_and_postgres_keeps_a_volume(tmp_path: Path) -> None:
    stack = _compose(tmp_path)
    redis, postgres = stack["services"]["redis"], stack["services"]["postgres"]
    command = " ".join(redis["command"])
    assert "--appendonly yes" in command and "--save ''" not in command
    assert any(str(v).endswith(":/data") or "/data:" in str(v) for v in redis["volumes"])
    assert any("/var/lib/postgresql/data" in str(v) for v in postgres["volumes"])
    assert {"pgdata", "redisdata"} <= set(stack["volumes"])


def test_monitoring_is_an_opt_in_profile_with_the_repo_files(tmp_path: Path) -> None:
    services = _compose(tmp_path)["services"]
    assert services["prometheus"]["profiles"] == ["monitoring"] == services["grafana"]["profiles"]
    mounted = " ".join(str(v) for v in services["prometheus"]["volumes"] + services["grafana"]["volumes"])
    for name in ("prometheus.yml", "grafana-dashboard.json", "datasource.yml", "dashboards.yml"):
        assert name in mounted
    scrape = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())["scrape_configs"][0]["dns_sd_configs"][0]
    assert scrape["port"] == int(services["concord"]["environment"]["CONCORD_METRICS__PORT"])


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / name)
    return parser


def test_the_sweep_timer_starts_a_oneshot_concord_sweep() -> None:
    timer, service = _unit("concord-sweep.timer"), _unit("concord-sweep.service")
    assert timer["Timer"]["Unit"] == "concord-sweep.service"
    assert timer["Timer"]["OnCalendar"] == "*:0/30" and timer["Timer"]["Persistent"] == "true"
    assert timer["Install"]["WantedBy"] == "timers.target"
    assert service["Service"]["Type"] == "oneshot"
    assert service["Service"]["ExecStart"].endswith("concord sweep")
    assert service["Service"]["ProtectSystem"] == "strict" and service["Service"]["User"] == "concord"
    assert "SWEEP_CRON=off" in (DEPLOY / "concord-sweep.service").read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_analyze_verify_accepts_the_timer_and_its_service(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at a binary this machine has, everything else unchanged.
    service = (DEPLOY / "concord-sweep.service").read_text().replace("/opt/concord/.venv/bin/concord",
                                                                   shutil.which("true") or "/bin/true")
    (tmp_path / "concord-sweep.service").write_text(service)
    shutil.copy(DEPLOY / "concord-sweep.timer", tmp_path)
    result = subprocess.run(["systemd-analyze", "verify", str(tmp_path / "concord-sweep.timer"),
                             str(tmp_path / "concord-sweep.service")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
