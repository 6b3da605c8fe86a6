"""API discovery documents for the groups the fake stores."""

from __future__ import annotations

from collections.abc import Sequence

from tests.fakes.apiserver.resources import WITH_STATUS, ApiError, Obj, Resource


def discovery_document(stored: Sequence[Resource], path: str) -> Obj:
    """``GET /apis`` (an APIGroupList of the groups of the ``stored`` kinds),
    ``/apis/{group}`` (an APIGroup) and ``/apis/{group}/{version}`` (an
    APIResourceList); 404 otherwise."""
    resources = [r for r in stored if r.group]
    versions: dict[str, list[str]] = {}
    for resource in resources:
        known = versions.setdefault(resource.group, [])
        if resource.version not in known:
            known.append(resource.version)

    def group(name: str) -> Obj:
        listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions[name]]
        return {"name": name, "versions": listed, "preferredVersion": listed[0]}

    parts = [part for part in path.split("/") if part][1:]
    if not parts:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [group(name) for name in sorted(versions)],
        }
    if parts[0] in versions and len(parts) == 1:
        return {"kind": "APIGroup", "apiVersion": "v1", **group(parts[0])}
    if len(parts) == 2 and parts[1] in versions.get(parts[0], []):
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{parts[0]}/{parts[1]}",
            "resources": [
                entry
                for r in resources
                if (r.group, r.version) == (parts[0], parts[1])
                for entry in [
                    {
                        "name": r.plural,
                        "singularName": r.kind.lower(),
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": [
                            "create",
                            "delete",
                            "get",
                            "list",
                            "patch",
                            "update",
                            "watch",
                        ],
                    },
                    *(
                        [
                            {
                                "name": f"{r.plural}/status",
                                "singularName": "",
                                "namespaced": r.namespaced,
                                "kind": r.kind,
                                "verbs": ["get", "patch", "update"],
                            }
                        ]
                        if r in WITH_STATUS
                        else []
                    ),
                ]
            ],
        }
    raise ApiError(404, f"the server could not find the requested resource {path}")
