"""The swarm: search spaces, agents, blackboard, coordinator and events. Pure Python, no Qt."""
