"""The Kubernetes manifests (deploy/kubernetes, kustomize) and the Helm chart (deploy/helm/cnichain).

Both are rendered here without a cluster or kubectl: kustomize overlays by a small renderer of the
kustomization fields they use (it refuses any other, so nothing goes unrendered), the chart by a small renderer
of the few template constructs it is allowed to use.  Then the same checks run on every rendering:
node-DaemonSet conventions, and host paths, socket and commands agreeing with the installer's and
the agent's own defaults and options.
"""

from __future__ import annotations

import copy
import os
import re

import pytest

from tests import required

try:
    import yaml
except ImportError:  # python3-yaml: a package ./run installs
    required.missing("python3-yaml")

from cnichain.node.bundle import layout  # noqa: E402
from cnichain.node import bundle_install  # noqa: E402
from cnichain.common import shim  # noqa: E402

DEPLOY = os.path.join(os.path.dirname(__file__), "..", "..", "deploy")
KUSTOMIZE = os.path.join(DEPLOY, "kubernetes")
CHART = os.path.join(DEPLOY, "helm", "cnichain")


def load(path: str):
    with open(path) as fh:
        return yaml.safe_load(fh)


# -- kustomize ---------------------------------------------------------------------------------

def _pointer(doc, path: str):
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]
    for p in parts[:-1]:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc, parts[-1]


def apply_json6902(doc: dict, ops: list[dict]) -> dict:
    doc = copy.deepcopy(doc)
    for op in ops:
        parent, key = _pointer(doc, op["path"])
        if op["op"] == "replace":
            parent[int(key) if isinstance(parent, list) else key] = op["value"]
        elif op["op"] == "add" and isinstance(parent, list):
            parent.insert(len(parent) if key == "-" else int(key), op["value"])
        elif op["op"] == "add":
            parent[key] = op["value"]
        else:
            raise AssertionError(f"unsupported op {op['op']}")
    return doc


KUSTOMIZE_FIELDS = {"apiVersion", "kind", "namespace", "resources", "labels", "patches"}


def kustomize_build(folder: str) -> list[dict]:
    """What ``kubectl kustomize FOLDER`` prints, for the fields deploy/kubernetes uses: resources
    (files, or folders with their own kustomization, built first), JSON 6902 patches by kind and
    name, ``labels`` (pairs onto metadata.labels; selectors and templates only when asked),
    ``namespace`` last.  Any other field fails the test, so a manifest change the renderer does
    not know cannot pass unchecked; kubectl is not needed (and not installed by ./run)."""
    kust = load(os.path.join(folder, "kustomization.yaml"))
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and kust["kind"] == "Kustomization"
    assert set(kust) <= KUSTOMIZE_FIELDS, f"kustomization fields the renderer does not know: {set(kust) - KUSTOMIZE_FIELDS}"
    objects: list[dict] = []
    for resource in kust.get("resources", []):
        path = os.path.normpath(os.path.join(folder, resource))
        if os.path.isdir(path):
            objects.extend(kustomize_build(path))
        else:
            with open(path) as fh:
                objects.extend(d for d in yaml.safe_load_all(fh) if d)
    for patch in kust.get("patches", []):
        assert set(patch) == {"target", "patch"} and set(patch["target"]) <= {"kind", "name"}, patch
        matched = [i for i, obj in enumerate(objects)
                   if all(obj.get("kind") == v if k == "kind" else obj["metadata"].get(k) == v
                          for k, v in patch["target"].items())]
        assert matched, f"patch target matches nothing: {patch['target']}"
        ops = yaml.safe_load(patch["patch"])
        assert isinstance(ops, list), "only JSON 6902 patches are rendered here"
        for i in matched:
            objects[i] = apply_json6902(objects[i], ops)
    for label in kust.get("labels", []):
        assert set(label) <= {"pairs", "includeSelectors", "includeTemplates"}, label
        for obj in objects:
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])
            template = obj.get("spec", {}).get("template")
            if template is not None and (label.get("includeTemplates") or label.get("includeSelectors")):
                template.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])
            if label.get("includeSelectors") and "selector" in obj.get("spec", {}):
                obj["spec"]["selector"].setdefault("matchLabels", {}).update(label["pairs"])
    if "namespace" in kust:
        for obj in objects:
            obj["metadata"]["namespace"] = kust["namespace"]
    return objects


def render_overlay(name: str) -> dict:
    """The one object overlay ``name`` renders to (the DaemonSet)."""
    (ds,) = kustomize_build(os.path.join(KUSTOMIZE, "overlays", name))
    return ds


# -- helm ----------------------------------------------------------------------------------------

_EXPR = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")


def _lookup(ctx: dict, ref: str):
    node = ctx
    for part in ref.lstrip(".").split("."):
        node = node[part]
    return node


def _value(ctx: dict, expr: str) -> str:
    m = re.fullmatch(r"(\.[A-Za-z.]+)(\s*\|\s*quote)?", expr)
    assert m, f"template construct not allowed in the chart: {expr!r}"
    v = _lookup(ctx, m.group(1))
    return f'"{v}"' if m.group(2) else str(v)


