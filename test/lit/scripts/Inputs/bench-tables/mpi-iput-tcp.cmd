build/bin/tc-bench iput --transport tcp --quick --sizes 1024 --modes injected,mpi --json
