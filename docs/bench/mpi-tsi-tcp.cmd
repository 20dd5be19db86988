build/bin/tc-bench tsi --transport tcp --quick --modes cached,mpi --no-perftest --json
