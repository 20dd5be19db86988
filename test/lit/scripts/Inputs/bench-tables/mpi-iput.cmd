build/bin/tc-bench iput --sizes 1024 --rounds 3 --modes injected,mpi --json
