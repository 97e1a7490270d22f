"""The compose stack as an operator uses it: every setting from deploy/.env (the password in that one place),
every command of the operations guide working with nothing exported, one replica unless deploy/.env says
otherwise, a webhook set-up that scales (one published port, HAProxy in front of the replicas), Discord shard
groups, and a model server on the host reachable from the containers.

No Docker engine runs here: docker compose resolves the stack (``config``), and each documented command is
run against a Docker host that does not exist, where it must get past reading the stack and fail only for
want of the engine. HAProxy runs for real with the stack's configuration in front of two stand-in replicas.
"""

from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gateway.config import load_settings
from tests.deploy.conftest import COMPOSE, DEPLOY, REPO, compose, resolved, stack_copy

needs_compose = pytest.mark.skipif(COMPOSE is None, reason="neither docker-compose nor docker compose is installed")
GATEWAYS = ("concord", "concord-shards-0-1", "concord-shards-2-3")
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@needs_compose
def test_the_password_lives_in_deploy_env_alone(tmp_path: Path) -> None:
    services = resolved(stack_copy(tmp_path, POSTGRES_PASSWORD="pw-in-one-place"))["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pw-in-one-place"
    for name in GATEWAYS:
        url = services[name]["environment"]["CONCORD_STORAGE__DATABASE_URL"]
        assert url == "postgresql+asyncpg://concord:pw-in-one-place@postgres:5432/concord"


def _documented_commands() -> list[str]:
    """Every ``docker compose`` command of deploy/README.md, as written (shell redirections left out)."""
    text = (DEPLOY / "README.md").read_text()
    found = re.findall(r"^(docker compose -f deploy/docker-compose\.yml[^\n#`]*)", text, re.M)
    found += re.findall(r"`(docker compose -f deploy/docker-compose\.yml[^`]*)`", text.replace("\n", " "))
    commands = {re.split(r"\s[<>]\s", command)[0].strip() for command in found}
    return sorted(" ".join(command.split()) for command in commands)


@needs_compose
@pytest.mark.parametrize("command", _documented_commands())
def test_every_documented_command_needs_nothing_exported(tmp_path: Path, command: str) -> None:
    args = shlex.split(command)[4:]  # after `docker compose -f deploy/docker-compose.yml`
    ready = compose(stack_copy(tmp_path / "ready", POSTGRES_PASSWORD="pw"), *args, env=NO_ENGINE)
    said = ready.stdout + ready.stderr  # (`exec` reports on stdout)
    assert "POSTGRES_PASSWORD" not in said and "Missing mandatory value" not in said, said
    assert re.search(r"docker|daemon|connect|API version|No such file", said, re.I), said


@needs_compose
def test_without_the_password_a_command_says_where_to_set_it(tmp_path: Path) -> None:
    unset = compose(stack_copy(tmp_path), "ps", env=NO_ENGINE)
    assert unset.returncode != 0 and "set POSTGRES_PASSWORD in deploy/.env" in unset.stderr, unset.stderr


def test_the_guide_has_the_commands_of_every_task() -> None:
    joined = "\n".join(_documented_commands())
    for task in (" up -d", " ps", " logs", "pg_dump", "pg_restore", " build", " stop", "--force-recreate",
                 "run --rm"):
        assert task in joined, task


@needs_compose
def test_one_replica_unless_deploy_env_says_otherwise(tmp_path: Path) -> None:
    assert resolved(stack_copy(tmp_path / "default", POSTGRES_PASSWORD="pw"))["services"]["concord"]["deploy"][
        "replicas"] == 1
    scaled = resolved(stack_copy(tmp_path / "scaled", POSTGRES_PASSWORD="pw", CONCORD_REPLICAS="3"))
    assert scaled["services"]["concord"]["deploy"]["replicas"] == 3


@needs_compose
def test_the_webhook_is_one_port_in_front_of_every_replica(tmp_path: Path) -> None:
    services = resolved(stack_copy(tmp_path, POSTGRES_PASSWORD="pw", COMPOSE_PROFILES="webhook"))["services"]
    webhook = services["webhook"]
    assert webhook["profiles"] == ["webhook"]
    [port] = webhook["ports"]
    published = port if isinstance(port, str) else f"{port.get('host_ip')}:{port['published']}:{port['target']}"
    assert published.removesuffix("/tcp") == "127.0.0.1:8443:8443"
    assert any("haproxy.cfg" in str(volume) for volume in webhook["volumes"])
    for name in GATEWAYS:
        assert "ports" not in services[name]  # replicas never compete for a host port


@needs_compose
def test_discord_shard_groups_cover_every_shard_once(tmp_path: Path) -> None:
    services = resolved(stack_copy(tmp_path, POSTGRES_PASSWORD="pw", COMPOSE_PROFILES="discord-shards",
                                   CONCORD_REPLICAS="0"))["services"]
    assert services["concord"]["deploy"]["replicas"] == 0  # the groups replace the unsharded service
    groups = [services[name] for name in GATEWAYS[1:]]
    counts = {int(group["environment"]["CONCORD_DISCORD__SHARD_COUNT"]) for group in groups}
    ids = [int(i) for group in groups for i in str(group["environment"]["CONCORD_DISCORD__SHARD_IDS"]).split(",")]
    [count] = counts
    assert sorted(ids) == list(range(count))  # each shard exactly once
    for group in groups:
        assert group["profiles"] == ["discord-shards"]
        assert group.get("deploy", {}).get("replicas", 1) == 1
        assert "concord" in group["networks"]["default"]["aliases"]  # found by HAProxy and Prometheus
        env = group["environment"]
        load_settings(discord={"token": "t", "shard_count": env["CONCORD_DISCORD__SHARD_COUNT"],
                               "shard_ids": env["CONCORD_DISCORD__SHARD_IDS"]})


@needs_compose
def test_a_model_server_on_the_host_is_reachable_by_name(tmp_path: Path) -> None:
    services = resolved(stack_copy(tmp_path, POSTGRES_PASSWORD="pw"))["services"]
    for name in GATEWAYS:
        hosts = services[name]["extra_hosts"]
        assert "host.docker.internal:host-gateway" in hosts or hosts.get("host.docker.internal") == "host-gateway"
    assert "host.docker.internal" in (REPO / "README.md").read_text()
    assert "host.docker.internal" in (DEPLOY / "README.md").read_text()


# --- HAProxy ------------------------------------------------------------------------------------------------

needs_haproxy = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")


@needs_haproxy
def test_haproxy_accepts_the_stacks_configuration() -> None:
    result = subprocess.run(["haproxy", "-c", "-f", str(DEPLOY / "haproxy.cfg")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


class StandIn:
    """A replica stand-in on 127.0.0.1: its webhook answers ``status``; its /readyz (another port) 200."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.updates = 0
        stand_in = self

        class Webhook(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                stand_in.updates += 1
                self.send_response(stand_in.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        class Ready(Webhook):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for handler in (Webhook, Ready)]
        for server in self.servers:
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self.port, self.ready_port = (server.server_address[1] for server in self.servers)

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def replicas() -> Iterator[tuple[StandIn, StandIn]]:
    draining, serving = StandIn(503), StandIn(200)
    yield draining, serving
    draining.close()
    serving.close()


@needs_haproxy
def test_an_update_a_draining_replica_refuses_is_handed_to_another(tmp_path: Path,
                                                                  replicas: tuple[StandIn, StandIn]) -> None:
    draining, serving = replicas
    port = _free_port()
    # The stack's configuration; only the addresses differ (two local stand-ins instead of Docker's DNS).
    config = (DEPLOY / "haproxy.cfg").read_text()
    config = re.sub(r"resolvers docker\n(    .*\n)+", "", config)
    config = config.replace("bind :8443", f"bind 127.0.0.1:{port}")
    config = config.replace(" resolvers docker init-addr none", "").replace(" check port 9100", " check")
    # `port` on a server line is where its health check goes (the stand-in's /readyz).
    config = re.sub(r"server-template .*", "\n".join(
        f"    server r{n} 127.0.0.1:{r.port} port {r.ready_port}" for n, r in enumerate(replicas)), config)
    path = tmp_path / "haproxy.cfg"
    path.write_text(config)
    proxy = subprocess.Popen(["haproxy", "-db", "-f", str(path)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert proxy.poll() is None, proxy.communicate()[1]
                assert time.monotonic() < deadline, "haproxy never listened"
                time.sleep(0.1)
        statuses = [httpx.post(f"http://127.0.0.1:{port}/telegram", json={"update_id": n}, timeout=10).status_code
                    for n in range(8)]
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)
    assert statuses == [200] * 8  # Telegram never saw the draining replica's 503
    assert draining.updates > 0 and serving.updates == 8  # round robin reached it; each of its 503s went on
