"""False failure (fixed): the time limit counts CPU time, not wall time. This script waits 4 s
using almost no CPU: `fdl check --timeout 2` passes (a slow or loaded machine is not a failure)."""

import time

time.sleep(4)
print("done waiting")
