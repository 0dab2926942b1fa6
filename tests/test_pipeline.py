"""The thread pipeline: order, concurrency, error propagation without hangs."""
import threading
import time

import pytest

from peanut_py.pipeline import TwoPhaseSteps, run_pipeline


def _steps(chunks):
    def post_steps(batch, result):
        def make(i):
            def step():
                # later chunks finish first: output order must still be input order
                time.sleep(0.001 * (chunks - i))
                return f"{batch}:{result}:{i}\n", 1
            return step
        return [make(i) for i in range(chunks)]
    return post_steps


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_output_in_input_order(threads):
    out = []
    n, times = run_pipeline(range(20), lambda b: b * 10, _steps(3), out.append, threads=threads)
    assert n == 60
    assert "".join(out) == "".join(f"{b}:{b * 10}:{i}\n" for b in range(20) for i in range(3))
    assert set(times.seconds) >= {"read", "device", "postprocess", "write"}


def test_device_works_ahead_of_writer():
    # the device stage must process batch k+1 while batch k is still being written
    device_seen = []
    overlap = threading.Event()

    def device(b):
        device_seen.append(b)
        return b

    def write(text):
        if len(device_seen) > int(text.split(":")[0]) + 1:
            overlap.set()
        time.sleep(0.01)

    run_pipeline(range(6), device, _steps(1), write, threads=1)
    assert overlap.is_set()


def stage_of(step):
    """A host stage that applies ``step(batch, result)`` to every batch as it comes."""
    return lambda items: ((batch, step(batch, result)) for batch, result in items)


@pytest.mark.parametrize("threads", [1, 3])
def test_host_stage_runs_between_device_and_postprocessing(threads):
    """The optional host stage (pairs: insert size, rescue) sees every batch once, in order, in its own
    thread, and its result is what postprocessing gets."""
    seen = []

    def second(batch, result):
        seen.append((batch, threading.current_thread().name))
        return result + 1

    out = []
    n, times = run_pipeline(range(12), lambda b: b * 10, _steps(2), out.append, threads=threads,
                            host_stage=stage_of(second))
    assert n == 24
    assert "".join(out) == "".join(f"{b}:{b * 10 + 1}:{i}\n" for b in range(12) for i in range(2))
    assert [b for b, _ in seen] == list(range(12))
    assert {name for _, name in seen} == {"peanut-rescue"}
    assert "rescue" in times.seconds


def test_host_stage_overlaps_the_device_step():
    # the device thread maps batch k + 1 while the host stage still works on batch k
    busy = threading.Event()
    overlap = threading.Event()

    def device(b):
        if busy.is_set():
            overlap.set()
        return b

    def second(batch, result):
        busy.set()
        time.sleep(0.02)
        busy.clear()
        return result

    run_pipeline(range(6), device, _steps(1), lambda text: None, threads=1, host_stage=stage_of(second))
    assert overlap.is_set()


@pytest.mark.parametrize("held", [0, 4])
def test_host_stage_may_hold_batches_back(held):
    """A host stage that holds the first batches until it has seen ``held`` of them (as the insert-size
    estimate does) still passes every batch on once, in input order, while the device goes on mapping."""
    mapped_while_held = []

    def stage(items):
        waiting = []
        for batch, result in items:
            if len(waiting) < held:
                waiting.append((batch, result))
                mapped_while_held.append(batch)
                if len(waiting) < held:
                    continue
                yield from waiting
                continue
            yield batch, result
        yield from waiting if len(waiting) < held else []

    out = []
    n, _ = run_pipeline(range(9), lambda b: b, _steps(1), out.append, threads=2, host_stage=stage)
    assert n == 9 and out == [f"{b}:{b}:0\n" for b in range(9)]
    assert mapped_while_held == list(range(held))


