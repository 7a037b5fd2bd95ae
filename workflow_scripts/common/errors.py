class StageError(Exception):
    """A failure the user can act on: the message names the file or config key at fault.

    Stage entry points turn it into one line on stderr and exit status 2 instead of a traceback.
    """


# Printed before a permanent failure's message: the training job finds it in the ranks' log.
PERMANENT_TAG = "[permanent: not retried]"


class PermanentError(StageError):
    """A failure another attempt would repeat (a build that cannot run on this GPU): the training
    job records it at once rather than resubmitting it (train/training_job.py, training.retries)."""

    def __str__(self):
        return f"{PERMANENT_TAG} {super().__str__()}"


def global_batch_problem(data, images, batch_per_gpu, ranks):
    """A dataset smaller than one global batch: every attempt fails the same way."""
    return (
        f"{data} holds {images} training images, fewer than one global batch ({batch_per_gpu} x {ranks} "
        f"ranks). Fix: lower training.batch_per_gpu (x training.fp16_batch_factor for fp16) or the GPUs, or use a "
        f"larger dataset"
    )


def run_main(main):
    """Call a stage's main(); report a StageError as a one-line message, not a traceback."""
    import sys

    try:
        main()
    except StageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
