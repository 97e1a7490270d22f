"""Prepared records: what the engine prepared for a message when it was stored, as one compact text that the
caller keeps with the message and hands back after a restart.

A live process prepares each stored message once (`ContextCompressor.on_messages_stored`): its evidence facts,
their texts' token counts and its block of the summary prompt, kept in in-process caches (`evidence`,
`blocks`). A restart loses them, and finding them again was most of a cold compaction. `prepare_records` turns
them into one JSON text per message, which the gateway's store keeps with the message's row (as it keeps its
token count); `adopt_records` puts them back into the caches, so that a compaction after a restart costs about
what one before it did.

A record is a JSON list: format version, encoding, the digests (`agent.tokens.key_digest`) of the message's
fact-cache key and of its block key, the finders whose gates occur in its text (bit i: ``SCANNERS[i]``), its
block's token count, whether the block is its `serialize_unredacted`, then its facts in each of
`fact_patterns.STAGES` as ``[kind index, text, token count]``: whatever makes the adopted
`evidence.MessageFacts` equal the computed one; and what pruning makes of the message (`prune.PrunedForm`:
a long tool result's one-liner, or a call's arguments shrunk): the digest of its `prune.form_key`, the line or
each call's arguments, and the token count, block count and unredacted flag of the message pruning makes — a
compaction after a restart neither reads the old output nor parses the arguments again, nor tokenizes what they
become. The block's text is not stored but rebuilt from the message:
where redaction changed nothing (nearly every message) as `serialize_unredacted`, which costs no redaction,
else as `serialize_message`, which costs the redaction but still no tokenizing (the corpus's 63,008 messages
have 5 such blocks; storing their texts would make those records as large as the messages, for little time).
Records take 99 bytes at the corpus's median (its messages' JSON: 109), 440 at its 99th percentile (a long
tool result's holds its one-liner).

What a record says is used only where it is exactly what computing it would give:

* its format version is this process's: a digest of the source of every module of this package,
  ``agent/tokens.py``, ``agent/lru.py`` and ``agent/jsonlimits.py`` (a call's arguments are parsed with it), of
  the versions of Python, tiktoken and hyperscan, and of whether the evidence gates are found in one pass (a
  message's gates depend on it). Computed once, when this module is imported (files replaced under a running
  process must not lend their version to what the loaded code makes); where a source cannot be read, records
  are neither made nor adopted. An upgrade invalidates every record, which is only slower;
* its encoding is the counter's (block and fact counts depend on it);
* a message takes the facts, the block, or the one-liner, only when the digest of its own key, as the message is
  now, is the record's. The keys hold everything each is made of: role, text, each call's arguments, for the
  facts each call's result (looked up among the messages handed over, as `evidence.remember_facts` does), and
  for what pruning makes of it the name and arguments of the call that produced a result. So a record made for another text, other arguments, or a result since changed or erased is never
  taken, and that message is computed as it would be without records. The facts and the block are checked
  apart: an erased result voids a call's facts, not its block, which does not show the result.

Adopted records wait in the caches under those digests (`evidence.adopt_facts`, `blocks.adopt_block`,
`prune.adopt_line`) and a message takes its own when a compaction first looks it up: checking and rebuilding is
paid only for what the compaction reads (a long middle's newest blocks), not for every message handed over.
"""
from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from agent import jsonlimits, lru, tokens
from agent.compression.blocks import adopt_block, clear_block_cache, remember_blocks, summary_block
from agent.compression.clip import clear_clip_cache
from agent.compression.evidence import (
    FACT_KINDS,
    MessageFacts,
    adopt_facts,
    clear_fact_cache,
    fact_tokens,
    gates_in_one_pass,
    remember_facts,
)
from agent.compression.fact_patterns import SCANNERS, STAGES
from agent.compression.messages import content_text
from agent.compression.prune import adopt_arguments, adopt_line, clear_prune_cache, remember_pruned
from agent.compression.summary import serialize_unredacted
from agent.lru import LruCache
from agent.tokens import TokenCounter, key_digest

__all__ = ["FORMAT_VERSION", "RECORD_MIN_CHARS", "adopt_records", "forget_prepared", "prepare_records"]

