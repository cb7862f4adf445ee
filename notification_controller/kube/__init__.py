"""The Kubernetes adapter: the only package that imports ``kubernetes_asyncio``.

* ``client``   — ``KubeClient``: config loading (flag, ``KUBECONFIG``, in-cluster), client-side throttling,
                 per-request timeouts, 401 credential reload, 429 ``Retry-After``, raw JSON requests and
                 watch streams; every library error becomes ``errors.KubeError``.
* ``informer`` — list-then-watch informers feeding ``store.ObjectStore`` (relist on 410, bookmarks,
                 inactivity timeout, capped backoff, invalid objects kept out of the index).
* ``cluster``  — ``KubeCluster``: the ``store.base.Cluster`` port (metadata reads, merge patches, Events).
* ``leader``   — ``LeaderElector``: a ``coordination.k8s.io/v1`` Lease, Flux's timings and semantics.

See ``docs/kubernetes.md``.
"""
