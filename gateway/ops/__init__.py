"""Ops: what operators see and need — metrics and their Prometheus instruments, /healthz and /readyz, the
heartbeat file, log set-up and throttling, the data directory, named crash points for fault tests.

May import: `gateway.store`, `gateway.config`.
"""
