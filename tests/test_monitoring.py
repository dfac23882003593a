"""deploy/monitoring: the alert rules and the Grafana dashboard read what Fathom's processes
really export.

A served app (the real ``fathom serve`` app against fake Slack, LLM and search servers) takes
over the run of a replica that died, while Slack answers HTTP 500 to one ``chat.update`` (the
shape of an outage: Slack's Web API answers 5xx, https://api.slack.com/apis/web-api#responses)
and a forged request is refused. Its ``/metrics`` is scraped; then every metric and label that
an alert or a dashboard panel names must be in that scrape, and ``promtool test rules`` (from
Debian's ``prometheus`` package, when installed) evaluates each alert on series whose names
and labels are those of the scrape.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from storage import Database, Store
from tests.chat_app import wait_for
from tests.fakes.slack import FakeSlackServer, slash_command_body
from tests.runs import age_heartbeat, new_run
from tests.runs import claim as take
from tests.test_metrics import samples, value
from tests.test_slack_app import (  # noqa: F401 (fixture)
    FORM,
    BotFactory,
    _clean_env,
    start_bot,
)

MONITORING = Path(__file__).resolve().parent.parent / "deploy" / "monitoring"
RULES = MONITORING / "alerts.rules.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
#: Labels Prometheus adds to every scraped series (the target's), and histograms' bucket bound.
TARGET_LABELS = {"job", "instance", "le"}
METRIC = re.compile(r"\b((?:fathom|process)_[a-z_]+)\b")
SELECTOR = re.compile(r"\b((?:fathom|process)_[a-z_]+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"')
GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)")
#: Any name used as a series selector (followed by ``{`` or ``[``).
SELECTED = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*[{\[]")


def alert_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    return rules


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"]


def expressions() -> list[tuple[str, str]]:
    return [(rule["alert"], rule["expr"]) for rule in alert_rules()] + list(dashboard_expressions())


def exported_labels(scrape: str) -> dict[str, set[str]]:
    """Each sample name of the scrape and the labels its series carry."""
    labels: dict[str, set[str]] = {}
    for name, pairs in samples(scrape):
        labels.setdefault(name, set()).update(label for label, _ in pairs)
    return labels


def problems_with(expressions: list[tuple[str, str]], scrape: str) -> list[str]:
    """What each expression names that the scrape does not have: a metric, a label of a
    selector, a label it groups or matches on."""
    exported = exported_labels(scrape)
    found: list[str] = []
    for where, expr in expressions:
        names = set(METRIC.findall(expr))
        if not names:
            found.append(f"{where}: names no Fathom metric")
        for selected in SELECTED.findall(expr):
            if selected not in names and selected not in {"by", "on", "without", "ignoring"}:
                found.append(f"{where}: selects {selected}, which no Fathom process exports")
        for name in names - exported.keys():
            found.append(f"{where}: {name} is not in the scrape")
        for name, matchers in SELECTOR.findall(expr):
            for label in MATCHER.findall(matchers):
                if label not in exported.get(name, set()):
                    found.append(f"{where}: {name} has no label {label}")
        known = set().union(*(exported.get(n, set()) for n in names)) | TARGET_LABELS
        for grouping in GROUPING.findall(expr):
            for label in (part.strip() for part in grouping.split(",")):
                if label and label not in known:
                    found.append(f"{where}: groups or matches on {label}, which it has not")
    return found


@pytest.fixture
async def scrape(
    start_bot: BotFactory,  # noqa: F811
    slack_server: FakeSlackServer,
    database_url: str,
    database: Database,
) -> str:
    """The served app's /metrics after a takeover, a Slack 500 and a forged request."""
    store = Store(database)
    run, _ = await new_run(store, topic="tidal power", depth=1, thread_key=THREAD)
    await take(store, run.id, owner="replica-that-died")
    await age_heartbeat(database, run.id)
    slack_server.fake.fail_next("chat.update", status=500)
    bot = await start_bot(
        database_url=database_url, FATHOM_PRICES=json.dumps({"gpt-4o": [2.5, 10]})
    )  # its runner's first sweep takes the dead replica's run over

    async def delivered() -> bool:
        current = await store.runs.get_run(run.id)
        return current is not None and current.delivery == "posted"

    await wait_for(delivered)
    forged = await bot.post(slash_command_body("forged"), FORM, secret="not-the-secret")
    assert forged.status_code == 401
    assert (await bot.http.get(f"{bot.url}/readyz")).status_code == 200
    return (await bot.http.get(f"{bot.url}/metrics")).text


