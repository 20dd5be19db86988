build/bin/tc-bench tsi --modes first-contact,stall --json