def _cond(ctx: dict, expr: str) -> bool:
    m = re.fullmatch(r'if eq (\.[A-Za-z.]+) "([^"]*)"', expr)
    if m:
        return _lookup(ctx, m.group(1)) == m.group(2)
    m = re.fullmatch(r"if (\.[A-Za-z.]+)", expr)
    assert m, f"condition not allowed in the chart: {expr!r}"
    return bool(_lookup(ctx, m.group(1)))


def render_chart(values: dict, namespace: str = "kube-system") -> dict:
    chart = load(os.path.join(CHART, "Chart.yaml"))
    ctx = {"Values": values, "Release": {"Namespace": namespace}, "Chart": {"AppVersion": chart["appVersion"]}}
    out: list[str] = []
    active = [True]
    with open(os.path.join(CHART, "templates", "daemonset.yaml")) as fh:
        lines = fh.read().splitlines()
    for line in lines:
        stripped = line.strip()
        block = re.fullmatch(r"\{\{-?\s*(if .*?|else|end)\s*-?\}\}", stripped)
        if block:
            word = block.group(1)
            if word.startswith("if"):
                active.append(active[-1] and _cond(ctx, word))
            elif word == "else":
                parent = all(active[:-1])
                active[-1] = parent and not active[-1]
            else:
                active.pop()
            continue
        if not all(active):
            continue
        ty = re.fullmatch(r"\{\{-\s*toYaml (\.[A-Za-z.]+) \| nindent (\d+)\s*\}\}", stripped)
        if ty:
            dumped = yaml.safe_dump(_lookup(ctx, ty.group(1)), default_flow_style=False).rstrip().splitlines()
            out.extend(" " * int(ty.group(2)) + d for d in dumped)
            continue
        out.append(_EXPR.sub(lambda m: _value(ctx, m.group(1)), line))
    assert active == [True], "unbalanced if/end in the chart"
    return yaml.safe_load("\n".join(out))


# -- the checks ----------------------------------------------------------------------------------

def cli_options(*path: str) -> set[str]:
    """The options ``cnichain PATH...`` accepts: typer's, or the agent's own parser it forwards to."""
    import typer

    from cnichain.cli.app import app

    if path == ("agent",):
        from cnichain.agent.config import parser

        return {opt for action in parser()._actions for opt in action.option_strings}
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return {opt for p in cmd.params for opt in p.opts}


def args_of(container: dict) -> dict[str, str]:
    return dict(a.split("=", 1) if "=" in a else (a, "") for a in container["args"] if a.startswith("--"))


def covered(mounts: list[dict], volumes: dict, host_path: str) -> bool:
    """Some mount at /host<dir> of a hostPath <dir> that is host_path or one of its parents."""
    for m in mounts:
        src = volumes[m["name"]]["hostPath"]["path"]
        if m["mountPath"] == "/host" + src and (host_path == src or host_path.startswith(src + "/")):
            return True
    return False


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    return int(quantity[:-2]) * units[quantity[-2:]]


def check_agent_resources(resources: dict) -> None:
    """The agent's limits follow the measured numbers (docs/agent.md, "Memory and CPU"): its memory
    limit lets the pool use every CPU of its CPU limit, and it requests at least its measured peak
    with 110 pods at once, within the half of the limit the pool plans in."""
    from cnichain.agent import budget

    limit, cpus = _bytes(resources["limits"]["memory"]), int(str(resources["limits"]["cpu"]))
    assert budget.capacity(limit, cpus) == budget.WORKERS_PER_CPU * cpus + 1
    assert MEASURED_PEAK_110_PODS <= _bytes(resources["requests"]["memory"]) <= limit * budget.BUDGET_SHARE


MEASURED_PEAK_110_PODS = 177 << 20  # through containerd, 2 CPUs, the agent in a 512 MiB cgroup (docs/agent.md)