@pytest.mark.parametrize("stage", ["reader", "device", "second", "post", "writer"])
def test_first_error_stops_everything(stage):
    class Boom(Exception):
        pass

    def batches():
        for b in range(1000):
            if stage == "reader" and b == 3:
                raise Boom("reader failed")
            yield b

    def device(b):
        if stage == "device" and b == 3:
            raise Boom("device failed")
        return b

    def second(batch, result):
        if stage == "second" and batch == 3:
            raise Boom("second failed")
        return result

    def post_steps(batch, result):
        def step():
            if stage == "post" and batch == 3:
                raise Boom("post failed")
            return f"{batch}\n", 1
        return [step]

    written = []

    def write(text):
        if stage == "writer" and text == "3\n":
            raise Boom("writer failed")
        written.append(text)

    t = time.perf_counter()
    with pytest.raises(Boom, match=f"{'post' if stage == 'post' else stage} failed"):
        run_pipeline(batches(), device, post_steps, write, threads=2, host_stage=stage_of(second))
    assert time.perf_counter() - t < 10
    assert len(written) <= 3 + 2 * 2 * 2  # stopped promptly, not after the 1000 batches


def _two_phase_steps(chunks, joined, fail=None):
    """TwoPhaseSteps whose plans finish in reverse order and whose join records the batch and its plans'
    results; ``fail``: (phase, batch) raising there."""
    def post_steps(batch, result):
        def plan(i):
            def run():
                time.sleep(0.001 * (chunks - i))
                if fail == ("plan", batch):
                    raise RuntimeError("plan failed")
                return f"{batch}:{result}:{i}"
            return run

        def join(planned):
            if fail == ("join", batch):
                raise RuntimeError("join failed")
            joined.append((batch, threading.current_thread().name, list(planned)))
            return [lambda p=p: (p + "\n", 1) for p in planned]

        return TwoPhaseSteps([plan(i) for i in range(chunks)], join)
    return post_steps


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("host", [False, True])
def test_two_phase_batches_in_order(threads, host):
    """Two-phase postprocessing (the final alignment on the device): the join sees each batch once, in input
    order, in the batch-step thread, with its plans' results in chunk order; the finishing steps' text is
    written in input order, with or without a host stage."""
    joined, out = [], []
    n, times = run_pipeline(range(12), lambda b: b * 10, _two_phase_steps(3, joined), out.append, threads=threads,
                            host_stage=stage_of(lambda batch, result: result) if host else None)
    assert n == 36
    assert "".join(out) == "".join(f"{b}:{b * 10}:{i}\n" for b in range(12) for i in range(3))
    assert [b for b, _, _ in joined] == list(range(12))
    assert all(name == "peanut-batch-step" and planned == [f"{b}:{b * 10}:{i}" for i in range(3)]
               for b, name, planned in joined)
    assert "batch step" in times.seconds


@pytest.mark.parametrize("phase", ["plan", "join"])
def test_two_phase_error_stops_everything(phase):
    joined, written = [], []
    t = time.perf_counter()
    with pytest.raises(RuntimeError, match=f"{phase} failed"):
        run_pipeline(range(1000), lambda b: b, _two_phase_steps(2, joined, fail=(phase, 3)), written.append, threads=2)
    assert time.perf_counter() - t < 10
    assert len(written) <= 3 * 2 + 2 * 2 * 2 and len(joined) <= 4


def test_postprocess_threads_leave_two_to_reader_and_device():
    from peanut_py.pipeline import postprocess_threads

    assert [postprocess_threads(t) for t in (0, 1, 2, 3, 4, 8, 16)] == [1, 1, 2, 2, 2, 6, 14]


def _uneven_devices(n, seen):
    """``n`` device steps of different speeds that record which batches each one took."""
    def make(d):
        def step(b):
            # device d is slower on every other batch, so results come back out of input order
            time.sleep(0.002 * ((b + d) % 3))
            seen.setdefault(d, []).append(b)
            return b * 10
        return step
    return [make(d) for d in range(n)]


@pytest.mark.parametrize("devices,threads,host", [(2, 1, False), (3, 2, True), (4, 3, False)])
def test_several_devices_keep_input_order(devices, threads, host):
    """One device thread per device, each batch on whichever is free; downstream sees input order."""
    out, seen = [], {}
    stage = stage_of(lambda batch, result: result + 1) if host else None
    n, _ = run_pipeline(range(40), _uneven_devices(devices, seen), _steps(2), out.append, threads=threads,
                        host_stage=stage)
    assert n == 80
    add = 1 if host else 0
    assert "".join(out) == "".join(f"{b}:{b * 10 + add}:{i}\n" for b in range(40) for i in range(2))
    assert sorted(b for batches in seen.values() for b in batches) == list(range(40))
    assert len(seen) == devices  # every device took batches


