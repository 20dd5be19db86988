build/bin/tc-bench iput --sizes 65536 --json