THREAD = "slack:T0001:C0001:1700000000.000100"


async def test_a_slack_500_and_a_takeover_show_in_the_metrics(scrape: str) -> None:
    assert value(scrape, "fathom_run_claims_total", how="taken_over") == 1
    assert value(scrape, "fathom_run_claims_total", how="new") == 0
    edits = {"platform": "slack", "method": "edit_progress"}
    assert value(scrape, "fathom_platform_api_calls_total", **edits, outcome="error") == 1
    assert value(scrape, "fathom_platform_api_calls_total", **edits, outcome="ok") >= 1
    assert value(scrape, "fathom_ingress_refused_total", route="/slack/events") == 1
    finished = {"status": "succeeded", "platform": "slack", "strategy": "iterative"}
    assert value(scrape, "fathom_runs_finished_total", **finished) == 1


async def test_every_alert_and_panel_reads_metrics_the_process_exports(scrape: str) -> None:
    assert value(scrape, "fathom_ingress_requests_total", route="/readyz", status="200") == 1
    assert "\n".join(problems_with(expressions(), scrape)) == ""
    # The check itself catches a misspelt metric, label or grouping.
    broken = [
        ("typo", "sum(rate(fathom_platform_api_call_total[5m]))"),
        ("label", 'sum(rate(fathom_platform_api_calls_total{status="error"}[5m]))'),
        ("grouping", "sum by (model) (rate(fathom_searches_total[5m]))"),
        ("foreign", "sum(kube_pod_container_status_restarts_total[5m])"),
    ]
    assert [where for where, expr in broken if problems_with([(where, expr)], scrape)] == [
        where for where, _ in broken
    ]


