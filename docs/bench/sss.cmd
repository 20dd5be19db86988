build/bin/tc-bench sss --json
