build/bin/tc-bench sss --quick --json
