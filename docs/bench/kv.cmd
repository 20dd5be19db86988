build/bin/tc-bench kv --json
