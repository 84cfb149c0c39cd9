"""The operator console in the Django admin: lag dashboard, pollers, moves, cutovers."""
