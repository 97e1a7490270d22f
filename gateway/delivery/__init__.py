"""Delivery: answers out — the delivery ledger (stored before sent, confirmed after) and reply bounds.

May import: `gateway.ops`, `gateway.store`, `gateway.config`; `gateway.runtime` for type annotations only.
"""
