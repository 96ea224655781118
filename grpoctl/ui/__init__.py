"""`grpoctl ui`: a read-only dashboard over the registry, served on this machine.

app.py builds the Starlette app (guard.py: Host header and access token; api.py: the
JSON API; curves.py: curves per variant, downsampled; params.py: query validation);
static/ holds the one page (HTML, CSS, JavaScript, no build step) and the vendored
plotting library. Needs the `ui` extra: pip install 'grpoctl[ui]'.
"""
