build/bin/tc-bench tsi --modes cached,mailbox,mpi --rounds 3 --no-perftest --json
