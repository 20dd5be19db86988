scripts/slurm-local.sh run --new -- bash scripts/launch-bench.sh --ranks 2,4
