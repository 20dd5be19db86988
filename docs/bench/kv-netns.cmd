scripts/netns.sh run 4 -- sh -c 'build/bin/tc-bench kv --transport tcp --hosts $TC_HOSTS_FILE --json'
