"""The loop's drain_input (train/loop.py): the timed steps start with the input's queue empty, so
they time what the input delivers beside the step, not batches it prepared during the warm-up
(docs/decisions.md#drain_input). The loop is the real one; the input is a queue of numbered
batches, some ready and the rest made slowly, which is what the drain reacts to."""

import time

import pytest
from helpers import trainer_flags

pytestmark = pytest.mark.unit

READY = 6  # batches queued before the drain: what an input prepared during the warm-up
SLOW_S = 0.2  # a batch made after the queue ran dry: far above the loop's wait threshold here


class Queued:
    """next_batch: READY numbered batches at once after the warm-up's, then one every SLOW_S."""

    def __init__(self, warmup):
        self.made, self.warmup = 0, warmup

    def __call__(self):
        n, self.made = self.made, self.made + 1
        if n >= self.warmup + READY:
            time.sleep(SLOW_S)
        return n


def run_loop(tmp_path, monkeypatch, drain, warmup=2, steps=3):
    from workflow_scripts.train import harness, loop

    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    # a generous threshold: a ready batch (a counter) is never taken as a wait on a busy machine
    monkeypatch.setattr(loop, "DRAIN_WAIT_S", SLOW_S / 4)
    args = harness.arg_parser("t").parse_args(
        trainer_flags(data_source="synthetic", batch_per_gpu=1, warmup_steps=warmup, steps=steps, out=tmp_path)
    )
    run = harness.Run(args, "pytorch", {})
    seen = []

    class Steps(loop.Adapter):  # steps that do nothing, on the queue's batches
        drain_input = drain
        fetch_ahead = True

        def __init__(self):
            self.next_batch = Queued(warmup)

        def launch(self, batch, step):
            seen.append((step, batch))
            return lambda: (1.0, None)

        def digest(self):
            return "digest"

    looped = loop.Loop(run, Steps())
    looped.short_test(0)
    return seen, looped.summary()


@pytest.mark.parametrize("drain", [True, False])
def test_timed_steps_take_no_batch_queued_before_the_clock(tmp_path, monkeypatch, drain):
    """With drain_input the batch taken ahead at the warm-up's end and the queue's ready batches
    are dropped, and the one that had to be waited for too: the first timed step takes a batch made
    after the drain. Without it, the timed steps take the queued batches first."""
    warmup = 2
    seen, summary = run_loop(tmp_path, monkeypatch, drain, warmup=warmup)
    timed = [batch for step, batch in seen if step >= warmup]
    assert [batch for step, batch in seen if step < warmup] == [0, 1]
    if drain:
        # READY - 1 queued (one was taken ahead during the last warm-up step) + the ahead one + the waited one
        assert summary["drained_batches"] == READY
        assert min(timed) == warmup + READY + 1, seen
    else:
        assert summary["drained_batches"] is None
        assert timed[0] == warmup, seen
