scripts/slurm-local.sh run --new -- bash scripts/launch-bench.sh --dapc '--transport tcp --depths 1,64,4096 --entries 1048576 --count 100 --modes dapc,am'
