scripts/netns.sh run 2 -- sh -c 'build/bin/tc-bench dapc --transport tcp --hosts $TC_HOSTS_FILE --servers 1,2 --depths 64,256,1024 --entries 1048576 --count 10 --modes dapc,mpi --json'