def test_the_prometheus_rule_carries_the_rule_file_s_groups() -> None:
    (rule,) = yaml.safe_load_all((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_the_service_monitor_scrapes_the_ports_the_deployments_name() -> None:
    """The headless Services select the serve and worker pods by the labels and named ports
    of deploy/kubernetes."""
    docs = list(yaml.safe_load_all((MONITORING / "servicemonitor.yaml").read_text()))
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    deployments = {
        d["metadata"]["name"]: d
        for path in (MONITORING.parent / "kubernetes").glob("*.yaml")
        for d in yaml.safe_load_all(path.read_text())
        if d and d.get("kind") == "Deployment"
    }
    for service in services.values():
        assert service["spec"]["clusterIP"] == "None"
        selector = service["spec"]["selector"]
        (deployment,) = [
            d
            for d in deployments.values()
            if d["spec"]["template"]["metadata"]["labels"].items() >= selector.items()
        ]
        named = {
            port["name"]
            for container in deployment["spec"]["template"]["spec"]["containers"]
            for port in container.get("ports", [])
        }
        (port,) = service["spec"]["ports"]
        assert port["targetPort"] in named
        assert (
            service["metadata"]["labels"].items()
            >= monitor["spec"]["selector"]["matchLabels"].items()
        )
        assert port["name"] == monitor["spec"]["endpoints"][0]["port"]


def test_the_monitoring_files_pass_yamllint_and_the_dashboard_is_grafana_json() -> None:
    """yamllint --strict with the repository's .yamllint.yaml (as for deploy/kubernetes), and
    a dashboard whose panels each have their own id and a query of the chosen data source."""
    pytest.importorskip("yamllint")
    linted = subprocess.run(
        [
            sys.executable,
            "-m",
            "yamllint",
            "--strict",
            "--config-file",
            str(MONITORING.parent.parent / ".yamllint.yaml"),
            str(MONITORING),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (linted.returncode, linted.stdout, linted.stderr) == (0, "", "")
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) > 10
    assert all(
        target["datasource"]["uid"] == "${datasource}"
        for panel in dashboard["panels"]
        for target in panel["targets"]
    )


# -- promtool ---------------------------------------------------------------------------


def series(name: str, labels: dict[str, str], **changed: str) -> str:
    """A promtool input series: a scraped series' name and labels (``changed``: a label set
    to another of its values), on one target."""
    pairs = {**labels, **changed, "job": "fathom-serve-metrics", "instance": "10.0.0.7:9000"}
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items()))
    return f"{name}{{{inner}}}"


def scraped(scrape: str, name: str, **labels: str) -> dict[str, str]:
    """The labels of the one scraped series of ``name`` that has ``labels``."""
    (found,) = [
        dict(pairs)
        for sample, pairs in samples(scrape)
        if sample == name and dict(pairs).items() >= labels.items()
    ]
    return found


def rules_test(scrape: str, rules: Path) -> dict[str, Any]:
    """Each alert fired by series with the scrape's names and labels, and none by the same
    series standing still."""
    calls = "fathom_platform_api_calls_total"
    error = scraped(scrape, calls, platform="slack", method="edit_progress", outcome="error")
    ok = scraped(scrape, calls, platform="slack", method="edit_progress", outcome="ok")
    finished = scraped(scrape, "fathom_runs_finished_total", status="succeeded")
    delivered = scraped(scrape, "fathom_platform_calls_total", outcome="delivered")
    start = scraped(scrape, "process_start_time_seconds")
    build = scraped(scrape, "fathom_build_info")
    taken = scraped(scrape, "fathom_run_claims_total", how="taken_over")
    queue = scraped(scrape, "fathom_queue_depth")
    target = {"job": "fathom-serve-metrics", "instance": "10.0.0.7:9000"}
    failing = [
        {"series": series(calls, error), "values": "0+10x40"},
        {"series": series(calls, ok), "values": "5+0x40"},
        {"series": series(calls, ok, outcome="rate_limited"), "values": "0+10x40"},
        {"series": series("fathom_runs_finished_total", finished), "values": "1+1x40"},
        {
            "series": series("fathom_runs_finished_total", finished, status="failed"),
            "values": "0+2x40",
        },
        {
            "series": series("fathom_platform_calls_total", delivered, outcome="failed"),
            "values": "0+1x40",
        },
        {"series": series("process_start_time_seconds", start), "values": "1000+60x40"},
        {"series": series("fathom_build_info", build), "values": "1+0x40"},
        {"series": series("fathom_run_claims_total", taken), "values": "0+1x40"},
        {"series": series("fathom_queue_depth", queue), "values": "11+1x40"},
    ]
    fired = {
        "FathomPlatformFailing": [{"severity": "critical", "platform": "slack"}],
        "FathomPlatformRateLimited": [{"severity": "warning", "platform": "slack"}],
        "FathomDeliveriesGivenUp": [{"severity": "warning", "platform": "slack"}],
        "FathomRunsFailing": [{"severity": "critical"}],
        "FathomProcessRestarting": [{"severity": "critical", **target}],
        "FathomRunsTakenOver": [{"severity": "warning"}],
        "FathomQueueGrowing": [{"severity": "warning"}],
    }
    assert set(fired) == {rule["alert"] for rule in alert_rules()}  # each alert tested
    still = [{**s, "values": s["values"].split("+")[0] + "+0x40"} for s in failing]
    return {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": failing,
                "alert_rule_test": [
                    {
                        "eval_time": "35m",
                        "alertname": name,
                        "exp_alerts": [{"exp_labels": labels} for labels in expected],
                    }
                    for name, expected in fired.items()
                ],
            },
            {
                "interval": "1m",
                "input_series": still,
                "alert_rule_test": [
                    {"eval_time": "35m", "alertname": name, "exp_alerts": []} for name in fired
                ],
            },
        ],
    }


async def test_promtool_fires_each_alert_on_the_scraped_series(scrape: str, tmp_path: Path) -> None:
    """``promtool check rules`` on both rule files, then ``promtool test rules`` (the rules
    without their annotations, which promtool would compare word for word; their templates
    are checked by ``check rules``)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    checked = await asyncio.to_thread(
        subprocess.run,
        [promtool, "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    bare = yaml.safe_load(RULES.read_text())
    for rule in bare["groups"][0]["rules"]:
        rule.pop("annotations", None)
    rules = tmp_path / "alerts.rules.yaml"
    rules.write_text(yaml.safe_dump(bare))
    test = tmp_path / "alerts.test.yaml"
    test.write_text(yaml.safe_dump(rules_test(scrape, rules), sort_keys=False))
    tested = await asyncio.to_thread(
        subprocess.run,
        [promtool, "test", "rules", str(test)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
