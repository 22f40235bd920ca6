"""`python -m amprewrite`. Ctrl-C exits quietly (130) even while the modules are still loading,
before click installs its own handling."""

import sys

try:
    from amprewrite.launch import entry_point

    entry_point()
except KeyboardInterrupt:
    sys.exit(130)
