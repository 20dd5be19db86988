bin/tc-bench tsi --gpu=0 --json
