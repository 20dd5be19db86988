build/bin/tc-bench kv --transport tcp --json
