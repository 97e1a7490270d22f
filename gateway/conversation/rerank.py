"""Re-ranking search hits by meaning, with a small embedding model that runs offline on CPU (optional).

Word search cannot tell that "pottery class" and "ceramics course" are about the same thing. When the
optional extra ``rerank`` is installed (``pip install 'concord[rerank]'``), the hits that share only some of
the query's words are re-ordered by how close their text is in meaning to the query: WordLlama's
``l2_supercat`` static token embeddings (256 dimensions, trained from the token embeddings of large
language models), whose weights and tokenizer ship inside the ``wordllama`` wheel — nothing is downloaded,
at install or at run time (``disable_download``). Embedding a query and 30 snippets is a few milliseconds;
loading the model (once per process, on the first search, in a worker thread) about a second.

Without the extra, `meaning_rerank` returns None and search ranks by words alone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from gateway.store.search import Rerank

__all__ = ["MODEL", "MeaningRerank", "meaning_rerank"]

log = logging.getLogger(__name__)

MODEL = "wordllama l2_supercat (256 dimensions)"


class MeaningRerank:
    """Cosine similarity of the query and each text in WordLlama's embedding space (the model is loaded on
    the first call)."""

    def __init__(self, package_dir: Path) -> None:
        self._package_dir = package_dir
        self._model: Any = None
        self._lock = threading.Lock()

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                from wordllama import WordLlama

                # The tokenizer ships in the package's "tokenizers" folder, which WordLlama looks for under
                # its cache folder: pointing the cache at the package finds both files without a download.
                self._model = WordLlama.load(cache_dir=self._package_dir, disable_download=True)
            return self._model

    def __call__(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        model = self._loaded()
        scores = model.vector_similarity(model.embed(query)[0], model.embed(list(texts)))
        return [float(s) for s in scores.reshape(-1)]


@cache
def meaning_rerank() -> Rerank | None:
    """The re-ranker when the ``rerank`` extra is installed, else None (search then ranks by words alone)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        import wordllama
    except ImportError:
        return None
    finally:
        # wordllama calls logging.basicConfig(level=INFO) on import: the process's logging is not its to set.
        root.handlers[:], root.level = handlers, level
    package_dir = Path(wordllama.__file__).resolve().parent
    if not (package_dir / "weights").is_dir():
        log.warning("search: wordllama is installed without its bundled weights; re-ranking by meaning is off")
        return None
    return MeaningRerank(package_dir)
