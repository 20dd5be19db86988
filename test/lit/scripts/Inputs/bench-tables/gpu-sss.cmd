bin/tc-bench sss --gpu=0 --json
