scripts/netns.sh run 4 -- sh -c 'build/bin/tc-bench dapc --transport tcp --hosts $TC_HOSTS_FILE --servers 1,2,4 --depths 1,64,4096 --entries 1048576 --count 10 --json'
