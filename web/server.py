"""Serve the dashboard from a checkout: ``python web/server.py [DIR ...] [--port N]``.

The same as ``drl dashboard`` (the server lives in ``drlcli/dashboard/server.py``, so an
installed drl has it too); this page's sources are ``web/src``, built by ``npm run build``.
"""

import sys

from drlcli.cli import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "dashboard", *sys.argv[1:]]
    main()
