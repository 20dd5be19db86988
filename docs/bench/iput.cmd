build/bin/tc-bench iput --quick --json
