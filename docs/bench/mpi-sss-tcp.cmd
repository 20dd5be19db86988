build/bin/tc-bench sss --transport tcp --quick --sizes 16,1024,16384 --modes injected,mpi --json
