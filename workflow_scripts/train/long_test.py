"""The scale-out whitepaper's long test (mode accuracy), the same for the three trainers: the
learning-rate schedule, each rank's share of the val split, per-epoch evaluation and its records
(predictions/, epochs.jsonl), stopping at the target top-1. A trainer supplies the step, set_lr,
evaluate and an all-reduce of counts (loop.py passes them)."""

import gzip
import json
import time
from pathlib import Path

import numpy as np

from ..common.errors import PermanentError, StageError, global_batch_problem
from . import checkpoint
from .harness import read_manifest

TIMING_NOTE = (
    "elapsed_s counts everything from the first training step on: every step (the first ones, with "
    "their compilation and input start-up, included: no warm-up is excluded), every evaluation and "
    "the writing of its records, as time-to-train does; train_s + eval_s of the epochs add up to it. "
    "Writing a checkpoint after an epoch (checkpoint_s) is not counted"
)
RESUMED_NOTE = (
    "; the run was resumed from a checkpoint (resumed): the time between jobs (the queue, start-up "
    "before the first step, loading the checkpoint) is not counted, while the first steps of each "
    "resumed job, with their compilation, are; a resumed job draws its batches in another order "
    "than an uninterrupted run would"
)


def resize_shorter(image_size):
    """The validation pipelines' shorter side before the centre crop: 256 for the 224 crop (the
    study's networks), in proportion for other sizes."""
    return round(image_size * 256 / 224)


