build/bin/tc-bench dapc --servers 2 --depths 1,64,1024 --entries 1048576 --count 30 --modes dapc,mpi --json
