scripts/netns.sh run 2 -- sh -c 'build/bin/tc-bench dapc --transport tcp --hosts $TC_HOSTS_FILE --servers 1,2 --depths 1,64 --modes dapc,mpi --json'