def test_several_devices_with_two_phase_steps():
    out, seen = [], {}

    def post_steps(batch, result):
        return TwoPhaseSteps([lambda: (batch, result)],
                             lambda planned: [lambda: (f"{planned[0][0]}:{planned[0][1]}\n", 1)])

    n, _ = run_pipeline(range(25), _uneven_devices(2, seen), post_steps, out.append, threads=2)
    assert n == 25 and "".join(out) == "".join(f"{b}:{b * 10}\n" for b in range(25))


def test_a_failing_device_stops_the_run_and_loses_nothing_silently():
    """A device that fails mid-run: the run raises its error (no output is called complete), never hangs."""
    out = []

    def good(b):
        time.sleep(0.001)
        return b

    def bad(b):
        if b >= 5:
            raise RuntimeError("device lost")
        return b

    t0 = time.perf_counter()
    with pytest.raises(RuntimeError, match="device lost"):
        run_pipeline(range(1000), [good, bad], _steps(1), out.append, threads=2)
    assert time.perf_counter() - t0 < 10
    assert len(out) < 1000


def test_a_fast_device_waits_instead_of_running_far_ahead():
    """While one device holds batch 0, the other finishes at most the window of later batches (2 per
    device), instead of every batch of the run piling up out of order."""
    ahead, at_release = [], []

    def step(b):
        # whichever device takes batch 0 is the slow one
        if b == 0:
            time.sleep(0.5)
            at_release.append(len(ahead))
        else:
            ahead.append(b)
        return b

    out = []
    run_pipeline(range(40), [step, step], _steps(1), out.append, threads=1)
    assert "".join(out) == "".join(f"{b}:{b}:0\n" for b in range(40))
    # batches 1..4 taken by the fast device; it holds the 4th until batch 0 is back
    assert at_release == [4]


def test_device_waits_are_timed_apart_from_its_work():
    """A slow reader shows as the device waiting for reads, a slow writer as its hand-off (the queues
    after it fill up), and neither counts as device time."""
    def slow_batches():
        for b in range(6):
            time.sleep(0.05)
            yield b

    out = []
    _, times = run_pipeline(slow_batches(), lambda b: b, _steps(1), out.append, threads=1)
    assert times.seconds["device waits for reads"] >= 0.2
    assert times.seconds["device"] < 0.1

    def slow_write(text):
        time.sleep(0.05)
        out.append(text)

    _, times = run_pipeline(range(30), lambda b: b, _steps(1), slow_write, threads=1, queue_size=1)
    assert times.seconds["device hand-off"] >= 0.5
    assert times.seconds["device"] < 0.1


def test_thread_cpu_is_counted_beside_the_wall():
    """The postprocessing steps' and the device thread's own CPU time are summed beside their wall time: a step
    that sleeps adds wall but almost no CPU, one that computes adds both."""
    def sleeping(batch, result):
        def step():
            time.sleep(0.03)
            return f"{batch}\n", 1, {}
        return [step]

    def device_sleeps(b):
        time.sleep(0.03)
        return b

    _, times = run_pipeline(range(8), device_sleeps, sleeping, lambda text: None, threads=2)
    assert times.seconds["postprocess"] >= 0.2 and times.seconds["device"] >= 0.2
    assert times.seconds["postprocess CPU"] < 0.5 * times.seconds["postprocess"]
    assert times.seconds["device CPU"] < 0.5 * times.seconds["device"]

    def spin(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    def computing(batch, result):
        def step():
            spin(0.03)
            return f"{batch}\n", 1, {}
        return [step]

    def device_computes(b):
        spin(0.03)
        return b

    _, times = run_pipeline(range(8), device_computes, computing, lambda text: None, threads=2)
    assert times.seconds["postprocess CPU"] >= 0.2 and times.seconds["device CPU"] >= 0.2
