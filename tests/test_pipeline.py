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
