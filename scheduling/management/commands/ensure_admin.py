"""Create the demo admin user if no superuser exists, and say how to log in."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

PASSWORD_FILE = Path(settings.BASE_DIR) / ".admin-password"


class Command(BaseCommand):
    help = (
        "Create a superuser when none exists. Username and password come from "
        "SENDLATER_ADMIN_USER / SENDLATER_ADMIN_PASSWORD, or admin and a random "
        "password kept in .admin-password."
    )

    def handle(self, *args: object, **options: object) -> None:
        user_model = get_user_model()
        username = os.environ.get("SENDLATER_ADMIN_USER", "admin")
        if user_model.objects.filter(is_superuser=True).exists():
            hint = f" (password in {PASSWORD_FILE.name})" if PASSWORD_FILE.exists() else ""
            self.stdout.write(f"admin user exists{hint}")
            return
        password = os.environ.get("SENDLATER_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        user_model.objects.create_superuser(username=username, email="", password=password)
        if "SENDLATER_ADMIN_PASSWORD" not in os.environ:
            PASSWORD_FILE.write_text(password + "\n")
            PASSWORD_FILE.chmod(0o600)
        self.stdout.write(f"admin user created: username={username} password={password}")
