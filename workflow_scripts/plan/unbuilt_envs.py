"""Interpreters the config names that are not there yet: most often the GPU environments before
`bash envs/setup.sh --gpu` (about 22 GB, built last on a login node). A plan (a dry run, `snakemake
price`) needs only their paths to write the jobs' commands, so it goes on and says in one line what
is still to build and the command that builds it; a run refuses them when the workflow is parsed,
naming every one, before anything is submitted. Containers are not collected: an image is not
something setup.sh makes, and a missing one is refused as before (config_checks.interpreter_words)."""

from workflow_scripts.plan.sweep import ConfigProblem

GPU_SETUP = "bash envs/setup.sh --gpu"


def plans_only(argv):
    """Whether this snakemake command line only plans: a dry run, or `price` its only target.
    Snakemake tells a Snakefile neither while parsing it (workflow.dryrun stays False until its
    executor is chosen, after the parse), so the words are read with snakemake's own parser, which
    knows every option and plugin option and so which words are targets."""
    from snakemake.cli import get_argument_parser

    try:
        args, _ = get_argument_parser().parse_known_args(argv[1:])
    except SystemExit:  # not a snakemake command line (the API called from a script): a run
        return False
    return bool(args.dryrun) or set(args.targets or []) == {"price"}


class Unbuilt:
    def __init__(self, planning):
        """planning: plans_only's answer for this invocation."""
        self.planning = planning
        self.missing = {}  # config key -> (interpreter path, why it cannot be used, the setup command)
        self.lacking = []  # what a built interpreter still lacks (TensorRT in an INT8 route), each with its fix

    def note_lacking(self, problem):
        """A built interpreter without a package a stage needs (plan/tensorrt_check.py): a plan names
        it and goes on, a run refuses it with the interpreters still to build."""
        self.lacking.append(problem)

    def note(self, key, path, problem, setup):
        self.missing.setdefault(key, (path, problem, setup))

    def command(self):
        """One command for all of them: --gpu also builds the CPU environments."""
        commands = {setup for *_, setup in self.missing.values()}
        return GPU_SETUP if GPU_SETUP in commands else sorted(commands)[0]

    def names(self):
        """Each key and path, and what more its problem says (a link whose target is gone)."""
        return ", ".join(
            f"{key} ({path}){problem.removeprefix(f'{path} does not exist')}"
            for key, (path, problem, _) in self.missing.items()
        )

    def settle(self):
        """None where all are there; else, planning, the lines to print; else a ConfigProblem."""
        if not self.missing and not self.lacking:
            return None
        if self.planning:
            return "\n".join(
                [*self._to_build(), *(f"dlscale: {p}: the plan goes on, a run refuses it" for p in self.lacking)]
            )
        problems = []
        if self.missing:
            where = "; DLSCALE_ENVS_DIR=<folder> builds them off the clone" if self.command() == GPU_SETUP else ""
            problems.append(
                "; ".join(f"config {key}: {problem}" for key, (_, problem, _) in self.missing.items())
                + f": run '{self.command()}'{where}, or point each key at an interpreter (or a container) that has "
                f"the packages of envs/ (a dry run and `snakemake price` plan without them)"
            )
        raise ConfigProblem("; and ".join([*problems, *self.lacking]))

    def _to_build(self):
        if not self.missing:
            return []
        where = "; DLSCALE_ENVS_DIR=<folder> builds them off the clone" if self.command() == GPU_SETUP else ""
        return [
            f"dlscale: environments still to build: {self.names()}: the plan goes on without them, a run "
            f"refuses them; build them with '{self.command()}'{where} (docs/gpu-environments.md)"
        ]
