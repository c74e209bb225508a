"""What runs inside each rank of ``python -m labs doctor``: the reader's script, unchanged, with torch's
entry points patched to record what the script does (events, one JSON line each, in a file per rank).

This package is loaded in the rank without ``labs/__init__`` (see ``bootstrap.py``): the reader's process
holds torch, the standard library and these modules only, and they import nothing else from ``labs``.
Importing it has no side effect; :func:`main.run` installs the probes.
"""
