#!/bin/sh
## usage: cpu-limit.sh SECONDS COMMAND...
## Runs COMMAND in place of this shell (so with this PID: the child of
## whoever started the script) with SECONDS of CPU time; then the kernel
## ends it with SIGXCPU. No core file is written.
ulimit -c 0
ulimit -t "$1"
shift
exec "$@"
