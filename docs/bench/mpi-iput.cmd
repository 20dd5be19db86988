build/bin/tc-bench iput --sizes 16,1024,16384 --rounds 3 --modes injected,mpi --json
