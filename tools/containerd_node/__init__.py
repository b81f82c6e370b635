"""A throwaway Kubernetes-like node running our own containerd, for the runtime tests and the bench.

One node is a network namespace plus a private mount namespace held open by one process
(:mod:`holder`), a containerd started inside both with every path under the run's directory
(:mod:`config`, :mod:`process`), the busybox image built in Python as its sandbox image
(:mod:`ocimage`), a CRI client that describes pods as the kubelet does (:mod:`cri_pods`, no gRPC
library), and a teardown that finds every process and cgroup the node made (:mod:`reaper`).
:mod:`node` puts them together for the bench; tests/runtime builds its matrix of releases and its
client namespaces on the same parts.
"""
