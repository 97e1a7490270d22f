"""Shrink oversized ``data:image/…;base64`` parts so a provider's image limit stops rejecting them (R-C11).

Anthropic refuses images over 5 MB or 8000 px. We re-encode to at most 4 MB (decoded bytes) and 8000 px:
PNG first (lossless), then JPEG (or WebP when there is alpha) at falling quality, then half the size and
again. A result is only accepted when it really meets both limits, because re-compressing a PNG can grow it.
Pillow work is CPU-bound, so the async wrappers run it in a thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from PIL import Image, ImageOps

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_PX",
    "IMAGE_OMITTED",
    "ashrink_data_url",
    "ashrink_images_in_messages",
    "data_url_fits",
    "shrink_data_url",
    "shrink_images_in_messages",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_PX = 8000
IMAGE_OMITTED = "[image omitted: too large to send even after re-encoding]"
_QUALITIES = (85, 75, 60, 45)
_MIN_SIDE = 32
_DATA_URL = re.compile(r"^data:(image/[\w.+-]+);base64,(.*)$", re.DOTALL)


def _decode(url: str) -> bytes | None:
    match = _DATA_URL.match(url)
    if not match:
        return None
    try:
        return base64.b64decode(match.group(2), validate=False)
    except (binascii.Error, ValueError):
        return None


def _fits(raw: bytes, size: tuple[int, int], max_bytes: int, max_px: int) -> bool:
    return len(raw) <= max_bytes and max(size) <= max_px


def data_url_fits(url: str, *, max_bytes: int = DEFAULT_MAX_BYTES, max_px: int = DEFAULT_MAX_PX) -> bool:
    """Whether a data URL is already within the limits (non-data and undecodable URLs count as fitting)."""
    raw = _decode(url)
    if raw is None:
        return True
    try:
        with Image.open(io.BytesIO(raw)) as image:
            return _fits(raw, image.size, max_bytes, max_px)
    except (OSError, Image.DecompressionBombError):
        return len(raw) <= max_bytes


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)


def _save(image: Image.Image, fmt: str, **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def _candidates(image: Image.Image) -> Iterator[tuple[str, bytes]]:
    """Encodings to try, best quality first; a generator so the first one that fits ends the work."""
    yield "image/png", _save(image, "PNG", optimize=True)
    alpha = _has_alpha(image)
    lossy = image.convert("RGBA" if alpha else "RGB")
    for quality in _QUALITIES:
        if alpha:
            yield "image/webp", _save(lossy, "WEBP", quality=quality)
        else:
            yield "image/jpeg", _save(lossy, "JPEG", quality=quality)


def shrink_data_url(url: str, max_bytes: int = DEFAULT_MAX_BYTES, max_px: int = DEFAULT_MAX_PX) -> str | None:
    """A data URL within ``max_bytes`` decoded bytes and ``max_px`` per side, or None if that cannot be had.

    An image already within the limits is returned unchanged; a URL that is not a decodable image data URL
    gives None.
    """
    raw = _decode(url)
    if raw is None:
        return None
    try:
        with Image.open(io.BytesIO(raw)) as opened:
            if _fits(raw, opened.size, max_bytes, max_px):
                return url
            image = ImageOps.exif_transpose(opened)
            image.load()
    except (OSError, Image.DecompressionBombError) as exc:
        log.warning("cannot decode an oversized image (%s)", type(exc).__name__)
        return None
    if max(image.size) > max_px:
        image.thumbnail((max_px, max_px), Image.Resampling.LANCZOS)
    while True:
        found = next((c for c in _candidates(image) if len(c[1]) <= max_bytes), None)
        if found is not None:
            mime, data = found
            with Image.open(io.BytesIO(data)) as check:
                if _fits(data, check.size, max_bytes, max_px):
                    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        if min(image.size) // 2 < _MIN_SIDE:
            return None
        image = image.resize((image.width // 2, image.height // 2), Image.Resampling.LANCZOS)


async def ashrink_data_url(url: str, max_bytes: int = DEFAULT_MAX_BYTES, max_px: int = DEFAULT_MAX_PX) -> str | None:
    """`shrink_data_url` in a worker thread."""
    return await asyncio.to_thread(shrink_data_url, url, max_bytes, max_px)


def _shrunk_part(part: Mapping[str, Any], max_bytes: int, max_px: int) -> Mapping[str, Any] | None:
    """A replacement for an oversized image part, or None when the part can stay as it is."""
    if part.get("type") != "image_url":
        return None
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, Mapping) else ref
    if not isinstance(url, str) or data_url_fits(url, max_bytes=max_bytes, max_px=max_px):
        return None
    smaller = shrink_data_url(url, max_bytes, max_px)
    if smaller is None:
        return {"type": "text", "text": IMAGE_OMITTED}
    new_ref = {**ref, "url": smaller} if isinstance(ref, Mapping) else {"url": smaller}
    return {**part, "image_url": new_ref}


def shrink_images_in_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_px: int = DEFAULT_MAX_PX,
) -> tuple[list[Mapping[str, Any]], int]:
    """Return (new messages, number of image parts changed). Oversized images are re-encoded; ones that
    cannot be made to fit are replaced by a text note so the retry cannot fail on them again."""
    changed = 0
    result: list[Mapping[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            result.append(message)
            continue
        parts: list[Any] = []
        before = changed
        for part in content:
            replacement = _shrunk_part(part, max_bytes, max_px) if isinstance(part, Mapping) else None
            parts.append(part if replacement is None else replacement)
            changed += replacement is not None
        result.append(message if changed == before else {**message, "content": parts})
    return result, changed


async def ashrink_images_in_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_px: int = DEFAULT_MAX_PX,
) -> tuple[list[Mapping[str, Any]], int]:
    """`shrink_images_in_messages` in a worker thread."""
    return await asyncio.to_thread(shrink_images_in_messages, messages, max_bytes=max_bytes, max_px=max_px)
