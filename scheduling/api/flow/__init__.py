"""The flow-control API: a team's key limits, their live state, pause and resume
(``views``, ``serializers``)."""
