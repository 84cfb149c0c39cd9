"""WSGI entry point for gunicorn: Django behind the single-job API's front door
(sendlater_site/apifront.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sendlater_site.settings")

django_application = get_wsgi_application()  # sets Django up: the front door imports models

from sendlater_site.apifront import ApiFront  # noqa: E402

application = ApiFront(django_application)
