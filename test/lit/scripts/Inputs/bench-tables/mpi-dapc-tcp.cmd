build/bin/tc-bench dapc --transport tcp --servers 2 --depths 64 --modes dapc,mpi --json
