"""Oversized data-URL images are re-encoded within the limits, or replaced when they cannot be (R-C11)."""

from __future__ import annotations

import base64
import copy
import io
import os

from PIL import Image, ImageChops

from agent.llm.images import (
    IMAGE_OMITTED,
    ashrink_data_url,
    ashrink_images_in_messages,
    data_url_fits,
    shrink_data_url,
    shrink_images_in_messages,
)


def _data_url(image: Image.Image, fmt: str = "PNG") -> str:
    out = io.BytesIO()
    image.save(out, format=fmt)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(out.getvalue()).decode()}"


def _decoded(url: str) -> tuple[bytes, Image.Image]:
    raw = base64.b64decode(url.split(",", 1)[1])
    return raw, Image.open(io.BytesIO(raw))


def _noise(size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    bands = len(mode)
    return Image.frombytes(mode, size, os.urandom(size[0] * size[1] * bands))


def test_too_wide_image_is_scaled_to_max_px() -> None:
    wide = Image.linear_gradient("L").resize((9000, 300)).convert("RGB")
    url = _data_url(wide)
    smaller = shrink_data_url(url, max_px=8000)
    assert smaller is not None and smaller != url
    raw, image = _decoded(smaller)
    assert len(raw) <= 4 * 1024 * 1024
    assert max(image.size) <= 8000
    assert image.size == (8000, 267)


def test_noisy_image_is_re_encoded_under_the_byte_limit() -> None:
    url = _data_url(_noise((500, 500)))
    assert not data_url_fits(url, max_bytes=120_000)
    smaller = shrink_data_url(url, max_bytes=120_000)
    assert smaller is not None
    raw, image = _decoded(smaller)
    assert len(raw) <= 120_000
    assert image.format == "JPEG"
    assert smaller.startswith("data:image/jpeg;base64,")


def test_alpha_is_kept_with_webp() -> None:
    gradient = Image.linear_gradient("L").resize((400, 400))
    grain = _noise((400, 400), "L").point(lambda v: v // 8)
    photo = Image.merge("RGBA", (ImageChops.add(gradient, grain), gradient, gradient.rotate(90), gradient))
    url = _data_url(photo)
    assert not data_url_fits(url, max_bytes=100_000)
    smaller = shrink_data_url(url, max_bytes=100_000)
    assert smaller is not None and smaller.startswith("data:image/webp;base64,")
    raw, image = _decoded(smaller)
    assert len(raw) <= 100_000
    assert image.mode == "RGBA"
    assert image.size == (400, 400)


def test_fitting_image_is_unchanged_and_impossible_gives_none() -> None:
    small = _data_url(Image.new("RGB", (64, 64), "red"))
    assert shrink_data_url(small) == small
    assert shrink_data_url(_data_url(_noise((200, 200))), max_bytes=50) is None
    assert shrink_data_url("data:image/png;base64,bm90IGFuIGltYWdl") is None
    assert shrink_data_url("https://example.org/cat.png") is None


async def test_messages_are_rewritten_without_mutation() -> None:
    big = _data_url(_noise((400, 400)))
    hopeless = _data_url(_noise((200, 200)))  # fits once re-encoded; nothing fits in 60 bytes
    messages = [
        {"role": "user", "content": "plain text"},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": big, "detail": "high"}}]},
        {"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url", "image_url": {"url": hopeless}}]},
    ]
    before = copy.deepcopy(messages)
    out, changed = shrink_images_in_messages(messages, max_bytes=100_000)
    assert messages == before
    assert changed == 2
    assert out[0] is messages[0]
    part = out[1]["content"][1]
    assert part["image_url"]["detail"] == "high"
    assert data_url_fits(part["image_url"]["url"], max_bytes=100_000)
    assert data_url_fits(out[2]["content"][0]["image_url"]["url"], max_bytes=100_000)

    out, changed = await ashrink_images_in_messages(messages, max_bytes=60)
    assert changed == 2
    assert out[1]["content"] == [{"type": "text", "text": "look"}, {"type": "text", "text": IMAGE_OMITTED}]
    assert out[2]["content"] == [{"type": "text", "text": IMAGE_OMITTED}]


async def test_async_wrapper() -> None:
    url = _data_url(Image.new("RGB", (100, 10), "blue"))
    smaller = await ashrink_data_url(url, max_px=50)
    assert smaller is not None
    assert _decoded(smaller)[1].size == (50, 5)
