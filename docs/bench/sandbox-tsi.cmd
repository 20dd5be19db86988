build/bin/tc-bench tsi --modes cached,sandbox --rounds 5 --no-perftest --json
