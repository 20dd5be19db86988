build/bin/tc-bench tsi --modes cached,mailbox,ucx_am,ucx_put --json
