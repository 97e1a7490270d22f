"""Policy: who may talk to the bot, and how much — access lists, DM pairing, rate limits and token budgets.

May import: `gateway.intake` (session keys, the lock backends the limit state shares), `gateway.ops`,
`gateway.store`, `gateway.config`.
"""
