"""Topics: one job, many endpoints (docs/delivery.md, "Topics").

A team names a topic and its endpoints (``Topic``, ``TopicEndpoint``: a URL, request
settings of the delivery contract, an optional flow-control key, a state). A job
naming a topic is fanned out when it falls due (``polling.writing.fanout``): one
webhook job per endpoint enabled then. A disabled endpoint's waiting deliveries are
held by its flow-control key (paused). Imports ``flow`` and ``jobs``; imported by
``api`` and ``console``.
"""
