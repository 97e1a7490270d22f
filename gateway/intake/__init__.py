"""Intake: how a message enters exactly once and in order, whichever worker receives it.

The inbox and the spool (kept from receipt until handled), arrival tickets and per-session queues, turn and job
locks, claims shared by workers, the polling lease, riding out a storage outage, a busy session and /stop across
workers, edits of messages still waiting, session keys.

May import: `gateway.delivery.delivery` (the inbox hands an answer over with its handled mark), `gateway.ops`,
`gateway.store`, `gateway.config`; `gateway.runtime` for type annotations only.
"""
