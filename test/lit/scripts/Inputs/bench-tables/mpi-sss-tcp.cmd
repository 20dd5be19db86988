build/bin/tc-bench sss --transport tcp --quick --sizes 16 --modes injected,mpi --json
