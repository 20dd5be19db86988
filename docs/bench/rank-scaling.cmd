scripts/rank-scaling.sh --slurm --json
