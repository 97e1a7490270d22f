"""The middle in parts that each fit one summary prompt: nothing is ever dropped."""

from __future__ import annotations

from agent.compression.parts import MAX_PARTS, serialize_parts
from agent.compression.summary import serialize_message
from agent.tokens import get_counter
from tests.compression.helpers import assistant, user

COUNTER = get_counter()


def _middle(pairs: int, words: int = 200) -> list[dict[str, str]]:
    prose = " ".join(f"w{k}" for k in range(words))
    return [m for i in range(pairs) for m in (user(f"ask {i} {prose}"), assistant(f"reply {i}"))]


def test_a_middle_that_fits_is_one_part() -> None:
    middle = _middle(5)
    parts = serialize_parts(middle, 100_000, COUNTER)
    assert parts.count == 1 and parts.older == 0
    assert parts.parts[0] == "\n\n".join(serialize_message(m) for m in middle)


def test_a_larger_middle_is_split_oldest_first_each_part_within_the_limit() -> None:
    middle = _middle(20)  # about 8,300 tokens
    parts = serialize_parts(middle, 3_000, COUNTER)
    assert parts.count == 3 == MAX_PARTS and parts.older == 0
    assert all(size <= 3_000 and COUNTER.count_text(text) <= size for text, size in zip(parts.parts, parts.tokens,
                                                                                       strict=True))
    joined = "\n\n".join(parts.parts)
    assert joined.index("[USER] ask 19 ") > joined.index("[USER] ask 10 ") > joined.index("[USER] ask 0 ")
    assert joined.endswith(serialize_message(middle[-1]))


def test_what_the_parts_cannot_hold_is_counted_as_older_never_silently_lost() -> None:
    middle = _middle(200)
    parts = serialize_parts(middle, 2_000, COUNTER, max_parts=2)
    assert parts.count == 2 and parts.older > 0
    # The newest messages are in the parts, the rest is the caller's (a static summary seeds the first part).
    held = sum(text.count("[USER] ") + text.count("[ASSISTANT] ") for text in parts.parts)
    assert parts.older + held == len(middle)


def test_a_message_larger_than_a_whole_part_keeps_its_head_and_tail() -> None:
    middle = [user("paste " + " ".join(f"line{k}" for k in range(20_000))), assistant("ok")]
    parts = serialize_parts(middle, 1_000, COUNTER)
    assert parts.older == 0 and all(size <= 1_000 for size in parts.tokens)
    assert "line0" in parts.parts[0] and "line19999" in parts.parts[0] and "were cut here" in parts.parts[0]
