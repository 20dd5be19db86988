build/bin/tc-bench dapc --modes dapc,sandbox --json
