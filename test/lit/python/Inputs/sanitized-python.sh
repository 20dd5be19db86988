#!/bin/sh
# Debian's python3 ($TC_PYTHON) with the sanitizer runtime ($TC_SANITIZER_RT)
# preloaded, for the sanitizer build's Python tests (lit.cfg.py's
# %tc_python and %debian_python); sanitizer-site/ on the path drops the
# preload for the programs it starts.
PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(dirname "$0")/sanitizer-site"
export PYTHONPATH
exec env LD_PRELOAD="$TC_SANITIZER_RT" "$TC_PYTHON" "$@"
