"""deploy/'s observability files: the Grafana dashboard queries only series the gateway exports, and the
Prometheus and Grafana provisioning files are what the compose stack mounts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from gateway.ops.instruments import Instruments

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _exported() -> set[str]:
    names: set[str] = set()
    for family in Instruments().registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
    return names


def test_the_dashboard_queries_only_exported_series() -> None:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bconcord_[a-z_]+", expr)}
    assert used and used <= _exported(), used - _exported()
    # Every family the gateway exports has a panel.
    families = {f.name for f in Instruments().registry.collect()}
    assert {name for name in families if not any(u.startswith(name) for u in used)} == set()
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    assert dashboard["templating"]["list"][0]["type"] == "datasource"


def test_prometheus_scrapes_the_replicas_metrics_port() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    [job] = config["scrape_configs"]
    assert job["job_name"] == "concord"  # the dashboard's up{job="concord"}
    assert job["dns_sd_configs"][0]["names"] == ["concord"] and job["dns_sd_configs"][0]["port"] == 9100


def test_grafana_provisioning_points_at_the_stack() -> None:
    source = yaml.safe_load((DEPLOY / "grafana" / "datasource.yml").read_text())["datasources"][0]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    provider = yaml.safe_load((DEPLOY / "grafana" / "dashboards.yml").read_text())["providers"][0]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
