"""deploy/helm/kubesage: the Helm chart, rendered offline without a helm binary through
the Helm library that helm-python-sdk (module ``helm_python``) binds.

- A table of values (each mode × webhook × TLS source × one or three replicas, plus
  leader election off, every loop and server option set, another release name, ...)
  renders; every built-in kind validates strictly with kubernetes-validate at the newest
  schema it ships (and the defaults also at the project's floor,
  ``kubesage.core.k8s.validation.KUBERNETES_VERSION``); ServiceMonitor, cert-manager's
  kinds and the KubeSchedulerConfiguration against the strict models of
  manifests_support.py; the example SchedulingPolicies against the rendered CRD.
- The Deployment's arguments parse with ``kubesage serve``'s own option parser, and
  every in-cluster ``serve`` option is reachable from the values.
- RBAC grants exactly the calls the code makes in that mode.
- The default values render the objects of the kustomize overlays
  (test_helm_matches_kustomize.py); TLS from the bootstrap (test_helm_tls.py).
- values.schema.json refuses bad values, naming them; Helm's lint passes.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from kubesage.core.k8s.policy_source import default_policy_dir
from kubesage.core.k8s.validation import validate_manifests
from kubesage.core.policy.registry import policy_names
from tests.deploy.helm_support import (
    CHART,
    CURRENT_KUBERNETES,
    NAMESPACE,
    RELEASE,
    electing,
    merged,
    render,
    serve_command,
    serve_options,
)
from tests.deploy.manifests_support import (
    CLIENT_CALLS,
    CRD_KINDS,
    DEPLOY,
    MIG_CONFIG_MAP_CALLS,
    ROOT,
    CustomObject,
    called_client_methods,
    client_calls_by_file,
    find,
    granted,
    needed,
    rbac_rows_missing,
    scheduler_configuration,
    validate_custom,
)

LEADER_ONLY_CALLS = {
    # Client calls made only by kubesage's own scheduler and its Lease, which serve.py
    # builds only under --scheduler-name: without it the chart grants neither.
    "create_namespaced_event": Path("core/k8s/scheduling_events.py"),
    "patch_namespaced_pod_status": Path("core/k8s/scheduling_events.py"),
    "read_namespaced_lease": Path("core/k8s/leader.py"),
    "create_namespaced_lease": Path("core/k8s/leader.py"),
    "replace_namespaced_lease": Path("core/k8s/leader.py"),
}

NOT_VALUES = {
    # `kubesage serve` options the chart does not expose, and why.
    "kubeconfig": "in a pod the in-cluster service account is the configuration",
    "context": "a kubeconfig context; none in a pod",
    "embedded": "the embedded simulated cluster is for trying kubesage out, not a cluster",
    "nodes": "embedded cluster only",
    "fill": "embedded cluster only",
    "policies_dir": "embedded cluster only (in a cluster policies are API objects)",
    "arrivals_per_s": "embedded cluster only",
    "pod_lifetime_s": "embedded cluster only",
    "host": "fixed: the pod listens on all addresses",
    "tls_cert": "fixed: the mounted Secret",
    "tls_key": "fixed: the mounted Secret",
}


MODES = ("extender", "secondary", "both")
CASES: dict[str, dict[str, Any]] = {
    f"{mode}-webhook-{'on' if webhook else 'off'}-{tls}-{replicas}r": {
        "mode": mode,
        "webhook": {"enabled": webhook},
        "tls": {"source": tls},
        "replicas": replicas,
    }
    for mode, webhook, tls, replicas in itertools.product(
        MODES, (True, False), ("selfSigned", "certManager"), (1, 3)
    )
}
CASES |= {
    "defaults": {},
    "extender-no-leader-election-1r": {
        "mode": "extender",
        "leaderElection": {"enabled": False},
        "replicas": 1,
    },
    "extender-no-leader-election-dry-run-3r": {
        "mode": "extender",
        "leaderElection": {"enabled": False},
        "replicas": 3,
        "loop": {"dryRun": True},
    },
    "every-option": {
        "schedulerName": "gpu-scheduler",
        "policy": "gpupacking",
        "logLevel": "debug",
        "image": {
            "repository": "registry.example/kubesage",
            "tag": "1.2.3",
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "loop": {
            "tickS": 2.5,
            "dryRun": True,
            "maxEvictionsPerTick": 0,
            "forecastWeight": 0.3,
            "topology": "dgx-h100-pod",
            "prometheus": "http://prometheus.monitoring.svc:9090",
            "migConfigMap": "gpu-operator/custom-mig-config",
            "metricMap": {"configMap": "site-metric-map", "key": "map.yaml"},
            "auditLog": "/tmp/audit.jsonl",
            "forecastModel": {"configMap": "gpu-forecast", "key": "gpu.safetensors"},
        },
        "server": {
            "maxUrlBytes": 4096,
            "maxHeaderBytes": 16384,
            "maxHeaders": 50,
            "headerTimeoutS": 5,
            "keepAliveS": 2.5,
            "stallTimeoutS": 1.5,
            "shutdownDelayS": 8,
        },
        "webhook": {"failurePolicy": "Fail", "timeoutSeconds": 5, "excludedNamespaces": ["a", "b"]},
        "extender": {"profileSchedulerName": "gpu-extender", "weight": 10, "httpTimeout": "2s"},
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "tmpSizeLimit": "256Mi",
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        "priorityClassName": "system-cluster-critical",
        "podAnnotations": {"example.com/team": "platform"},
        "podLabels": {"team": "platform"},
        "service": {"port": 8443},
        "containerPort": 9443,
    },
    "bare": {
        "namespace": {"create": False},
        "crds": {"install": False},
        "serviceMonitor": {"enabled": False},
        "podDisruptionBudget": {"enabled": False},
    },
    "model-from-claim": {
        "loop": {"forecastModel": {"persistentVolumeClaim": "forecasts", "key": "gpu.st"}}
    },
    "cert-manager-cluster-issuer": {
        "tls": {
            "source": "certManager",
            "certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "internal-ca"}},
        }
    },
}
OTHER_RELEASE = ("prod", "scheduling")
"""A release name without the chart's: objects are named prod-kubesage."""


