"""KernelSwarm: a swarm of search agents that optimises GPU kernels."""

__version__ = "0.1.0"
