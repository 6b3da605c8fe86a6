"""A FAKE Kubernetes API server for tests: real HTTP, the REST shapes kubesage uses.

No API server can run on a test machine, so this module serves the small part of the
Kubernetes REST API that kubesage calls, over real HTTP on 127.0.0.1 and a free port,
so the tests drive the REAL ``kubernetes`` python client through a kubeconfig that the
fake writes. What it serves, with the shapes of the real API:

- ``GET /api/v1/nodes``, ``/api/v1/namespaces``, ``/api/v1/pods``,
  ``/api/v1/namespaces/{ns}/pods`` (lists with
  ``metadata.resourceVersion``; ``fieldSelector`` ``a.b=v``, ``a.b==v``, ``a.b!=v``;
  ``labelSelector`` ``k=v``, ``k!=v``, ``k``), single objects by name;
  ``?watch=true``: a chunked stream of ``{"type", "object"}`` JSON lines
  (``ADDED``/``MODIFIED``/``DELETED``/``BOOKMARK``), resuming after ``resourceVersion``;
  an object that leaves or enters a field selection becomes ``DELETED``/``ADDED`` as in
  the real watch cache; a ``resourceVersion`` older than the compacted history gets the
  real answer: HTTP 200 and one ``ERROR`` event holding a ``Status`` with code 410,
  reason ``Expired``. Namespaces get what the real API server sets on them: the
  immutable label ``kubernetes.io/metadata.name`` (re-set on every update) and
  ``status.phase: Active``.
- ``POST /api/v1/namespaces/{ns}/pods/{name}/binding`` and ``.../{ns}/bindings``: 201
  and a ``Status`` of ``Success``; the binding's annotations are copied onto the pod
  (as the real registry does); 409 ``Conflict`` with the registry's message when the
  UID precondition fails, the pod is being deleted, is already assigned or still has
  ``spec.schedulingGates``; 404 for a missing pod.
- ``/apis/coordination.k8s.io/v1/namespaces/{ns}/leases[/{name}]``: GET, POST (409
  ``AlreadyExists``), PUT with ``metadata.resourceVersion`` optimistic concurrency
  (409 ``Conflict``); 422 ``Invalid`` for ``spec.leaseDurationSeconds`` <= 0 or
  ``spec.leaseTransitions`` < 0 (:mod:`.coordination`).
- Custom resources ``/apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}]``
  (GET list/get, POST) for kinds registered with :meth:`FakeApiServer.register_custom`;
  ``kubesage.io/v1alpha1`` ``schedulingpolicies`` is registered by default.
- Discovery: ``GET /apis`` (an APIGroupList of the groups the fake stores),
  ``/apis/{group}`` and ``/apis/{group}/{version}`` (an APIResourceList).
- ``POST /api/v1/namespaces/{ns}/events`` (stored; :meth:`FakeApiServer.events` reads
  them back).
- ``POST /api/v1/namespaces/{ns}/pods/{name}/eviction`` (a policy/v1 ``Eviction``):
  the eviction subresource with PodDisruptionBudget semantics
  (:mod:`tests.fakes.disruption`): 201 and a ``Success`` Status, the pod deleted (the
  real one is deleted gracefully: here at once); 429 ``TooManyRequests`` with the real
  message and a ``DisruptionBudget`` cause when the budget allows no disruption (the
  pod stays); 500 for a pod under two budgets; 404 for a missing pod; 409 when the
  ``deleteOptions.preconditions.uid`` is not the pod's; 400 when the Eviction names
  another pod. With ``?dryRun=All`` the same checks and answer, and nothing changes.
- ``/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets``: GET, POST; ``status`` is
  kept as the disruption controller computes it, rewritten (a new resourceVersion and
  a ``MODIFIED`` event) whenever a pod or budget of the namespace changes.
- ``PATCH`` of any stored object with ``application/merge-patch+json`` (RFC 7386;
  ``null`` removes a key); built-in kinds also take
  ``application/strategic-merge-patch+json``, applied as a merge patch (no list merge
  keys: kubesage patches no lists); other patch types get 415. A
  ``metadata.resourceVersion`` in the patch is a precondition (409 ``Conflict``), a
  change of ``spec`` bumps ``metadata.generation``, a Job's negative
  ``spec.parallelism`` is 422 ``Invalid``. Kinds stored for it: batch/v1 ``jobs``, and
  the custom resources kubeflow.org/v1 ``pytorchjobs`` and flink.apache.org/v1beta1
  ``flinkdeployments`` (registered by default, as ``schedulingpolicies``).
- ``resource.k8s.io/v1`` (Dynamic Resource Allocation; ``FakeApiServer(dra=False)``
  leaves the group out, so its URLs answer 404 as on a cluster without it):
  cluster-scoped ``resourceslices`` (field selectors ``spec.driver``,
  ``spec.nodeName``) and ``deviceclasses``, namespaced ``resourceclaims`` with the
  ``/status`` subresource (GET, PUT, PATCH) and ``resourceclaimtemplates``; every
  write is defaulted and validated as the real registry does (:mod:`tests.fakes.dra`:
  422 ``Invalid`` naming the fields), a PUT with a stale ``metadata.resourceVersion``
  is 409 ``Conflict``, a claim's ``status.allocation`` cannot change once set (only be
  cleared, with ``reservedFor`` empty).

Test-side helpers add, modify and delete objects (each change gets a new
resourceVersion and a watch event), stand in for the controllers a real cluster runs
(:meth:`FakeApiServer.on_pod_deleted`: called with every deleted pod, e.g. to create a
ReplicaSet's replacement of an evicted pod — the real controller does it a moment
later, this fake at once), and inject faults: an HTTP error for the next
matching requests (:meth:`FakeApiServer.fail`, optionally after the change was applied,
as when a response is lost, or a 429 with ``Retry-After`` and
``details.retryAfterSeconds`` as priority and fairness sends it), dropped watch connections
(:meth:`FakeApiServer.drop_watches`), and compacted history
(:meth:`FakeApiServer.compact`).


The package: :mod:`.resources` (the kinds, statuses and errors), :mod:`.selectors`,
:mod:`.store` (objects, resourceVersions and the registry's checks), :mod:`.watch`
(the watch history and streams), :mod:`.discovery`, :mod:`.handler` (the HTTP routes)
and :mod:`.server` (:class:`FakeApiServer`: lifecycle, test-side helpers and faults).
"""

from tests.fakes.apiserver.resources import (
    CONFIG_MAPS,
    DEVICE_CLASSES,
    EVENTS,
    FLINK_DEPLOYMENTS,
    JOBS,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
    PYTORCH_JOBS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SCHEDULING_POLICIES,
    TOKEN,
    ApiError,
    Obj,
    Resource,
    status,
    wait_until,
)
from tests.fakes.apiserver.selectors import Selector
from tests.fakes.apiserver.server import FakeApiServer

__all__ = [
    "CONFIG_MAPS",
    "DEVICE_CLASSES",
    "EVENTS",
    "FLINK_DEPLOYMENTS",
    "JOBS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PDBS",
    "PODS",
    "PYTORCH_JOBS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_SLICES",
    "SCHEDULING_POLICIES",
    "TOKEN",
    "ApiError",
    "FakeApiServer",
    "Obj",
    "Resource",
    "Selector",
    "status",
    "wait_until",
]
