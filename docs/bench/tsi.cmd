build/bin/tc-bench tsi --modes am,cached,cached-unbatched,mailbox,uncached,object,ucx_am,ucx_put,ucx_perftest --json
