build/bin/tc-bench tsi --modes mailbox,ucx_put --breakdown --json
