"""The deployment files validate with the tools that run here (nothing is deployed): the
Kubernetes manifests against the API schemas (kubernetes-validate, strict) and kustomize, the
compose file against the compose specification (check-jsonschema), the systemd units with
systemd-analyze, and the Dockerfile's sources and commands against the repository."""

from __future__ import annotations

import re
import shutil
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
        ["ConfigMap", "Deployment", "Deployment", "Service"] + ["PodDisruptionBudget"] * 2
    )
    (config,) = [d for d in documents if d["kind"] == "ConfigMap"]
    assert config["metadata"]["name"].startswith("fathom-")  # hashed: a change rolls the pods
    for deployment in (d for d in documents if d["kind"] == "Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert container["image"] == "registry.example.com/fathom:0.1.0"
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


def test_the_dockerfile_copies_what_exists_and_runs_real_commands() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for sources in re.findall(r"^COPY (?!--from)(.+?) \S+$", dockerfile, re.MULTILINE):
        for source in sources.split():
            assert (ROOT / source).exists(), source
    assert "USER fathom" in dockerfile and "HEALTHCHECK" in dockerfile
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
    from core.grammar import (
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