def val_share(total, rank, world):
    """The val records a rank scores: contiguous, disjoint, together every record exactly once (no
    padding, unlike DistributedSampler, which repeats records to even out the shares)."""
    return range(total * rank // world, total * (rank + 1) // world)


class Schedule:
    """The learning rate as a function of the step: an optional linear warm-up (lr x (step + 1) /
    warm-up steps), then lr multiplied by `decay` at each milestone epoch. The scale-out
    whitepaper's: 0.4 for 10 epochs, 0.04 to 60, 0.004 to 90 (lr 0.4, milestones 10 60, decay
    0.1)."""

    def __init__(self, lr, steps_per_epoch, warmup_epochs=0.0, milestones=(), decay=0.1):
        self.lr, self.decay = lr, decay
        self.warmup_steps = round(warmup_epochs * steps_per_epoch)
        self.milestone_steps = [round(m * steps_per_epoch) for m in milestones]

    def __call__(self, step):
        lr = self.lr * self.decay ** sum(step >= m for m in self.milestone_steps)
        if step < self.warmup_steps:
            lr *= (step + 1) / self.warmup_steps
        return lr


def predictions_path(run_dir, epoch, rank):
    return Path(run_dir) / "predictions" / f"epoch{epoch:03d}.rank{rank}.tsv.gz"


def write_predictions(path, records, labels, top5):
    """One line per scored val image: its record (position in the val split, the same in every
    format), its label and the top-5 classes, best first: enough to recount top-1 and top-5."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("record\tlabel\ttop5\n")
        for r, y, t in zip(records, labels, top5):
            f.write(f"{int(r)}\t{int(y)}\t{' '.join(str(int(c)) for c in t)}\n")


def read_predictions(path):
    """[(record, label, [top-5 classes])] of one predictions file."""
    with gzip.open(path, "rt") as f:
        next(f)
        return [(int(r), int(y), [int(c) for c in t.split()]) for r, y, t in (ln.rstrip("\n").split("\t") for ln in f)]


def count_correct(labels, top5):
    """(top-1 hits, top-5 hits) of one rank's predictions."""
    if not len(labels):  # a rank without a share (more ranks than val images)
        return 0, 0
    labels, top5 = np.asarray(labels).reshape(-1, 1), np.asarray(top5).reshape(len(labels), -1)
    return int((top5[:, :1] == labels).sum()), int((top5 == labels).any(axis=1).sum())


class LongTest:
    """The scale-out whitepaper's long test: whole epochs over the train split with the step
    schedule, top-1/top-5 on the val split after every `--eval-every` epochs and after the last,
    stopping after the first evaluation that reaches `--target-top1`. Each rank scores its share of
    the val split with its framework's own validation pipeline; the counts are summed over the
    ranks, so every rank sees the same top-1 and all stop together."""

    def __init__(self, run):
        a = run.args
        splits = read_manifest(a.data)["splits"]
        train_images, self.val_images = splits["train"]["images"], splits["val"]["images"]
        self.run, self.epochs = run, int(a.epochs)
        self.steps_per_epoch = train_images // run.global_batch
        if not self.steps_per_epoch:
            raise PermanentError(global_batch_problem(a.data, train_images, a.batch_per_gpu, run.launch.world_size))
        self.schedule = Schedule(run.lr, self.steps_per_epoch, a.warmup_epochs, a.milestones, a.decay)
        self.records, self.jobs, self.saved = [], [], None

    def run_epochs(self, train_step, set_lr, evaluate, allreduce_sum, digest, save_state=None, load_state=None):
        """train_step(step) -> the step's loss, mean over the ranks, on the host (the step is done);
        set_lr(lr); evaluate() -> this rank's (records, labels, top-5 classes); allreduce_sum(int
        array) -> its sum over the ranks; digest() -> the weights' sha256; save_state(dir) /
        load_state(dir): the framework's model and optimizer state (checkpoint.py; with
        --checkpoint-dir). Returns the summary's long_test block."""
        run, a, rank = self.run, self.run.args, self.run.launch.rank
        first = self._resume(load_state, digest) if a.checkpoint_dir else 1
        out = open(run.dir / "epochs.jsonl", "w") if rank == 0 else None
        for rec in self.records if out else ():
            out.write(json.dumps(rec) + "\n")
        lr = None
        elapsed = self.records[-1]["elapsed_s"] if self.records else 0.0
        epoch_start = time.perf_counter()
        for epoch in range(first, self.epochs + 1):
            if self._done():
                break
            losses = []
            run.log.start()
            for i in range(self.steps_per_epoch):
                step = (epoch - 1) * self.steps_per_epoch + i
                if self.schedule(step) != lr:
                    lr = self.schedule(step)
                    set_lr(lr)
                losses.append(train_step(step))
                run.log.end(losses[-1])
                if step == 0:
                    run.record_digest("after_step_1", digest())
            trained = time.perf_counter()
            rec = {
                "epoch": epoch,
                "steps": self.steps_per_epoch,
                "train_s": trained - epoch_start,
                "train_images_per_s": self.steps_per_epoch * run.global_batch / (trained - epoch_start),
                "loss": float(np.mean(losses)),
                "lr": lr,
                "top1": None,
                "top5": None,
                "val_images": 0,
            }
            if epoch % a.eval_every == 0 or epoch == self.epochs:
                rec.update(self._evaluate(epoch, evaluate, allreduce_sum))
            evaluated = time.perf_counter()
            elapsed += evaluated - epoch_start
            rec.update(eval_s=evaluated - trained, elapsed_s=elapsed, checkpoint_s=None)
            self.records.append(rec)
            if a.checkpoint_dir and rank == 0 and epoch < self.epochs and not self._done():
                rec["checkpoint_s"] = self.saved.save(epoch, self.records, self.jobs, save_state, digest, run.dir)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
            epoch_start = time.perf_counter()
        if out:
            out.close()
        return self.summary()

    def _done(self):
        last, target = (self.records or [{}])[-1], self.run.args.target_top1
        return target is not None and last.get("top1") is not None and last["top1"] >= target

    def _resume(self, load_state, digest):
        """-> the first epoch to train: 1, or the one after the checkpoint's (its state loaded on
        every rank, its records and predictions back in this run's directory)."""
        run = self.run
        say = (lambda line: print(line, flush=True)) if run.launch.rank == 0 else (lambda line: None)
        self.saved = checkpoint.Checkpoint(
            run.args.checkpoint_dir, checkpoint.identity(run.args, run.launch.world_size), say
        )
        state = self.saved.load()
        self.jobs = [*(state["jobs"] if state else []), {**checkpoint.this_job(), "first_epoch": 1}]
        if not state:
            return 1
        load_state(self.saved.dir / state["weights"])
        loaded = digest()
        if loaded != state["weights_sha256"]:
            raise StageError(
                f"{self.saved.dir / state['weights']}: the weights loaded on rank {run.launch.rank} differ from the "
                f"ones saved (sha256 {loaded[:12]} vs {state['weights_sha256'][:12]}): delete {self.saved.dir} to "
                "start the run from epoch 1"
            )
        run.record_digest("resumed", loaded)
        self.records = state["records"]
        self.jobs[-1]["first_epoch"] = state["epoch"] + 1
        if run.launch.rank == 0:
            self.saved.restore_predictions(run.dir)
        say(f"long test: resumed from the checkpoint of epoch {state['epoch']} in {self.saved.dir}")
        return state["epoch"] + 1

    def _evaluate(self, epoch, evaluate, allreduce_sum):
        records, labels, top5 = evaluate()
        write_predictions(predictions_path(self.run.dir, epoch, self.run.launch.rank), records, labels, top5)
        hits1, hits5, scored = (
            int(v) for v in allreduce_sum(np.array([*count_correct(labels, top5), len(labels)], dtype=np.int64))
        )
        if scored != self.val_images:
            raise StageError(
                f"{self.run.args.data}: the ranks scored {scored} val images, the val split holds "
                f"{self.val_images} (manifest.json): each must be scored exactly once"
            )
        return {"top1": 100 * hits1 / scored, "top5": 100 * hits5 / scored, "val_images": scored}

    def summary(self):
        a, recs = self.run.args, self.records
        evaluated = [r for r in recs if r["top1"] is not None]
        hit = next((r for r in evaluated if a.target_top1 is not None and r["top1"] >= a.target_top1), None)
        best = max(r["top1"] for r in evaluated)
        if a.target_top1 is None:
            result = f"no target set: {len(recs)} epochs, final top-1 {evaluated[-1]['top1']:.2f}%"
        elif hit:
            result = (
                f"reached top-1 >= {a.target_top1:g}% at epoch {hit['epoch']} ({hit['top1']:.2f}%) after "
                f"{hit['elapsed_s']:.1f} s of training + evaluation"
            )
        else:
            result = f"did not reach top-1 {a.target_top1:g}% in {len(recs)} epochs (best {best:.2f}%)"
        resumed = [j["first_epoch"] for j in self.jobs if j["first_epoch"] > 1]
        if resumed:
            result += f"; resumed from a checkpoint at epoch {', '.join(map(str, resumed))}"
        return {
            "long_test": {
                "result": result,
                "epochs_planned": self.epochs,
                "epochs_run": len(recs),
                "steps_per_epoch": self.steps_per_epoch,
                "val_images": self.val_images,
                "schedule": {
                    "lr": self.run.lr,
                    "warmup_epochs": a.warmup_epochs,
                    "milestones": a.milestones,
                    "decay": a.decay,
                    "eval_every": a.eval_every,
                },
                "target_top1": a.target_top1,
                "reached": None if a.target_top1 is None else hit is not None,
                "epoch_reached": hit["epoch"] if hit else None,
                "time_to_target_s": hit["elapsed_s"] if hit else None,
                "stopped_early": len(recs) < self.epochs,
                "final_top1": evaluated[-1]["top1"],
                "final_top5": evaluated[-1]["top5"],
                "best_top1": best,
                "train_s": sum(r["train_s"] for r in recs),
                "eval_s": sum(r["eval_s"] for r in recs),
                "elapsed_s": recs[-1]["elapsed_s"],
                "checkpoint_s": sum(r.get("checkpoint_s") or 0 for r in recs),
                "jobs": self.jobs,
                "resumed": bool(resumed),
                "timing": TIMING_NOTE + (RESUMED_NOTE if resumed else ""),
            }
        }