_KIND_INDEX = {kind: i for i, kind in enumerate(FACT_KINDS)}
# A record's fields, in order: version, encoding, fact key digest, block key digest, gates, block tokens,
# unredacted, the facts of each stage, then what pruning makes of the message (null, or the digest of the key it
# depends on, a result's one-liner or each call's arguments, the pruned message's token count, its block's count
# and whether that block is unredacted).
_FIELDS = 8 + len(STAGES)
_SCANNER_BIT = {scanner.name: 1 << i for i, scanner in enumerate(SCANNERS)}
# The records this process made or has read, by their hash: the gateway hands a session's records to every
# compaction of it, and one already read (or made here) is not read again — what it says is in the caches, or
# was evicted from them and is computed again, as a hash shared with another record would also have it.
_SEEN_SIZE = 50_000
# A chat line this short is found and counted again after a restart in microseconds, while its record (about 90
# bytes) would nearly double what is stored for it and cost the turn that made it more than it later saves: such
# a message gets a record only when it carries tool calls or is a tool's result (measured: at 20,000 messages of
# tau-bench, records for 64% of them leave a cold compaction 6% slower than records for all).
RECORD_MIN_CHARS = 200
_SEEN: LruCache[int, bool] = LruCache(_SEEN_SIZE)


def _distribution(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def _format_version() -> str | None:
    """The digest of what decides a record's content (see the module's docstring); None where a source
    cannot be read."""
    package = Path(__file__).parent
    sources = [(str(path.relative_to(package)), path) for path in sorted(package.rglob("*.py"))]
    sources += [(f"agent/{Path(str(module.__file__)).name}", Path(str(module.__file__)))
                for module in (tokens, lru, jsonlimits)]
    try:
        code = tuple((name, hashlib.blake2b(path.read_bytes()).digest()) for name, path in sources)
    except OSError:
        return None
    runtime = (sys.version, _distribution("tiktoken"), _distribution("hyperscan"), gates_in_one_pass())
    # 64 bits tell versions apart (nobody chooses them); the key digests take 128.
    return key_digest((code, runtime), size=8)


# Computed when the code it describes is loaded: files replaced under a running process must not lend their
# version to records the loaded code makes.
FORMAT_VERSION = _format_version()


def _dumps(data: list[Any]) -> str:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (a library caller's text): escaped, so a store can take it
        return json.dumps(data, separators=(",", ":"))
    return text


def prepare_records(messages: Sequence[Mapping[str, Any]], counter: TokenCounter, *,
                    min_chars: int = 0) -> list[str | None]:
    """Find the facts (all stages), their ledger-text token counts (`fact_tokens`) and the summary blocks of
    ``messages`` now (`evidence.remember_facts` and `blocks.remember_blocks`, into the same caches), and return,
    per message, a compact JSON text holding what was found (see the module's docstring), for the caller to
    store with it and hand back to `adopt_records` later. Every message gets a record (there is always a block
    and its count) — but one whose text is shorter than ``min_chars`` and that neither calls a tool nor is a
    tool's result (`RECORD_MIN_CHARS`) —, unless this process cannot make records at all (`FORMAT_VERSION` is
    None): then None each. A tool call's result is looked up among ``messages`` as `evidence.remember_facts`
    does."""
    facts = remember_facts(messages, counter)
    blocks = remember_blocks(messages, counter)
    forms = remember_pruned(messages)
    if FORMAT_VERSION is None:
        return [None] * len(messages)
    records: list[str | None] = []
    for message, (fact_key, entry), (key, (block, block_tokens)), form in zip(messages, facts, blocks, forms,
                                                                             strict=True):
        if min_chars and not (message.get("tool_calls") or message.get("role") == "tool"
                              or len(content_text(message)) >= min_chars):
            records.append(None)
            continue
        stages = [[[_KIND_INDEX[kind], text, fact_tokens(text, counter)] for kind, text in found]
                  for found in (entry.first, entry.paths or (), entry.values or ())]
        gates = sum(_SCANNER_BIT[name] for name in entry.present)
        unredacted = _unredacted(message, block)
        pruned = None if form is None else [key_digest(form.key), _listed(form.replacement),
                                            *_pruned_counts(form.message, counter)]
        records.append(_dumps([FORMAT_VERSION, counter.encoding_name, key_digest(fact_key), key_digest(key),
                               gates, block_tokens, unredacted, *stages, pruned]))
    for record in records:
        if record is not None:
            _SEEN.put(hash(record), True)
    return records


def _listed(replacement: str | tuple[str | None, ...]) -> str | list[str | None]:
    return replacement if isinstance(replacement, str) else list(replacement)


def _pruned_counts(pruned: Mapping[str, Any], counter: TokenCounter) -> tuple[int, int, int]:
    """The token count of a message pruning made, its block's count and whether that block is its
    `serialize_unredacted` (each kept in the caches, as the compaction that prunes it would)."""
    block, block_tokens = summary_block(pruned, counter)
    return counter.count_message(pruned), block_tokens, _unredacted(pruned, block)


def _unredacted(message: Mapping[str, Any], block: str) -> int:
    """1 where ``block`` is the message's `serialize_unredacted` (rebuilt without redacting), else 0."""
    return int(serialize_unredacted(message) == block)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _take(record: str, encoding: str) -> bool:
    """Adopt ``record`` (`evidence.adopt_facts`, `blocks.adopt_block`) when it is a record of this format version
    and ``encoding``, well formed; whether it was."""
    try:
        data = json.loads(record)
    except (ValueError, RecursionError):  # (a record nested absurdly deep: the parser's recursion ran out)
        return False
    if not (isinstance(data, list) and len(data) == _FIELDS and data[0] == FORMAT_VERSION and data[1] == encoding):
        return False
    _, _, facts_key, key, gates, block_tokens, unredacted, *stages, pruned = data
    if not (isinstance(facts_key, str) and isinstance(key, str) and _is_count(block_tokens)
            and _is_count(unredacted) and unredacted <= 1):
        return False
    if pruned is not None and not _is_pruned(pruned):
        return False
    facts = _facts(gates, stages)
    if facts is None:
        return False
    adopt_facts(facts_key, facts[0], facts[1], encoding)
    adopt_block(key, block_tokens, bool(unredacted))
    if pruned is not None:
        digest, replacement, tokens, pruned_block_tokens, pruned_unredacted = pruned
        counts = (encoding, tokens, pruned_block_tokens, bool(pruned_unredacted))
        if type(replacement) is str:
            adopt_line(digest, replacement, counts)
        else:
            adopt_arguments(digest, tuple(replacement), counts)
    return True


def _is_pruned(pruned: Any) -> bool:
    """Whether a record's pruned form is well formed: [digest, a one-liner or each call's arguments, count, block
    count, unredacted flag]."""
    if not (type(pruned) is list and len(pruned) == 5):
        return False
    digest, replacement, tokens, block_tokens, unredacted = pruned
    return (type(digest) is str and _is_count(tokens) and _is_count(block_tokens) and type(unredacted) is int
            and unredacted in (0, 1) and (type(replacement) is str or (
                type(replacement) is list and all(item is None or type(item) is str for item in replacement))))


def _facts(gates: Any, stages: list[Any]) -> tuple[MessageFacts, dict[str, int]] | None:
    """The facts a record holds and their texts' token counts (None when malformed)."""
    if not (_is_count(gates) and gates < 1 << len(SCANNERS)):
        return None
    found: list[tuple[tuple[str, str], ...]] = []
    counts: dict[str, int] = {}
    for stage in stages:
        if type(stage) is not list:
            return None
        pairs = []
        # (Checked inline: a record of 20 facts is read for every message of a session after a restart.)
        for item in stage:
            if type(item) is not list or len(item) != 3:
                return None
            kind, text, tokens = item
            if type(kind) is not int or not 0 <= kind < len(FACT_KINDS) or type(text) is not str \
                    or type(tokens) is not int or tokens < 0:
                return None
            pairs.append((FACT_KINDS[kind], text))
            counts[text] = tokens
        found.append(tuple(pairs))
    return MessageFacts(found[0], found[1], found[2], _present(gates)), counts


@functools.lru_cache(maxsize=1_024)
def _present(gates: int) -> frozenset[str]:
    """The finders whose bits ``gates`` holds (a few combinations recur across every record)."""
    return frozenset(name for name, bit in _SCANNER_BIT.items() if gates & bit)


def adopt_records(messages: Sequence[Mapping[str, Any]], records: Sequence[str | None],
                  counter: TokenCounter) -> int:
    """Put into the in-process caches what ``records`` say, one per message of ``messages`` as `prepare_records`
    made them, for each message to take when a compaction first looks it up, where the record is valid for the
    message as it is then (see the module's docstring); return how many records were adopted: well formed, of
    this format version and of ``counter``'s encoding. Never raises on a bad record: one that is malformed, of
    another format version or another encoding is ignored, and one made for different content (the message
    text, a call's arguments, or — for an assistant's call — the result its facts came from, changed or erased)
    is never taken: that message is computed as it would be without records. When ``records`` are not one per
    message, all of them are ignored. A record this process made or adopted before counts without being read
    again."""
    if len(records) != len(messages) or FORMAT_VERSION is None:
        return 0
    encoding = counter.encoding_name
    texts = [record for record in records if isinstance(record, str)]
    hashes = [hash(record) for record in texts]
    # Equal messages (a session repeats itself) have equal records: each is read once.
    taken: dict[str, bool] = {}
    adopted = 0
    for record, digest, seen in zip(texts, hashes, _SEEN.get_many(hashes), strict=True):
        took = seen or taken.get(record)
        if took is None:
            took = taken[record] = _take(record, encoding)
            if took:
                _SEEN.put(digest, True)
        adopted += took
    return adopted


def forget_prepared() -> None:
    """Forget every fact, block, pruned form, clipping and record this process holds: what a restarted process
    knows (tests and benchmarks; a long-running process only ever evicts)."""
    clear_fact_cache()
    clear_block_cache()
    clear_prune_cache()
    clear_clip_cache()
    _SEEN.clear()
