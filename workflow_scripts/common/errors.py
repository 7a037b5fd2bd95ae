class StageError(Exception):
    """A failure the user can act on: the message names the file or config key at fault.

    Stage entry points turn it into one line on stderr and exit status 2 instead of a traceback.
    """


def run_main(main):
    """Call a stage's main(); report a StageError as a one-line message, not a traceback."""
    import sys

    try:
        main()
    except StageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
