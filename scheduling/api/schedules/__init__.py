"""The recurring-schedules API (``views``, ``serializers``)."""
