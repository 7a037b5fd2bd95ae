"""Config strings a shell must never run (tests/test_shell_safety.py, and the pipeline's and the
SLURM cluster's runs that carry them), and the marker files that show one ran."""

from pathlib import Path

from .config import REPO

MARK = "PWNED"
# Each would run `touch PWNED-...` (in the job's working directory) if a shell read it, and the
# space made `rm -rf <run dir>` delete the sibling "victim" folder. (Quotes and backslashes are
# refused in these paths: Snakemake's cluster jobs cannot carry them safely.)
HOSTILE = {
    "data_dir": f"victim data $(touch {MARK}-dollar) `touch {MARK}-tick`;#?",
    "log_dir": f"victim logs ; touch {MARK}-semi ;",
    # $((...)) a shell would compute; config expands only $NAME and ${NAME} (common env variables)
    "results_dir": f"victim res $((6*7)) & touch {MARK}-amp | x",
}


def markers(*trees):
    """Marker files anywhere under `trees`, or at the top of the repository and home."""
    found = [p for t in trees for p in Path(t).rglob(f"{MARK}*")]
    found += [p for d in (REPO, Path.home()) for p in d.glob(f"{MARK}*")]
    return sorted(map(str, found))
