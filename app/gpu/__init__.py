"""Evaluation backends (replay, cpu, cuda) and everything that touches a device. No Qt."""
