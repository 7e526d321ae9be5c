"""A target whose threads come and go, and whose frames change, while
collector/cpython opens it: one thread recurses without end, another
starts and joins threads one after another. Prints "up", then runs until
its stdin closes."""

import sys
import threading


def recurse(n):
    return 0 if n == 0 else recurse(n - 1) + 1


def work():
    while True:
        recurse(50)


def churn():
    while True:
        t = threading.Thread(target=recurse, args=(30,))
        t.start()
        t.join()


threading.Thread(target=work, daemon=True).start()
threading.Thread(target=churn, daemon=True).start()
print("up", flush=True)
sys.stdin.read()
