"""Concord's agent: token accounting, context compression, LLM providers and the turn loop.

Knows nothing about chat platforms, SQL or Redis; the gateway hands it message lists and small interfaces.
"""
