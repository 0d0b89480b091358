"""The opt-in ``litellm`` target: LiteLLM's proxy in front of the same mock upstream, so that
Crossway can be compared with it in the same interleaved rounds.

LiteLLM is never a dependency of the project: ``make setup-litellm`` installs a pinned release
into ``.venv-litellm`` (:data:`LITELLM_BIN`), and this target fails with that hint when it is
missing. The proxy runs one worker on 127.0.0.1 with a one-model config (the bench's model name
routed to ``openai/bench-model`` at the mock) and nothing optional: no database, no callbacks,
no cache, the packaged model-price map (``LITELLM_LOCAL_MODEL_COST_MAP``: no download at
start-up) and no telemetry. Its readiness is ``GET /health/liveliness``.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from bench.processes import HarnessError, free_port, spawn, wait_ready
from bench.targets import HOST, REPO_ROOT, Server

LITELLM_BIN = REPO_ROOT / ".venv-litellm" / "bin" / "litellm"
MODEL = "upstream/bench-model"
_READY_TIMEOUT_S = 90.0  # LiteLLM imports a great deal before it listens
_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOG": "ERROR",
    "NO_DOCKER": "True",
}


def litellm_config_yaml(upstream_port: int) -> str:
    """LiteLLM's config for the bench: the request's model name at the mock upstream."""
    return (
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        "      model: openai/bench-model\n"
        f"      api_base: http://{HOST}:{upstream_port}/v1\n"
        "      api_key: bench-key\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  drop_params: true\n"
        "  json_logs: true\n"
        "general_settings:\n"
        "  disable_spend_logs: true\n"
    )


async def start_litellm(stack: ExitStack, log_dir: Path, upstream: Server) -> Server:
    """Start LiteLLM's proxy in front of ``upstream`` and wait until it answers.

    Raises :class:`HarnessError` when it is not installed or does not come up.
    """
    if not LITELLM_BIN.exists():
        raise HarnessError(
            f"the litellm target needs LiteLLM's proxy at {LITELLM_BIN.relative_to(REPO_ROOT)}: "
            "run `make setup-litellm` first"
        )
    port = free_port()
    config = log_dir / "litellm.yaml"
    config.write_text(litellm_config_yaml(upstream.port))
    argv = [str(LITELLM_BIN), "--config", str(config), "--host", HOST, "--port", str(port)]
    argv += ["--num_workers", "1"]
    child = spawn(stack, "litellm", argv, log_dir, log_dir, env=_ENV)
    await wait_ready(child, f"http://{HOST}:{port}/health/liveliness", _READY_TIMEOUT_S)
    return Server(pid=child.pid, port=port)
