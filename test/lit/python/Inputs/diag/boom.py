import tc
x = 1
y = x / 0
