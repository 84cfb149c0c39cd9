"""What every other package may use: SQL adapters for PostgreSQL and SQLite, the
database clock as a process sees it, failpoints for the fault tests, stopping child
processes, log context, the receivers' HTTP server. Imports nothing else of ``polling``."""
