build/bin/tc-bench dapc --hosts HOSTS --servers 2 --json
