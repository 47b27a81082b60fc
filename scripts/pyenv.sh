#!/usr/bin/env bash
# Makes the pinned Python environment of the cross-checks and peers (requirements.txt): a
# virtual environment from Debian's /usr/bin/python3, so that the `mxtrain` module built for
# that interpreter imports in it. Idempotent and cached: the environment is made again only
# when requirements.txt changes (its SHA-256 is kept beside it); pip's own download cache
# serves a re-install. Prints the environment's interpreter as the last line on stdout;
# everything else goes to stderr.
#
#   MXTRAIN_VENV   where the environment lives (default ~/.cache/mxtrain/venv)
#
# About 5.7 GiB installed (PyPI's torch for Linux x86-64 brings its CUDA libraries) and
# 1.5-3 minutes on a fresh machine (docs/install.md).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${MXTRAIN_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/mxtrain/venv}
req=$PWD/requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
stamp=$venv/.mxtrain-requirements.sha256

if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv/bin/python"
  exit 0
fi
[ -x /usr/bin/python3 ] || { echo "pyenv.sh: /usr/bin/python3 is missing (scripts/setup.sh installs python3)" >&2; exit 1; }
mkdir -p "$(dirname "$venv")"
# One maker at a time (two test runs started together share the environment).
exec 9>"$venv.lock"
flock 9
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -x "$venv/bin/python" ]; then
  echo "pyenv.sh: making $venv from requirements.txt (about 5.7 GiB; pip's cache makes a re-install quick)" >&2
  start=$(date +%s)
  # --clear: a changed requirements file starts from an empty environment, so nothing an
  # earlier pin brought stays behind. The stamp is written last: an interrupted install is
  # done again.
  /usr/bin/python3 -m venv --clear "$venv"
  "$venv/bin/python" -m pip install --no-input --disable-pip-version-check -q -r "$req" >&2
  echo "$want" > "$stamp"
  echo "pyenv.sh: ready in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1)" >&2
fi
echo "$venv/bin/python"
