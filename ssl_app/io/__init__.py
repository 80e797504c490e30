"""Plumbing on the ground floor: files replaced whole or not at all (:mod:`ssl_app.io.atomic`), the lock that keeps
one writer per folder (:mod:`ssl_app.io.lock`), and the rule that writes a scalar only when it changes
(:mod:`ssl_app.io.changes`). Training, the data, the callbacks and the records wing (``ssl_app.runs``) use them;
they import nothing of ours.
"""
