build/bin/tc-bench iput --json
