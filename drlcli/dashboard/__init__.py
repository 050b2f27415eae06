"""``drl dashboard``: learning curves of metrics CSVs in the browser, live.

``runs.py`` finds runs and reads their CSVs incrementally (pure file reading, no server);
``server.py`` serves the built page (``static/``, built from ``web/`` with npm) and a JSON API.
"""
