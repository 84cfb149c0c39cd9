"""A Django app for receivers: add ``sendlater_client.django`` to INSTALLED_APPS."""
