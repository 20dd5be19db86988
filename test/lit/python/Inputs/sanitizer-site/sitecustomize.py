"""Python's start-up hook in the sanitizer build's Python tests
(sanitized-python.sh puts this directory on the path): the sanitizer
runtime is preloaded into python3, which is not instrumented while libtc
and the extension are, but not into the programs python3 starts (tc-cc,
tc-serve, ...), which link their own and refuse a second one."""
import os

os.environ.pop("LD_PRELOAD", None)
