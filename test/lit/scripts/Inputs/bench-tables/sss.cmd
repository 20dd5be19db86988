build/bin/tc-bench sss --sizes 16,4096 --json
