mpirun -n 1 build/bin/tc-bench dapc --pmix --transport tcp --depths 1,64,4096 --entries 1048576 --count 100 --modes dapc,am --json : -n 2 build/bin/tc-bench serve --pmix --blocking
