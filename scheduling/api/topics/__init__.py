"""The topics API: a team's topics and their endpoints (``views``, ``serializers``)."""
