scripts/netns.sh run 2 -- sh -c 'build/bin/tc-bench dapc --transport tcp --hosts $TC_HOSTS_FILE --json'
