build/bin/tc-bench tsi --modes cached,sandbox --json
