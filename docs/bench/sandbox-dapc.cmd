build/bin/tc-bench dapc --servers 1,2 --depths 64,4096 --entries 1048576 --count 30 --modes dapc,sandbox --json