@pytest.fixture(scope="module")
def renders(helm: ModuleType) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every case: its merged values and its objects."""
    return {case: (merged(helm, values), render(helm, values)) for case, values in CASES.items()}


def objects_of(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    for case, (values, docs) in renders.items():
        for doc in docs:
            yield case, values, doc


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (only,) = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    result: dict[str, Any] = only
    return result


# --- validation ----------------------------------------------------------------------------


def test_every_builtin_object_validates_at_a_current_kubernetes(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    unique = {  # many cases render some objects identically: validate each one once
        json.dumps(doc, sort_keys=True): doc
        for _, _, doc in objects_of(renders)
        if (doc["apiVersion"], doc["kind"]) not in CRD_KINDS
    }
    validate_manifests(unique.values(), CURRENT_KUBERNETES)
    assert {doc["kind"] for doc in unique.values()} == {
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "MutatingWebhookConfiguration",
        "ConfigMap",
        "Secret",
    }


def test_default_objects_validate_at_the_projects_floor_too(helm: ModuleType) -> None:
    docs = render(helm)
    validate_manifests(d for d in docs if (d["apiVersion"], d["kind"]) not in CRD_KINDS)


def test_custom_kinds_match_their_api_shapes(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    seen = set()
    for case, values, doc in objects_of(renders):
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            obj: CustomObject = validate_custom(doc)
            assert obj.metadata["namespace"] == NAMESPACE, (case, doc["metadata"])
            seen.add(doc["kind"])
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-scheduler-config"):
            config = scheduler_configuration(doc)
            (extender,) = config.extenders
            assert extender.weight == values["extender"]["weight"] > 0
            assert [r.name for r in extender.managedResources] == values["extender"][
                "managedResources"
            ]
    assert seen == {"ServiceMonitor", "Certificate", "Issuer"}


def test_example_policies_validate_against_the_rendered_crd(helm: ModuleType) -> None:
    crd = find(render(helm), "CustomResourceDefinition")
    (version,) = crd["spec"]["versions"]
    validator = jsonschema.Draft202012Validator(version["schema"]["openAPIV3Schema"])
    examples = sorted(default_policy_dir().glob("*.yaml"))
    assert len(examples) >= 3
    for path in examples:
        validator.validate(yaml.safe_load(path.read_text()))


def test_the_charts_crd_is_the_generated_one(helm: ModuleType) -> None:
    base = DEPLOY / "base" / "crd-schedulingpolicy.yaml"
    copy_in_chart = CHART / "files" / "crd-schedulingpolicy.yaml"
    assert copy_in_chart.read_text() == base.read_text(), (
        "the chart's CRD is stale: cp deploy/base/crd-schedulingpolicy.yaml "
        "deploy/helm/kubesage/files/"
    )
    rendered = find(render(helm), "CustomResourceDefinition")
    assert rendered["spec"] == yaml.safe_load(base.read_text())["spec"]


# --- what the values switch ----------------------------------------------------------------


def test_values_switch_the_objects(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    for case, (values, docs) in renders.items():
        kinds = [doc["kind"] for doc in docs]
        has = set(kinds)
        args = container(docs)["args"]
        assert has >= {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"}, case
        assert ("MutatingWebhookConfiguration" in has) == values["webhook"]["enabled"], case
        extender_config = values["mode"] in ("extender", "both")
        assert ("ConfigMap" in has) == extender_config, case
        assert (f"--scheduler-name={values['schedulerName']}" in args) == electing(values), case
        assert ("Role" in has and "RoleBinding" in has) == electing(values), case
        cert_manager = values["tls"]["source"] == "certManager"
        assert ("Certificate" in has) == cert_manager, case
        assert ("Secret" in has) == (not cert_manager), case
        assert ("--dry-run" in args) == values["loop"]["dryRun"], case
        pdb = values["podDisruptionBudget"]["enabled"] and values["replicas"] > 1
        assert ("PodDisruptionBudget" in has) == pdb, case
        assert ("Namespace" in has) == values["namespace"]["create"], case
        assert ("CustomResourceDefinition" in has) == values["crds"]["install"], case
        assert ("ServiceMonitor" in has) == values["serviceMonitor"]["enabled"], case
        assert find(docs, "Deployment")["spec"]["replicas"] == values["replicas"], case
        assert len(kinds) == len({(d["kind"], d["metadata"]["name"]) for d in docs}), case


def test_pod_values_reach_the_pod(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    values, docs = renders["every-option"]
    template = find(docs, "Deployment")["spec"]["template"]
    pod, c = template["spec"], container(docs)
    assert c["image"] == "registry.example/kubesage:1.2.3" and c["imagePullPolicy"] == "Always"
    assert c["resources"] == values["resources"]
    assert c["ports"][0]["containerPort"] == 9443
    assert template["metadata"]["labels"]["team"] == "platform"
    assert template["metadata"]["annotations"] == values["podAnnotations"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["nodeSelector"] == values["nodeSelector"]
    assert pod["tolerations"] == values["tolerations"]
    metric_map = next(v for v in pod["volumes"] if v["name"] == "metric-map")
    assert metric_map["configMap"] == {
        "name": "site-metric-map", "items": [{"key": "map.yaml", "path": "map.yaml"}]
    }  # fmt: skip
    mount = {"name": "metric-map", "mountPath": "/etc/kubesage/metric-map", "readOnly": True}
    assert mount in c["volumeMounts"]
    assert "--metric-map=/etc/kubesage/metric-map/map.yaml" in c["args"]
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"]["sizeLimit"] == "256Mi"
    service = find(docs, "Service")["spec"]["ports"][0]
    (webhook,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert webhook["clientConfig"]["service"]["port"] == service["port"] == 8443
    assert webhook["failurePolicy"] == "Fail" and webhook["timeoutSeconds"] == 5
    excluded = webhook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert excluded == ["a", "b", NAMESPACE]
    default_pod = find(renders["defaults"][1], "Deployment")["spec"]["template"]["spec"]
    assert "podAntiAffinity" in default_pod["affinity"]


def test_the_arguments_parse_as_kubesage_serve_options(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    for case, (values, docs) in renders.items():
        options = serve_options(container(docs)["args"])
        assert options["policy"] == values["policy"], case
        assert options["port"] == values["containerPort"], case
        assert options["scheduler_name"] == (values["schedulerName"] if electing(values) else None)
        assert options["dry_run"] is values["loop"]["dryRun"], case
    everything = serve_options(container(renders["every-option"][1])["args"])
    assert everything["tick_s"] == 2.5 and everything["max_evictions_per_tick"] == 0
    assert everything["forecast_weight"] == 0.3 and everything["max_headers"] == 50
    assert everything["prometheus"] == "http://prometheus.monitoring.svc:9090"
    assert everything["header_timeout_s"] == 5.0 and everything["keep_alive_s"] == 2.5
    assert everything["stall_timeout_s"] == 1.5
    assert everything["forecast_model"] == Path("/etc/kubesage/forecast/gpu.safetensors")
    pod = find(renders["every-option"][1], "Deployment")["spec"]["template"]["spec"]
    item = {"key": "gpu.safetensors", "path": "gpu.safetensors"}
    model = {"name": "gpu-forecast", "items": [item]}
    assert {"name": "forecast-model", "configMap": model} in pod["volumes"]
    mount = {"name": "forecast-model", "mountPath": "/etc/kubesage/forecast", "readOnly": True}
    assert mount in container(renders["every-option"][1])["volumeMounts"]
    defaults = renders["defaults"][1]
    assert serve_options(container(defaults)["args"])["forecast_model"] is None
    volumes = find(defaults, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert "forecast-model" not in {v["name"] for v in volumes}


def test_a_model_too_large_for_a_configmap_comes_from_a_claim(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    docs = renders["model-from-claim"][1]
    pod = find(docs, "Deployment")["spec"]["template"]["spec"]
    claim = {"claimName": "forecasts", "readOnly": True}
    assert {"name": "forecast-model", "persistentVolumeClaim": claim} in pod["volumes"]
    mount = {"name": "forecast-model", "mountPath": "/etc/kubesage/forecast", "readOnly": True}
    assert mount in container(docs)["volumeMounts"]
    options = serve_options(container(docs)["args"])
    assert options["forecast_model"] == Path("/etc/kubesage/forecast/gpu.st")


def test_every_in_cluster_serve_option_is_a_value(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    """A new `kubesage serve` option fails this until the chart exposes it (or it is
    listed in NOT_VALUES with the reason)."""
    command = serve_command()
    defaults = {param.name: param.default for param in command.params}
    options = serve_options(container(renders["every-option"][1])["args"])
    not_set = {
        name for name, value in options.items() if value == defaults[name] and name != "dry_run"
    }
    unexposed = not_set - NOT_VALUES.keys() - {"port"}
    assert not unexposed, f"expose these serve options as chart values: {sorted(unexposed)}"
    assert NOT_VALUES.keys() <= defaults.keys()


def test_names_follow_the_release(helm: ModuleType) -> None:
    release, namespace = OTHER_RELEASE
    values = {"schedulerName": "gpu-scheduler", "tls": {"source": "certManager"}}
    docs = render(helm, values, release=release, namespace=namespace)
    fullname = f"{release}-kubesage"
    service = find(docs, "Service", fullname)
    assert service["metadata"]["namespace"] == namespace
    pod = find(docs, "Deployment", fullname)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == fullname
    assert set(service["spec"]["selector"].items()) <= set(
        find(docs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )
    (webhook,) = find(docs, "MutatingWebhookConfiguration", fullname)["webhooks"]
    assert webhook["clientConfig"]["service"]["name"] == fullname
    excluded = webhook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert excluded == ["kube-system", namespace]
    annotations = find(docs, "MutatingWebhookConfiguration")["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == f"{namespace}/{fullname}-webhook"
    certificate = find(docs, "Certificate", f"{fullname}-webhook")
    assert f"{fullname}.{namespace}.svc" in certificate["spec"]["dnsNames"]
    tls_volume = {"name": "tls", "secret": {"secretName": certificate["spec"]["secretName"]}}
    assert tls_volume in pod["volumes"]
    role = find(docs, "Role", f"{fullname}-leader-election")
    assert [r["resourceNames"] for r in role["rules"] if "resourceNames" in r] == [
        ["kubesage-gpu-scheduler"]  # serve.py: kubesage-<scheduler name>
    ]
    config = scheduler_configuration(find(docs, "ConfigMap", f"{fullname}-scheduler-config"))
    assert config.extenders[0].urlPrefix == f"https://{fullname}.{namespace}.svc:443/scheduler"
    monitor = find(docs, "ServiceMonitor", fullname)
    assert all(
        service["metadata"]["labels"][k] == v
        for k, v in monitor["spec"]["selector"]["matchLabels"].items()
    )


# --- RBAC ---------------------------------------------------------------------------------


def test_rbac_grants_exactly_what_the_code_calls_in_each_mode(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    calls = client_calls_by_file()
    for method, path in LEADER_ONLY_CALLS.items():
        assert calls.get(method) == {path}, f"{method} is called outside {path}: {calls[method]}"
    called = called_client_methods()
    unknown = called - CLIENT_CALLS.keys()
    assert not unknown, f"add the RBAC these calls need (and CLIENT_CALLS): {sorted(unknown)}"
    everything = needed(called)
    leader_only = needed(LEADER_ONLY_CALLS)
    mig_config_map = needed(MIG_CONFIG_MAP_CALLS)
    for case, (values, docs) in renders.items():
        expected = everything if electing(values) else everything - leader_only
        if not values["loop"]["migConfigMap"]:
            expected = expected - mig_config_map
        assert granted(docs) == expected, case


def test_the_mig_config_map_role_is_that_one_configmap_in_its_namespace(
    renders: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]],
) -> None:
    values, docs = renders["every-option"]
    namespace, name = values["loop"]["migConfigMap"].split("/")
    role = find(docs, "Role", "kubesage-mig-config")
    assert role["metadata"]["namespace"] == namespace
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name],
         "verbs": ["get", "update"]}
    ]  # fmt: skip
    binding = find(docs, "RoleBinding", "kubesage-mig-config")
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    assert serve_options(container(docs)["args"])["mig_config_map"] == f"{namespace}/{name}"
    assert not [d for d in renders["defaults"][1] if d["metadata"]["name"].endswith("mig-config")]


def test_every_rbac_rule_is_justified_in_the_docs(helm: ModuleType) -> None:
    missing = rbac_rows_missing((ROOT / "docs" / "deploy.md").read_text(), granted(render(helm)))
    assert not missing, f"docs/deploy.md has no RBAC row for {missing}"


# --- the schema and lint ------------------------------------------------------------------

BAD_VALUES = [
    ({"mode": "foo"}, "/mode"),
    ({"replicas": -1}, "/replicas"),
    ({"replicas": 1.5}, "/replicas"),
    ({"bogus": True}, "'bogus' not allowed"),
    ({"loop": {"tikS": 5}}, "'tikS' not allowed"),
    ({"policy": "fastest"}, "/policy"),
    ({"mode": "both", "leaderElection": {"enabled": False}}, "/leaderElection/enabled"),
    ({"mode": "extender", "leaderElection": {"enabled": False}}, "/replicas"),
    ({"loop": {"forecastWeight": 2}}, "/loop/forecastWeight"),
    ({"loop": {"tickS": 0}}, "/loop/tickS"),
    ({"loop": {"maxEvictionsPerTick": -1}}, "/loop/maxEvictionsPerTick"),
    ({"loop": {"prometheus": "prometheus:9090"}}, "/loop/prometheus"),
    ({"loop": {"migConfigMap": "custom-mig-config"}}, "/loop/migConfigMap"),
    ({"loop": {"metricMap": {"configMap": "Site Map", "key": "m"}}}, "/loop/metricMap"),
    ({"loop": {"metricMap": {"configMap": "site-map", "key": "m"}}}, "/loop/prometheus"),
    ({"loop": {"forecastModel": {"configMap": "Gpu_Model", "key": "m"}}}, "/loop/forecastModel"),
    (
        {"loop": {"forecastModel": {"configMap": "small", "persistentVolumeClaim": "large"}}},
        "/loop/forecastModel",
    ),
    ({"server": {"maxHeaders": 0}}, "/server/maxHeaders"),
    ({"webhook": {"timeoutSeconds": 60}}, "/webhook/timeoutSeconds"),
    ({"tls": {"source": "vault"}}, "/tls/source"),
    ({"schedulerName": "Kube Sage"}, "/schedulerName"),
    ({"extender": {"weight": 0}}, "/extender/weight"),
    ({"tls": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}}, "/tls/certManager"),
    ({"loop": {"auditLog": "/var/log/audit.jsonl"}}, "/loop/auditLog"),
]


@pytest.mark.parametrize(("values", "named"), BAD_VALUES, ids=[n for _, n in BAD_VALUES])
def test_the_schema_refuses_a_bad_value_naming_it(
    helm: ModuleType, values: dict[str, Any], named: str
) -> None:
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmValuesError) as refused:
            chart.validate_schema(values)
        assert named in str(refused.value)
        with pytest.raises(helm.HelmValuesError) as at_render:
            chart.render(values, name=RELEASE, namespace=NAMESPACE)
        assert named in str(at_render.value)


def test_the_schema_knows_every_policy_and_accepts_the_defaults(helm: ModuleType) -> None:
    with helm.Chart.load(CHART) as chart:
        assert chart.schema is not None
        assert chart.schema["properties"]["policy"]["enum"] == policy_names()
        for values in CASES.values():
            chart.validate_schema(values)


@pytest.mark.parametrize(
    "case", ["defaults", "every-option", "bare", "extender-webhook-off-certManager-1r"]
)
def test_helm_lint_passes(helm: ModuleType, case: str) -> None:
    report = helm.lint(
        CHART,
        CASES[case],
        strict=True,
        namespace=NAMESPACE,
        kube_version=f"v{CURRENT_KUBERNETES}",
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert report["total_charts_linted"] == 1
    assert not report["errors"] and not problems, report


def test_notes_say_how_to_check_the_install(helm: ModuleType) -> None:
    with helm.Chart.load(CHART) as chart:
        notes = chart.render({}, name=RELEASE, namespace=NAMESPACE)["kubesage/templates/NOTES.txt"]
    assert "kubectl -n kubesage rollout status deployment/kubesage" in notes
    assert "kubesage-scheduler-config" in notes
