"""Many captures: a process pool and a real Dask cluster give the serial run's document."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netio.analyze.distribute import DaskMapper, ProcessMapper
from netio.analyze.engine import analyze
from netio.analyze.options import AnalysisOptions
from netio.cli.analyze import main as analyze_main
from netio.errors import ClusterError
from netio.scenario import generate, scenario_from_dict
from netio.scenario.presets import small_dict


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The small preset's four ports, plus a second copy of the scenario shifted by
    renaming (eight captures: more captures than workers)."""
    out = tmp_path_factory.mktemp("many")
    paths = [str(p) for p in generate(scenario_from_dict(small_dict()), out).captures]
    second = out / "b"
    second.mkdir()
    for p in paths:
        (second / f"b-{Path(p).name}").write_bytes(Path(p).read_bytes())
    return paths + sorted(str(p) for p in second.iterdir())


def _canonical(doc: dict[str, object]) -> str:
    return json.dumps(doc, sort_keys=True)


def test_process_pool_gives_the_serial_document(captures: list[str]) -> None:
    serial = analyze(captures, AnalysisOptions())
    pool = ProcessMapper(2)
    try:
        parallel = analyze(captures, AnalysisOptions(), mapper=pool)
    finally:
        pool.close()
    assert _canonical(parallel) == _canonical(serial)
    assert len(serial["captures"]) == 8 and serial["spreading"]


def test_cli_jobs_give_the_same_output(captures: list[str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    analyze_main(["--json", "-j", "1", *captures])
    one = capsys.readouterr().out
    analyze_main(["--json", "-j", "3", *captures])
    three = capsys.readouterr().out
    assert one == three


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A dask.distributed scheduler and two single-threaded worker processes on
    loopback, each a separate process started here with the ``dask`` command."""
    work = tmp_path_factory.mktemp("dask")
    sched_file = work / "scheduler.json"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [subprocess.Popen(
        [*dask, "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
         "--scheduler-file", str(sched_file)], cwd=work, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        for i in range(2):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_worker", address,
                 "--nthreads", "1", "--no-dashboard", "--name", f"w{i}",
                 "--local-directory", str(work / f"w{i}")], cwd=work,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}))
        yield address
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _wait_for_workers(address: str, n: int) -> None:
    import distributed

    with distributed.Client(address, timeout="30s") as client:
        client.wait_for_workers(n, timeout=60)
        pids = client.run(os.getpid)
    assert len(set(pids.values())) == n and os.getpid() not in pids.values()


@pytest.mark.slow
def test_dask_cluster_gives_the_serial_document(captures: list[str], dask_cluster: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _wait_for_workers(dask_cluster, 2)
    serial = analyze(captures, AnalysisOptions())
    mapper = DaskMapper(dask_cluster)
    try:
        distributed_doc = analyze(captures, AnalysisOptions(), mapper=mapper)
    finally:
        mapper.close()
    assert _canonical(distributed_doc) == _canonical(serial)
    analyze_main(["--json", "-j", "1", *captures])
    local = capsys.readouterr().out
    analyze_main(["--json", "--dask-scheduler", dask_cluster, *captures])
    assert capsys.readouterr().out == local


def test_unreachable_scheduler_is_one_line_and_exit_4(captures: list[str],
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from netio.analyze import distribute

    monkeypatch.setattr(distribute, "CONNECT_TIMEOUT_S", 1.0)
    with pytest.raises(ClusterError):
        DaskMapper("tcp://127.0.0.1:9", timeout_s=1)
    code = analyze_main(["--dask-scheduler", "tcp://127.0.0.1:9", captures[0]])
    err = capsys.readouterr().err
    assert code == 4 and err.count("\n") == 1 and "Dask scheduler" in err


def test_default_jobs_use_workers_only_for_enough_data() -> None:
    from netio.cli.analyze import POOL_MIN_BYTES, _mapper, build_parser

    args = build_parser().parse_args(["a.pcap", "b.pcap"])
    assert _mapper(args, 2, POOL_MIN_BYTES - 1) is None  # small: here, no start-up cost
    assert _mapper(args, 1, 10 * POOL_MIN_BYTES) is None  # one capture: nothing to share
    big = _mapper(args, 2, POOL_MIN_BYTES)
    cpus = len(os.sched_getaffinity(0))
    try:
        assert (big is None) == (cpus == 1)
    finally:
        if big is not None:
            big.close()
    one = build_parser().parse_args(["-j", "1", "a.pcap", "b.pcap"])
    assert _mapper(one, 2, 10 * POOL_MIN_BYTES) is None
    two = _mapper(build_parser().parse_args(["-j", "2", "a", "b"]), 2, 0)
    assert isinstance(two, ProcessMapper)
    two.close()
