build/bin/tc-bench dapc --transport tcp --servers 2 --depths 1,64,1024 --entries 1048576 --count 10 --modes dapc,mpi --json
