"""The data stage's plan (rules/data.smk): which dataset the workflow reads, where each format's copy
and its whole-file check's record are, and the converters' settings from config.yaml's dataset and
conversion sections. rules/common.smk builds one DataPlan when the workflow is parsed."""

import os

from workflow_scripts.common import frameworks
from workflow_scripts.common.errors import StageError
from workflow_scripts.data import convert, sources
from workflow_scripts.plan.sweep import FORMAT_OF, ConfigProblem

# The interpreter a format's jobs run with (its reader): the first framework that reads it, in the
# registry's order; two frameworks of one format share its copy.
FRAMEWORK_OF_FORMAT = {fmt: frameworks.reading(fmt)[0].name for fmt in dict.fromkeys(FORMAT_OF.values())}


def conda_env(framework):
    """The conda environment file (as the rules name it) of a job in `framework`'s interpreter."""
    return frameworks.of(framework).conda


def folders_of(files):
    """The copies' folders of conversion outputs (DataPlan.converted), for the commands that read them."""
    return [os.path.dirname(f) for f in ([files] if isinstance(files, str) else files)]


class DataPlan:
    def __init__(self, config):
        self.config, self.conversion = config, config["conversion"]
        self.data = config["data_dir"]
        self.embedded = not config["dataset"]["root"]
        self.root = f"{self.data}/embedded/ILSVRC2012" if self.embedded else config["dataset"]["root"]

    def contents(self):
        """The names under dataset.root and its label files (or its archives' or parquet shards' sizes
        and mtimes), digested: a param of the index, which reruns when an image is added, removed or
        renamed there (data/listing.py) or an archive changes; "" for the embedded dataset. A wrong
        path or a missing val label file or archive is a ConfigProblem now, not an error hours into a
        cluster job."""
        if self.embedded:
            return ""
        dataset = self.config["dataset"]
        try:
            form, files = sources.check(
                self.root, dataset["val_labels"], dataset["val_subset"], sources.archive_keys(dataset)
            )
        except StageError as exc:
            raise ConfigProblem(str(exc)) from None
        return sources.fingerprint(self.root, form, files, f"{self.data}/.dataset-listing.json")

    def archive_args(self):
        """The index's words of config dataset.train_tar, val_tar and devkit: only those set."""
        return [
            f"--{key.replace('_', '-')}={path}"
            for key, path in sources.archive_keys(self.config["dataset"]).items()
            if path
        ]

    def check_earlier_copies(self):
        """A copy converted by an earlier version of the workflow is named with the one command that
        marks it (data/upgrade.py), never marked while the workflow is parsed."""
        try:
            convert.refuse_earlier_copies(self.data, dict.fromkeys(FORMAT_OF.values()))
        except StageError as exc:
            raise ConfigProblem(str(exc)) from None

    def converted(self, fmt):
        """A conversion's output: the file it writes last into the complete copy (data/convert.py,
        DONE), not the copy's folder, which Snakemake would delete before a reconversion."""
        return f"{self.data}/{fmt}/done.json"

    def check_record(self, fmt):
        """The whole-file check's record of a format's copy (rules/data.smk, data_check)."""
        return f"{self.data}/checked/{fmt}.json"

    def tfrecord_shards(self, split):
        """'auto' is the study's 1024/128 for a real dataset, a handful for the embedded one."""
        value = self.conversion["tfrecord"][f"{split}_shards"]
        if value != "auto":
            return value
        return {"train": 4, "val": 2}[split] if self.embedded else {"train": 1024, "val": 128}[split]

    def encoding_args(self):
        return convert.encoding_argv(self.conversion)

    def cpu_job_resources(self):
        """The CPU stages' SLURM partition and time limit (config cpu_jobs), where set."""
        jobs = self.config["cpu_jobs"]
        return {k: v for k, v in (("slurm_partition", jobs["partition"]), ("runtime", jobs["time_min"])) if v}
