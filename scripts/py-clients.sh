#!/usr/bin/env bash
# The official client libraries the integration tests drive ferroclaw with (issue 20): the
# `openai` SDK and `standardwebhooks`; and the MCP servers they connect it to (issue 37): the
# reference `mcp-server-time` and `mcp-server-fetch`, and the official SDK `mcp` the tests'
# own HTTP server is written with. Installed from PyPI into a venv that is kept between
# runs. Prints nothing when the venv is already complete.
set -euo pipefail
VENV="${FERROCLAW_PY_VENV:-/var/cache/ferroclaw-py}"
PACKAGES=("openai==1.109.1" "standardwebhooks==1.0.0" "mcp==2.3.0" "mcp-server-time==2026.10.19" "mcp-server-fetch==2026.10.24")
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import openai, standardwebhooks, mcp.server.mcpserver" 2>/dev/null \
  && [ -x "$VENV/bin/mcp-server-time" ] && [ -x "$VENV/bin/mcp-server-fetch" ]; then
  exit 0
fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "${PACKAGES[@]}"
