build/bin/tc-bench sss --sizes 16,16384 --rounds 3 --modes injected,mpi --json
