build/bin/tc-bench kv --transport tcp --ranks 2 --json
