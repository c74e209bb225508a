"""The lessons: one module per lab, each defining ``LAB`` (a :class:`labs.registry.Lab`).

Every module in this package that defines ``LAB`` is listed by ``python -m labs list``.
"""
