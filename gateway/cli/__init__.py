"""The ``concord`` command line: the console script, its commands, and the store's commands.

May import every other room; nothing imports it.
"""
