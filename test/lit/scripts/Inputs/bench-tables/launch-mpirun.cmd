mpirun -n 1 build/bin/tc-bench dapc --pmix --json : -n 2 build/bin/tc-bench serve --pmix
