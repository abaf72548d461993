"""A stateful fake Kubernetes API server for tests: the real ``kubernetes`` client talks to it over
loopback HTTP, and its pods run as containers on the test Docker engine (see ``server.TestCluster``)."""

from tests.kubernetes.apiserver.server import TestCluster

__all__ = ["TestCluster"]
