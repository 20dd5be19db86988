build/bin/tc-bench tsi --modes cached,cached-unbatched,mailbox,ucx_am,ucx_put --rounds 3 --no-perftest --breakdown --json
