"""The process: the application's assembly (every route and shared part), one process or a
supervisor with workers, and the ``crossway`` command line.
"""
