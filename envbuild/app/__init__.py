"""The use cases, one module per command: each reads its inputs, calls the pure core and the
I/O edges, and returns a value the command prints. Commands import only the one they run.
"""
