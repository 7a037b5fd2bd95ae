"""A TERM to the workflow's main process, where its jobs go to SLURM, stops it as Ctrl-C does: its
SLURM jobs cancelled (scancel), the workflow ended. Snakemake's own TERM is graceful: it submits
nothing more, but waits for every job it counts as running, and through SLURM that may be a job
still queued (a point waiting days for its nodes, nodes_down: wait) or a submission sbatch has not
returned from (sbatch retries while the controller refuses new jobs): its log then says "No active
jobs" at each status check for as long as that lasts, and every further TERM says the same. Even
Ctrl-C waits for those sbatch calls, and one that returns after the cancel leaves a job in the
queue that nothing waits for: so the sbatch calls still in flight are stopped first."""

import os
import signal
from pathlib import Path


def _processes(proc):
    """{pid: (its parent's pid, its command's name)} of every process /proc lists. The name is the
    file that was run (a script's own, not its interpreter's, as argv[0] would be)."""
    out = {}
    for stat in Path(proc).glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended while listed
            continue
        # the name, in parentheses, may hold spaces and parentheses: the fields after the last ')'
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        out[int(stat.parent.name)] = (int(rest[1]), name)
    return out


def submissions(pid, proc="/proc"):
    """The sbatch processes below pid (the SLURM executor runs each through a shell)."""
    processes, below, todo = _processes(proc), [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, (parent, _) in processes.items() if parent == p]
        below += kids
        todo += kids
    return [c for c in below if processes[c][1] == "sbatch"]


def install(say):
    """TERM from now on stops the workflow (this process: Snakemake's main process, once its
    scheduler has set its own handler, i.e. in the Snakefile's onstart); say(line) tells the user."""
    stopping = []

    def stop(signum, frame):
        if stopping:
            say("dlscale: already stopping: cancelling the workflow's SLURM jobs")
            return
        stopping.append(signum)
        inflight = submissions(os.getpid())
        say(
            "dlscale: TERM: stopping now, as Ctrl-C does: the workflow's SLURM jobs are cancelled (scancel)"
            + (f", and the {len(inflight)} sbatch call(s) still in flight stopped" if inflight else "")
            + "; `snakemake ... all` again later resumes"
        )
        for pid in inflight:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:  # returned meanwhile
                pass
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (Snakemake's API driven from another): its own TERM stays
        say("dlscale: TERM keeps Snakemake's meaning here (not its main thread): Ctrl-C stops the workflow")