def check_daemonset(ds: dict, prefix: str, bin_dir: str, conf_dir: str, mode: str, socket: str) -> None:
    assert ds["kind"] == "DaemonSet"
    strategy = ds["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    mu = strategy["rollingUpdate"]["maxUnavailable"]
    assert (isinstance(mu, int) and 1 <= mu <= 10) or re.fullmatch(r"\d{1,2}%", str(mu))
    pod = ds["spec"]["template"]["spec"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"]
    assert pod["hostNetwork"] is True and pod["hostPID"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    for c in pod["initContainers"] + pod["containers"]:
        assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
        if c["name"] == "agent":
            check_agent_resources(c["resources"])
        assert c["securityContext"]["privileged"] is True
    (init,) = pod["initContainers"]
    assert init["args"][:2] == ["node", "install"]
    args = args_of(init)
    assert set(args) <= cli_options("node", "install")
    assert args["--host-root"] == "/host" and args["--mode"] == mode
    assert args["--prefix"] == prefix and args["--bin-dir"] == bin_dir and args["--conf-dir"] == conf_dir
    for host_path in (layout.home(prefix), bin_dir, conf_dir):
        assert covered(init["volumeMounts"], volumes, host_path), host_path
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    assert agent["args"][0] == "agent"
    agent_args = args_of(agent)
    assert set(agent_args) <= cli_options("agent")
    assert agent_args["--socket"] == socket
    probe = agent["readinessProbe"]["exec"]["command"]
    assert probe[0] == layout.launcher_python(prefix)
    assert probe[3] == f"{layout.current_link(prefix)}/{layout.CLI_REL}" and probe[4:6] == ["node", "probe"]
    assert args_of({"args": probe[6:]})["--socket"] == socket
    assert set(args_of({"args": probe[6:]})) <= cli_options("node", "probe")
    sock_mount = next(m for m in agent["volumeMounts"] if m["mountPath"] == os.path.dirname(socket))
    assert volumes[sock_mount["name"]]["hostPath"]["path"] == os.path.dirname(socket)
    netns = next(m for m in agent["volumeMounts"] if m["mountPath"] == "/run/netns")
    assert netns["mountPropagation"] == "HostToContainer"
    assert volumes[netns["name"]]["hostPath"]["path"] == "/run/netns"
    watchers = [c for c in pod["containers"] if c["name"] == "chain-watch"]
    if mode == "chain":
        (w,) = watchers
        wargs = args_of(w)
        assert "--watch" in wargs and wargs["--mode"] == "chain" and set(wargs) <= cli_options("node", "install")
        assert (wargs["--prefix"], wargs["--bin-dir"], wargs["--conf-dir"]) == (prefix, bin_dir, conf_dir)
        for host_path in (layout.home(prefix), bin_dir, conf_dir):
            assert covered(w["volumeMounts"], volumes, host_path), host_path
    else:
        assert not watchers


DEFAULTS = (layout.DEFAULT_PREFIX, layout.bin_dir(layout.DEFAULT_PREFIX), bundle_install.DEFAULT_CONF_DIR)


@pytest.mark.parametrize("mode", ["own", "chain"])
def test_kustomize_overlays(mode):
    ds = render_overlay(mode)
    check_daemonset(ds, *DEFAULTS, mode, shim.DEFAULT_SOCKET)
    base = load(os.path.join(KUSTOMIZE, "base", "kustomization.yaml"))
    assert base["resources"] == ["daemonset.yaml"] and base["namespace"] == "kube-system"


@pytest.mark.parametrize("mode", ["own", "chain"])
def test_kustomize_build_renders_one_labelled_daemonset_in_kube_system(mode):
    """The whole overlay as kustomize builds it: the base's namespace and labels applied, the
    selector left alone (includeSelectors false: a selector is immutable on a live DaemonSet)."""
    objects = kustomize_build(os.path.join(KUSTOMIZE, "overlays", mode))
    assert [(o["kind"], o["metadata"]["name"], o["metadata"]["namespace"]) for o in objects] == [
        ("DaemonSet", "cnichain", "kube-system")]
    (ds,) = objects
    base = load(os.path.join(KUSTOMIZE, "base", "daemonset.yaml"))
    assert ds["metadata"]["labels"]["app.kubernetes.io/component"] == "cni-node"
    assert ds["spec"]["selector"] == base["spec"]["selector"]
    assert ds["spec"]["template"]["metadata"] == base["spec"]["template"]["metadata"]
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()  # the pods are selected


def test_kustomize_renderer_refuses_what_it_does_not_know(tmp_path):
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimages:\n  - name: x\n")
    with pytest.raises(AssertionError, match="images"):
        kustomize_build(str(tmp_path))


def test_chart_defaults_match_the_installer_and_agent():
    values = load(os.path.join(CHART, "values.yaml"))
    assert values["hostPaths"] == {"prefix": DEFAULTS[0], "binDir": DEFAULTS[1], "confDir": DEFAULTS[2]}
    assert values["agent"]["socket"] == shim.DEFAULT_SOCKET
    assert os.path.dirname(values["agent"]["socket"]) == values["agent"]["socketDir"]
    assert values["mode"] in bundle_install.MODES
    from cnichain.agent.config import AgentConfig

    assert values["agent"]["pool"] == AgentConfig().pool_size
    assert values["agent"]["queue"] == AgentConfig().queue_size
    assert values["own"]["conflist"] == bundle_install.DEFAULT_OWN_CONFLIST


@pytest.mark.parametrize("mode", ["own", "chain"])
def test_chart_renders_both_modes(mode):
    values = load(os.path.join(CHART, "values.yaml"))
    values["mode"] = mode
    ds = render_chart(values)
    check_daemonset(ds, *DEFAULTS, mode, shim.DEFAULT_SOCKET)
    init_args = ds["spec"]["template"]["spec"]["initContainers"][0]["args"]
    assert ("--replace-foreign" in init_args) == (mode == "own")


def test_chart_host_paths_follow_values_gke():
    values = load(os.path.join(CHART, "values.yaml"))
    values["hostPaths"] = {"prefix": "/home/kubernetes", "binDir": "/home/kubernetes/bin", "confDir": "/etc/cni/net.d"}
    ds = render_chart(values)
    check_daemonset(ds, "/home/kubernetes", "/home/kubernetes/bin", "/etc/cni/net.d", "own", shim.DEFAULT_SOCKET)
    assert ds["metadata"]["namespace"] == "kube-system"
