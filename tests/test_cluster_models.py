"""One search per GPU model (heterogeneous devices) on a real local Ray cluster, and
Ray client (ray://) addresses.

The cluster is two Ray nodes on this machine, each with one logical GPU (no real one): the head
says its GPU is an A100, the node that joins it says H100 (Ray's `accelerator_type:NAME`
resources, as Ray sets them on real GPU nodes). The goal is the pnpoly CUDA example, whose
recorded space replays where no GPU is visible: inside a Ray GPU actor too (Ray sets
CUDA_VISIBLE_DEVICES, CuPy finds no driver), so the GPU actors really run without a GPU.

The nodes are stopped by killing the processes started with this module's temp dir (never
`ray stop`, which would stop every Ray cluster on the machine). About 25-35 s on two cores.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from project_paths import GOALS, ROOT, SMALL_SPACE

from app.goal import Goal

# Ray's tests run on their own, after the parallel part of the suite (README): beside another
# worker's tests a run whose head the test kills hung (cause not pinned down)
pytestmark = pytest.mark.cluster

RAY = str(Path(sys.executable).parent / "ray")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _has_ray_client() -> bool:
    try:
        import grpc  # noqa: F401 - Ray client (ray://) needs it
    except ImportError:
        return False
    return True


def _kill_nodes(tmp: str) -> None:
    """Every process of these nodes: they name the temp dir, or inherited RAY_TMPDIR=tmp."""
    mark = tmp.encode()
    for _ in range(3):
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            if pid == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read()
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    env = fh.read()
            except OSError:
                continue
            if mark in cmd or b"RAY_TMPDIR=" + mark + b"\0" in env:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.3)


@pytest.fixture(scope="module")
def two_models():
    """A head with one logical A100 and a joined node with one logical H100, on loopback; the
    head also serves Ray client on a free port when ray[client] is installed. Yields
    (GCS address, ray:// address or None)."""
    pytest.importorskip("ray")
    tmp = tempfile.mkdtemp(prefix="ksgpu", dir="/tmp")  # short: Ray's socket paths
    cache = Path(tmp) / "cache"
    cache.mkdir()
    # GRPC_ENABLE_FORK_SUPPORT=0: the head's Ray client server forks a server per connection,
    # and with grpcio 1.85 the child crashed now and then in gRPC's fork handling (README)
    env = {**os.environ, "RAY_TMPDIR": tmp, "KERNELSWARM_CACHE": str(cache),
           "GRPC_ENABLE_FORK_SUPPORT": "0"}
    port = _free_port()
    client = _free_port() if _has_ray_client() else None
    # two raylets on one host: every port of their own (the agents' default 52365 would clash)
    common = ["--num-cpus=1", "--num-gpus=1", "--node-ip-address=127.0.0.1",
              "--object-store-memory=100000000", "--disable-usage-stats", f"--temp-dir={tmp}"]
    try:
        subprocess.run([RAY, "start", "--head", f"--port={port}", "--include-dashboard=false",
                        '--resources={"accelerator_type:A100": 1}', *common,
                        f"--dashboard-agent-listen-port={_free_port()}",
                        *([f"--ray-client-server-port={client}"] if client else [])],
                       env=env, check=True, timeout=120, capture_output=True)
        subprocess.run([RAY, "start", f"--address=127.0.0.1:{port}",
                        '--resources={"accelerator_type:H100": 1}', *common,
                        f"--dashboard-agent-listen-port={_free_port()}"],
                       env=env, check=True, timeout=120, capture_output=True)
        yield f"127.0.0.1:{port}", (f"ray://127.0.0.1:{client}" if client else None)
    finally:
        _kill_nodes(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=timeout, check=False)


def _pnpoly_goal(tmp_path: Path, cluster: str = "") -> Path:
    """The pnpoly CUDA example (replays its recorded space without a GPU), copied here."""
    folder = tmp_path / "pnpoly_cuda"
    shutil.copytree(GOALS / "custom" / "pnpoly_cuda", folder)
    goal = folder / "goal.toml"
    if cluster:
        goal.write_text(goal.read_text(encoding="utf-8") + f"\n[cluster]\n{cluster}\n",
                        encoding="utf-8")
    return goal


def _runs(db: Path) -> list[tuple[dict, list[dict]]]:
    """(run with its goal's [cluster] table, evaluations) per run, oldest first."""
    from app.store import Store

    with Store(db) as store:
        out = []
        for r in reversed(store.list_runs(limit=10)):
            run = store.get_run(r["id"])
            run["cluster"] = store.goal_of_run(r["id"]).cluster
            out.append((run, store.evaluation_rows(r["id"])))
        return out


# ---- on the cluster ----------------------------------------------------------------------------
@pytest.mark.slow
def test_devices_lists_both_gpu_models(two_models):
    out = _cli("devices", "--cluster", two_models[0], timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"cluster {two_models[0]}: 2 nodes, 2 CPU, 2 GPU" in out.stdout
    assert "1 GPU (A100)" in out.stdout and "1 GPU (H100)" in out.stdout


@pytest.mark.slow
def test_a_cuda_goal_on_two_gpu_models_is_one_search_per_model(two_models, tmp_path):
    db = tmp_path / "h.db"
    out = _cli("run", str(_pnpoly_goal(tmp_path)), "--db", str(db), "--quiet", "--max-evals",
               "12", "--workers", "1", "--seed", "4", "--cluster", two_models[0])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "one search per model" in out.stderr
    runs = _runs(db)
    assert len(runs) == 2, [r["device"] for r, _ in runs]
    node_ids = []
    for (run, rows), model in zip(runs, ["A100", "H100"]):  # same GPU count: by name
        assert run["device"]["gpu_model"] == model and run["device"]["name"].startswith(model)
        assert run["cluster"]["devices"] == f"model:{model}"  # resumable as that model's search
        assert len(rows) == 12 and len({r["key"] for r in rows}) == 12  # nothing twice
        assert {r["resources"]["gpu_model"] for r in rows} == {model}  # its model's actors only
        ids = {r["resources"]["node_id"] for r in rows}
        assert len(ids) == 1 and "" not in ids
        node_ids.append(ids.pop())
        assert f"  {model}: run {run['id']} max_evals, 12 evaluations" in out.stdout
    assert node_ids[0] != node_ids[1]  # two nodes, two devices: never mixed
    # the H100 search started from the A100 one (transfer reads the history when a run starts)
    first, second = runs[0][0], runs[1][0]
    assert not first["device"].get("learned_from")
    assert [s["run_id"] for s in second["device"]["learned_from"]] == [first["id"]]
    assert f"started from run {first['id']}" in out.stdout


@pytest.mark.slow
def test_one_named_model_is_one_run_as_before(two_models, tmp_path):
    db = tmp_path / "h.db"
    goal = _pnpoly_goal(tmp_path, 'address = "auto"\ndevices = "model:h100"')
    out = _cli("run", str(goal), "--db", str(db), "--quiet", "--max-evals", "6", "--workers",
               "1", "--cluster", two_models[0])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "one search per" not in out.stdout + out.stderr
    (run, rows), = _runs(db)
    assert run["device"]["gpu_model"] == "H100"
    assert len(rows) == 6 and {r["resources"]["gpu_model"] for r in rows} == {"H100"}


@pytest.mark.slow
def test_an_absent_model_is_one_clear_line(two_models, tmp_path):
    goal = _pnpoly_goal(tmp_path, 'address = "auto"\ndevices = "model:V100"')
    out = _cli("run", str(goal), "--db", str(tmp_path / "h.db"), "--quiet", "--cluster",
               two_models[0], timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "no GPU of model 'V100'" in lines[0] and "A100" in lines[0] and "H100" in lines[0]


@pytest.mark.slow
def test_a_ray_client_address_runs_a_goal(two_models, tmp_path):
    if two_models[1] is None:
        pytest.skip("Ray client needs ray[client] (grpcio)")
    goal = tmp_path / "goal.toml"
    goal.write_text(f'name = "pnpoly over ray client"\nspace = "{SMALL_SPACE}"\n'
                    'backend = "replay"\n[stop]\nmax_evals = 10\n[swarm]\nworkers = 2\n'
                    f'[cluster]\naddress = "{two_models[1]}"\nactors = 2\nconnect_timeout_s = 60\n',
                    encoding="utf-8")
    db = tmp_path / "h.db"
    out = _cli("run", str(goal), "--db", str(db), "--quiet")
    assert out.returncode == 0, out.stdout + out.stderr
    (run, rows), = _runs(db)
    assert run["device"]["cluster"] == two_models[1]
    assert len(rows) == 10 and len({r["key"] for r in rows}) == 10
    assert all(r["resources"]["node"] == socket.gethostname() for r in rows)


def _model_goal(tmp_path: Path, address: str, max_evals: int) -> Goal:
    goal = Goal.load(_pnpoly_goal(tmp_path, f'address = "{address}"'))
    goal.stop.max_evals, goal.swarm.workers, goal.swarm.seed = max_evals, 1, 4
    return goal


@pytest.mark.slow
def test_the_window_runs_one_search_per_gpu_model(two_models, tmp_path, qtbot):
    """From the desktop app, as from the CLI: the engine process makes one run per model; the
    window shows each model's run in turn and keeps a line per model."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings

    from app.ui.main_window import MainWindow

    w = MainWindow(db_path=tmp_path / "h.db",
                   settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    w.interactive = False
    qtbot.addWidget(w)
    w.show()
    planned, ended = [], []
    w.controller.searchesPlanned.connect(planned.append)
    w.bridge.modelRunEnded.connect(ended.append)
    w.form.set_goal(_model_goal(tmp_path, two_models[0], 10))
    with qtbot.waitSignal(w.controller.finished, timeout=240000):
        w.run_goal()
    w.table.flush()
    assert planned == [["A100", "H100"]]
    assert [(m.model, m.result.evaluations) for m in ended] == [("A100", 10), ("H100", 10)]
    runs = _runs(tmp_path / "h.db")
    assert [r["device"]["gpu_model"] for r, _ in runs] == ["A100", "H100"]
    assert [m.run_id for m in ended] == [r["id"] for r, _ in runs]
    # on screen: the last model's run only, its candidates all on the H100 node
    assert len(w.live.data) == 10 and w.table.model.rowCount() == 10
    assert {w.table.model.evaluation(i).resources["gpu_model"] for i in range(10)} == {"H100"}
    assert "GPU model 2 of 2: H100" in w.windowTitle() and f"run {runs[1][0]['id']}" in w.windowTitle()
    lessons = [w.lessons.item(i).text() for i in range(w.lessons.count())]
    for (run, _), model in zip(runs, ["A100", "H100"]):
        assert any(t.startswith(f"[per model] {model}: run {run['id']} max evals, 10 evaluations, "
                                "best ") for t in lessons), lessons
    assert w.statusBar().currentMessage().startswith("One search per GPU model: A100: run ")
    assert w.controller.state == "idle"


@pytest.mark.slow
def test_a_stop_during_the_first_model_searches_no_further_model(two_models, tmp_path):
    from app.core.messages import EngineDone, EnginePrepared, EngineRunEnded, EngineSearches, Stop
    from app.engine_process import EngineProcess

    goal = _model_goal(tmp_path, two_models[0], 400)
    engine = EngineProcess(goal, str(tmp_path / "h.db"), None)
    engine.start()
    seen, evaluated = [], []
    for message in engine.messages(evaluated.append):
        seen.append(message)
        if isinstance(message, EnginePrepared):
            engine.send(Stop())
    assert engine.join(30)
    kinds = [type(m) for m in seen]
    assert kinds == [EngineSearches, EnginePrepared, EngineRunEnded, EngineDone], seen
    assert seen[2].model == "A100" and seen[2].result.reason == "stopped"
    (run, rows), = _runs(tmp_path / "h.db")  # the H100 was never searched
    assert run["status"] == "stopped" and run["device"]["gpu_model"] == "A100"
    assert len(rows) < 400


# ---- without a cluster ---------------------------------------------------------------------------
def test_models_are_exact_and_searched_most_gpus_first():
    from app.cluster.connect import ClusterUnavailable
    from app.cluster.devices import NodeDevices, gpu_models, plan_actors
    from app.core.cluster_settings import check_cluster_table

    nodes = [NodeDevices("a", "10.0.0.1", 8, 2, ["A100"]), NodeDevices("b", "10.0.0.2", 8, 4,
             ["A100-80G"]), NodeDevices("c", "10.0.0.3", 8, 1, ["H100"]),
             NodeDevices("d", "10.0.0.4", 8, 0)]
    assert gpu_models(nodes) == ["A100-80G", "A100", "H100"]

    def plan(devices: str):
        return plan_actors(nodes, "cuda", check_cluster_table({"address": "auto",
                                                               "devices": devices}))
    exact = plan("model:a100")  # equal wins over contained: never both models in one search
    assert (exact.count, exact.model) == (2, "A100")
    assert exact.options["resources"] == {"accelerator_type:A100": 0.001}
    assert plan("model:80G").model == "A100-80G" and plan("model:80G").count == 4
    with pytest.raises(ClusterUnavailable, match="matches 2 GPU models.*name one"):
        plan_actors(nodes[1:] + [NodeDevices("e", "10.0.0.5", 8, 1, ["A100-40G"])], "cuda",
                    check_cluster_table({"address": "auto", "devices": "model:A100"}))
    with pytest.raises(ClusterUnavailable, match="3 models.*one search per model"):
        plan("each")


def test_no_cluster_lookup_unless_a_cuda_goal_on_each_device(monkeypatch):
    from app.cluster import per_model

    def refuse(*_a, **_k):
        raise AssertionError("connected")

    monkeypatch.setattr(per_model, "connect", refuse)
    goal = Goal(name="g", space=str(SMALL_SPACE), backend="replay")
    assert per_model.models_to_search(goal) == []  # no cluster
    goal.cluster = {"address": "auto"}
    assert per_model.models_to_search(goal) == []  # not a cuda goal
    goal.backend = "cuda"
    goal.cluster = {"address": "auto", "devices": "model:A100"}
    assert per_model.models_to_search(goal) == []  # one model named: one run, as before
    one = per_model.goal_for_model(Goal(name="g", backend="cuda", cluster={"address": "auto"}),
                                   "H100")
    assert one.cluster == {"address": "auto", "devices": "model:H100"}


def test_a_ray_client_address_without_grpcio_is_one_clear_line(monkeypatch):
    pytest.importorskip("ray")
    from app.cluster import connect as joining

    monkeypatch.setattr(joining, "_has_ray_client", lambda: False)
    with pytest.raises(joining.ClusterUnavailable, match="Ray client needs grpcio: pip install"):
        joining.connect("ray://127.0.0.1:1", 1.0)
