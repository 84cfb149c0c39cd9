"""The operator console in the Django admin: lag dashboard, pollers, moves, cutovers.

May import every package below it; ``management`` (the commands) may import it.
"""
