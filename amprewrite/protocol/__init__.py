"""The protocol checker: an independent reading of a program (Python's `ast`, none of the
planner's analysis) that checks the AMP protocol on every path it can see (`check`), that no
name is left unbound (`names`) and that nothing changed outside a plan's edits (`unchanged`).
The engine runs them on every rewrite before anything is written (`amprewrite.verification`).
"""
