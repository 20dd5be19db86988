build/bin/tc-bench dapc --servers 2 --depths 1,64 --modes dapc,mpi --json
