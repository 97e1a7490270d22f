"""Conversation: a session's life — loaded, answered, compacted, expired.

Sessions and turns, hygiene and compaction (and the scheduled sweep and its scheduler), the engine's stored
state, continuity after expiry, the system prompt and pins, observed group lines, the recall tools
(search_history, read_history), chat commands, edits and deletions of answered messages and /forget, learned
windows.

May import: `gateway.runtime`, `gateway.policy`, `gateway.intake`, `gateway.delivery.delivery`, `gateway.ops`,
`gateway.store`, `gateway.config`.
"""
